"""Real clients through every hunting front, in the accept path (agents with
`always`) and the refuse-then-final path (`static:0`: every offer refused, the
final served by the other backend), counting what reached the apps.

Other real-client cases live beside the behaviour they test: chunked uploads
and HTTP/1.0 in test_fronts.py, many headers and slowloris in test_agent.py
and test_fronts.py."""

import os
import re
import socket
import subprocess
import time
import uuid

import pytest
from harness import FRONTS, path_count, request, start_backends, start_front, wait_until
from harness.apps import SseApp, WsEchoApp, start_app_backends
from workload_hash import fnv64

PATHS = {"accept": "always", "refuse-then-final": "static:0"}


@pytest.fixture(params=[(k, p) for k in FRONTS for p in PATHS], ids=lambda kp: f"{kp[0]}-{kp[1]}")
def workloads(request, procs, addrs):
    """Two workload apps behind agents (accepting or refusing every offer) and a
    front of each kind over them: (backends, front)."""
    kind, path = request.param
    bs = start_backends(procs, addrs, 2, PATHS[path])
    return bs, start_front(kind, procs, addrs, bs)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", FRONTS)
def test_websocket_echo(procs, addrs, kind, path):
    # The handshake is a GET without a body: offered, maybe refused, then the
    # final's app answers 101 and the agent joins the two connections.
    from websockets.sync.client import connect

    bs = start_app_backends(procs, addrs, 2, PATHS[path], WsEchoApp)
    f = start_front(kind, procs, addrs, bs)
    refused0 = sum(b.refused() for b in bs)
    for i in range(3):
        with connect(f"ws://{f.listen}/ws/{i}", open_timeout=10, close_timeout=5) as ws:
            for j in range(3):
                ws.send(f"hello {i}.{j}")
                assert ws.recv(timeout=10) == f"hello {i}.{j}"
    assert sum(b.app_proc.handshakes for b in bs) == 3, "each handshake reached exactly one app, once"
    assert sum(b.refused() for b in bs) - refused0 == (3 if path == "refuse-then-final" else 0)
    # an upgraded session holds no in-flight slot: the agents are idle again
    assert all(b.metrics()["huntlb_inflight"] == 0 for b in bs)


def read_events(addr: str, n: int, every_ms: int, timeout: float = 10) -> tuple[int, list[float]]:
    """GET /events over HTTP/1.1: the status and each event's delay (arrival
    minus the time the app wrote it, both this process's monotonic clock)."""
    host, port = addr.rsplit(":", 1)
    delays, buf, status = [], b"", None
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(f"GET /events?n={n}&every_ms={every_ms} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
        deadline = time.monotonic() + timeout
        while len(delays) < n and time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            now = time.monotonic()
            buf += chunk
            if status is None and b"\r\n" in buf:
                status = int(buf.split(b" ", 2)[1])
            for m in re.finditer(rb"data: (\d+\.\d+)\n", buf):
                delays.append(now - float(m.group(1)))
            buf = buf[buf.rfind(b"\n\n") + 2:] if b"\n\n" in buf else buf
    return status, delays


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", FRONTS)
def test_server_sent_events_arrive_as_written(procs, addrs, kind, path):
    # A streamed response must not be held back: HAProxy without
    # `option http-no-delay` delayed each event ~0.21 s for HTTP/1.1 clients.
    bs = start_app_backends(procs, addrs, 2, PATHS[path], SseApp)
    f = start_front(kind, procs, addrs, bs)
    status, delays = read_events(f.listen, n=6, every_ms=150)
    assert status == 200 and len(delays) == 6, (status, delays)
    assert sum(b.app_proc.streams for b in bs) == 1
    # 150 ms apart, so a held-back event shows as a delay near 0.2 s; on loopback
    # an event passes three processes in a few milliseconds
    assert max(delays) < 0.1, [round(d, 3) for d in delays]
    assert request(f.listen, "GET", "/after")[0] == 200


def curl(*args: str, data: bytes | None = None) -> tuple[int, bytes]:
    """Run curl (stdin: `data`); the status it reports and the body it got."""
    out = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", *args], input=data, capture_output=True, timeout=30)
    body, _, code = out.stdout.rpartition(b"\n")
    return int(code or 0), body


def test_expect_100_continue_upload(workloads):
    # curl waits for `100 Continue` before sending a body (forced here for 8 KB).
    bs, f = workloads
    body = os.urandom(8000)
    p = f"/continue/{uuid.uuid4()}"
    code, out = curl("-H", "Expect: 100-continue", "--data-binary", "@-", f"http://{f.listen}{p}", data=body)
    assert code == 200, out[:200]
    assert b'"len":8000' in out and f'"fnv64":"{fnv64(body):016x}"'.encode() in out
    assert path_count(bs, p) == 1


def test_http2_client(workloads):
    # HTTP/2 from the client (cleartext, prior knowledge); the front speaks
    # HTTP/1.1 to the agents. A GET and a POST with a length.
    bs, f = workloads
    p = f"/h2/{uuid.uuid4()}"
    code, _ = curl("--http2-prior-knowledge", f"http://{f.listen}{p}")
    assert code == 200 and path_count(bs, p) == 1
    body = os.urandom(5000)
    code, out = curl("--http2-prior-knowledge", "--data-binary", "@-", f"http://{f.listen}{p}-post", data=body)
    assert code == 200 and f'"fnv64":"{fnv64(body):016x}"'.encode() in out
    assert path_count(bs, f"{p}-post") == 1


def test_ab_keepalive(workloads):
    # ab -k, the tool seeds 000 and 004 measure with: HTTP/1.0 with keep-alive.
    bs, f = workloads
    out = subprocess.run(["ab", "-k", "-n", "2000", "-c", "20", f"http://{f.listen}/ab"], capture_output=True, text=True, timeout=60).stdout
    field = lambda name: int(re.search(rf"^{name}:\s+(\d+)", out, re.M).group(1))  # noqa: E731
    assert field("Complete requests") == 2000 and field("Failed requests") == 0, out
    assert "Non-2xx responses" not in out, out
    assert path_count(bs, "/ab") == 2000


def test_client_disconnect_is_not_replayed(workloads):
    # A client gives up on a slow request: it reached one app once and is never
    # re-sent elsewhere; the agents' in-flight count comes back to 0.
    bs, f = workloads
    p = f"/gone/{uuid.uuid4()}"
    host, port = f.listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(f"POST {p}?work_ms=1500 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello".encode())
        # At the app itself (an agent counts a request in flight a moment
        # before its app has it: a client gone then leaves nothing to replay,
        # and nothing for this test to see).
        wait_until(lambda: path_count(bs, p) == 1, timeout=5, what="at the app")
    time.sleep(2.0)  # past the app's work: a replay would have arrived by now
    assert path_count(bs, p) == 1
    wait_until(lambda: all(b.metrics()["huntlb_inflight"] == 0 for b in bs), timeout=5, what="nothing in flight")
    assert request(f.listen, "GET", "/after")[0] == 200


def test_pipelined_requests_answered_in_order_once(workloads):
    # Three requests written at once on one connection (HTTP/1.1 pipelining):
    # three answers, in order, each request processed once.
    from harness import raw_exchange

    bs, f = workloads
    paths = [f"/pipe/{i}/{uuid.uuid4()}" for i in range(3)]
    out = raw_exchange(f.listen, b"".join(f"GET {p} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for p in paths), timeout=10)
    assert out.count(b"HTTP/1.1 200") == 3, out[:500]
    assert [out.find(p.encode()) for p in paths] == sorted(out.find(p.encode()) for p in paths), "answers out of order"
    assert all(path_count(bs, p) == 1 for p in paths)


@pytest.mark.parametrize("kind", FRONTS)
def test_conflicting_content_length_and_chunked_has_one_meaning(procs, addrs, kind):
    # Both Content-Length and Transfer-Encoding: chunked: the request-smuggling
    # shape. RFC 9112 6.1 lets a server reject it, or let chunked win and close
    # the connection after. Envoy rejects it (400, nothing reaches an app);
    # HAProxy reads it as chunked, removes the length, passes it once and
    # closes the connection. Either way no second request hides in the body.
    from harness import raw_exchange

    bs = start_backends(procs, addrs, 2, "always")
    f = start_front(kind, procs, addrs, bs)
    p = f"/smuggle/{uuid.uuid4()}"
    hidden = f"/hidden/{uuid.uuid4()}"
    out = raw_exchange(f.listen, (f"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                                  f"5\r\nhello\r\n0\r\n\r\nGET {hidden} HTTP/1.1\r\nHost: x\r\n\r\n").encode(), timeout=10)
    status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.1 ") else None
    if kind == "envoy":
        assert status == 400 and path_count(bs, p) == 0, out[:300]
    else:
        assert status == 200 and b'"len":5' in out and path_count(bs, p) == 1, out[:300]
        assert b"connection: close" in out.lower()
    # the connection ends there: the bytes after the body are not a request
    assert path_count(bs, hidden) == 0 and out.count(b"HTTP/1.1 ") == 1, out
    assert request(f.listen, "GET", "/after")[0] == 200
