"""The workload app behaves like SRLB's Apache servers: n workers, a bounded
backlog that fails fast when full, emulated cores shared by busy workers."""

import threading
import time

from harness import app_stats, request, wait_until


def test_full_backlog_fails_fast_and_clearly(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, workers=1, backlog=1, cores=1, demand="const:0")
    results = []
    ts = [threading.Thread(target=lambda: results.append(request(app, "GET", "/slow?work_ms=1500")[0])) for _ in range(2)]
    for t in ts:
        t.start()
    wait_until(lambda: app_stats(app)["busy"] == 1 and app_stats(app)["waiting"] == 1, what="one busy, one waiting")
    t0 = time.monotonic()
    status, h, body = request(app, "GET", "/third")
    assert time.monotonic() - t0 < 1.0, "a full backlog must answer at once, not queue"
    assert (status, h.get("workload"), body) == (503, "backlog-full", b"workload: backlog full\n")
    for t in ts:
        t.join(timeout=10)
    assert sorted(results) == [200, 200]
    s = app_stats(app)
    assert s["backlog_rejected"] == 1 and s["served"] == 2 and "/third" not in s["paths"]


def test_busy_time_integral_counts_worker_seconds(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, workers=4, cores=64, demand="const:0")
    ts = [threading.Thread(target=request, args=(app, "GET", "/w?work_ms=300")) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=10)
    s = app_stats(app)
    # 3 requests x 0.3 s of a worker each: 0.9 worker-seconds (plus a little overhead)
    assert 0.89 <= s["busy_integral_s"] < 1.2, s["busy_integral_s"]
    assert s["busy_max"] == 3 and s["busy"] == 0


def test_request_abandoned_mid_work_is_counted_and_frees_its_worker(procs, addrs):
    # A client (or a proxy resetting its upstream) goes away while the app works:
    # the request was processed (its path counts, for the exactly-once tests) and
    # its worker is free again. Completion-time counting missed it, and the
    # worker stayed busy for the rest of the run.
    import socket

    host = addrs.host()
    _, app = procs.workload(host, workers=2, cores=2, demand="const:0")
    h, port = app.rsplit(":", 1)
    with socket.create_connection((h, int(port)), timeout=5) as s:
        s.sendall(b"GET /gone?work_ms=3000 HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: app_stats(app)["busy"] == 1, what="at work")
    wait_until(lambda: app_stats(app)["busy"] == 0, timeout=2, what="worker freed when the connection closed")
    s = app_stats(app)
    assert s["paths"].get("/gone") == 1 and s["served"] == 0
