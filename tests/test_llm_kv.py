"""The model server's KV-cache use in the agent's load (`load = "llm"`,
`llm_metrics_url`, policy/src/llm.rs KvBound): a server whose KV cache is at
or past `llm_kv_busy_at` counts as full (b = max(b, workers)), whatever its
counts say; a read that is stale, or a page that is broken or hostile, leaves
the counts alone to decide.

Real agents beside emulated model servers (`huntlb-llm --kv-blocks`, a small
cache filled by one long generation); where the request ran is counted at the
servers (`vllm:request_success_total`). The attacker's page is a fake metrics
server on the app's host."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from harness import OFFER, Backend, agent_default, binary, request, wait_http, wait_until
from harness.testbed import FleetSpec, Loopback, Testbed, model_server
from test_llm import events, metrics, stream

SEATS = 4            # max_num_seqs, the agents' workers, and static:SEATS
KV_BLOCKS = 16       # 256 tokens of KV cache (16-token blocks)
HOG = "x" * 800      # 200 prompt tokens: 13 blocks once prefilled, 0.8125 of the cache
HOG_TOKENS = 40      # at most 15 blocks (0.9375): the cache is never wholly full, an offer of one block still runs
BUSY_AT = 0.75
FULL, USAGE = "huntlb_llm_kv_full", "huntlb_llm_kv_usage_ratio"
POLLS = 'huntlb_llm_kv_polls_total{result="%s"}'


def servers(procs, addrs, n: int, kv: bool, tier: bool = True) -> list[Backend]:
    """n emulated servers of KV_BLOCKS blocks (a token a second: a generation
    holds its blocks until its client leaves), an agent beside each with
    load = llm, its KV rule on if `kv`."""
    def own(b) -> dict:
        return {"llm_metrics_url": f"http://{b.app}/metrics", "llm_metrics_poll_ms": 20, "llm_kv_busy_at": BUSY_AT} if kv else {}
    spec = FleetSpec([{"max_num_seqs": SEATS, "kv_blocks": KV_BLOCKS, "itl_ms": 1000}] * n, policy=f"static:{SEATS}",
                     agent={"load": "llm", "workers": SEATS, "app_stall_ms": 0}, each=own, tier=tier)
    return Testbed(spec, Loopback(procs, addrs, model_server)).start().backends


def served(bs) -> list[float]:
    return [metrics(b.app)["vllm:request_success_total"] for b in bs]


def offer(b: Backend) -> tuple[int, dict]:
    status, h, out = request(b.agent, "POST", "/v1/completions", headers={**OFFER, "content-type": "application/json"},
                             body=json.dumps({"prompt": "the offer", "max_tokens": 1}).encode())
    if status == 200:
        assert json.loads(out)["usage"]["completion_tokens"] == 1
    return status, h


@pytest.mark.parametrize("kv", [True, False])
def test_a_server_whose_kv_cache_is_full_forwards_an_offer_its_counts_would_keep(procs, addrs, kv):
    a, b = bs = servers(procs, addrs, 2, kv)
    # a: one long generation holding most of its cache; b: one short one. One request each by count.
    hog, rh = stream(a.agent, {"prompt": HOG, "max_tokens": HOG_TOKENS})
    other, ro = stream(b.agent, {"prompt": "short", "max_tokens": HOG_TOKENS})
    try:
        assert rh.status == 200 and events(rh, 1) and ro.status == 200 and events(ro, 1)
        assert metrics(a.app)["vllm:kv_cache_usage_perc"] >= 0.8 > 0.1 > metrics(b.app)["vllm:kv_cache_usage_perc"]
        if kv:
            wait_until(lambda: a.metrics()[FULL] == 1, what="a's agent reading its full cache")
            m = a.metrics()
            assert m[USAGE] >= 0.8 and m["huntlb_inflight"] == 1 and m["huntlb_busy"] == SEATS
            assert b.metrics()[FULL] == 0 and b.metrics()["huntlb_busy"] == 1
        else:
            assert FULL not in a.metrics() and a.metrics()["huntlb_busy"] == 1
        done0 = served(bs)
        status, h = offer(a)
        assert status == 200
        done = [x - y for x, y in zip(served(bs), done0)]
        # by KV the offer ran at b, the peer with room; by counts alone it stayed at a
        assert done == ([0, 1] if kv else [1, 0]), done
        assert h.get("hunt-served-by") == f"agent-{(b if kv else a).host}"
        assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] == (1 if kv else 0)
        if not kv:
            return
        # peers see a full too: b holds SEATS - 1 by count, less than a's SEATS by KV (more than a's
        # 1 by count), so an offer at b stays at b, the least its agent hears of
        more = [stream(b.agent, {"prompt": f"short {i}", "max_tokens": HOG_TOKENS}) for i in range(SEATS - 2)]
        try:
            assert all(r.status == 200 and events(r, 1) for _, r in more)
            wait_until(lambda: b.metrics()["huntlb_busy"] == SEATS - 1, what="b's count")
            assert a.metrics()["huntlb_busy"] == SEATS and a.metrics()["huntlb_inflight"] == 1
            done0 = served(bs)
            status, h = offer(b)
            assert status == 200 and h.get("hunt-served-by") == f"agent-{b.host}"
            assert [x - y for x, y in zip(served(bs), done0)] == [0, 1]
            assert b.metrics()['huntlb_forwards_total{outcome="sent"}'] == 0
        finally:
            for c, _ in more:
                c.close()
        # (b) the hog leaves: a's cache empties, the next read says so, and offers are kept at a again
        hog.close()
        wait_until(lambda: metrics(a.app)["vllm:kv_cache_usage_perc"] == 0, what="a's cache freed")
        wait_until(lambda: a.metrics()[FULL] == 0, what="a's agent reading its emptied cache")
        assert a.metrics()["huntlb_busy"] == 0
        done0 = served(bs)
        status, _ = offer(a)
        assert status == 200
        assert [x - y for x, y in zip(served(bs), done0)] == [1, 0]
        assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] == 1
    finally:
        hog.close()
        other.close()


class FakeMetrics:
    """A model server's metrics page gone wrong, on the app's host: `mode`
    says how, switched while the agent polls it. Each answer is bounded (the
    slow page drips for at most 60 s, the huge one stops at 100 MiB or when
    the agent hangs up); `close` ends them all."""

    def __init__(self, host: str, port: int):
        self.mode = "good"
        self.stop = threading.Event()
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                mode = fake.mode
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/plain; version=0.0.4")
                    self.end_headers()
                    if mode == "huge":
                        # 100 MiB of comments, then a sample that would make the server full if ever read
                        line = b"# " + b"z" * 1021 + b"\n"
                        for _ in range(100 * 1024):
                            if fake.stop.is_set():
                                return
                            self.wfile.write(line)
                        self.wfile.write(b"vllm:kv_cache_usage_perc 1.0\n")
                    elif mode == "slow":
                        # the value at once, and a page that never ends
                        self.wfile.write(b"vllm:kv_cache_usage_perc 1.0\n")
                        for _ in range(600):
                            if fake.stop.wait(0.1):
                                return
                            self.wfile.write(b"# more\n")
                            self.wfile.flush()
                    else:
                        self.wfile.write(PAGES[mode])
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer((host, port), H)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


PAGES = {
    "good": b'# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m"} 0.95\n',
    "malformed": b'vllm:kv_cache_usage_perc{model_name="m} 0.95\n\x00\xff garbage {{{\n',
    "nan": b'vllm:kv_cache_usage_perc{model_name="m"} NaN\n',
    "negative": b'vllm:kv_cache_usage_perc{model_name="m"} -0.5\n',
    "two": b'vllm:kv_cache_usage_perc{model_name="m"} 2.0\n',
    "inf": b'vllm:kv_cache_usage_perc +Inf\n',
    "missing": b'vllm:num_requests_running{model_name="m"} 0\nvllm:kv_cache_usage_percentage 1.0\n',
}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("mode,result", [("huge", "failed"), ("slow", "failed"), ("malformed", "rejected"), ("nan", "rejected"),
                                         ("negative", "rejected"), ("two", "rejected"), ("inf", "rejected"), ("missing", "rejected")])
def test_a_broken_or_hostile_metrics_page_leaves_the_counts_to_decide(procs, addrs, mode, result):
    # The attacker (or a broken server) owns the metrics page. A good page
    # first (0.95: full), then the bad one: the agent counts each bad read,
    # never takes its value, lets the good one go stale, and serves by counts.
    host = addrs.host()
    llm = f"{host}:8000"
    lp = procs.start(f"llm-{host}", [binary("huntlb-llm"), "--listen", llm, "--max-num-seqs", str(SEATS), "--model", "m"])
    wait_http(llm, "/health", proc=lp)
    page = FakeMetrics(host, 8001)
    try:
        ap, agent, admin = procs.agent(host, llm, load="llm", workers=SEATS, policy=f"static:{SEATS}", app_stall_ms=0,
                                       llm_metrics_url=f"http://{host}:8001/metrics", llm_metrics_poll_ms=20, llm_kv_busy_at=0.9)
        b = Backend(host, llm, agent, admin, lp, ap)
        wait_until(lambda: b.metrics()[FULL] == 1, what="the good page read: full")
        assert b.metrics()[USAGE] == 0.95 and b.metrics()["huntlb_busy"] == SEATS
        status, h = offer(b)
        assert status == 425 and h.get("hunt") == "busy"  # an idle server by count, full by its page
        page.mode = mode
        base = b.metrics()[POLLS % result]
        wait_until(lambda: b.metrics()[POLLS % result] >= base + 1, what=f"a {mode} page counted {result}")
        ok0 = b.metrics()[POLLS % "ok"]
        wait_until(lambda: b.metrics()[POLLS % result] >= base + 3, what=f"more {mode} pages counted {result}")
        # the last good read ages out: the counts alone decide again
        wait_until(lambda: b.metrics()[FULL] == 0, what="the good read stale")
        m = b.metrics()
        assert m[POLLS % "ok"] == ok0  # no bad page was taken for a read
        assert m[USAGE] == 0.95 and m["huntlb_busy"] == 0  # the last good value, held but stale
        done0 = metrics(llm)["vllm:request_success_total"]
        status, _ = offer(b)
        assert status == 200 and metrics(llm)["vllm:request_success_total"] == done0 + 1
        assert ap.alive() and "panicked" not in ap.log()
        # memory bounded: a page is cut at 2 MiB (the huge one is 100 MiB, read at most once a poll)
        assert rss_kib(ap.pid) < 64 * 1024, rss_kib(ap.pid)
        # and a good page again is read again
        page.mode = "good"
        wait_until(lambda: b.metrics()[FULL] == 1, what="the good page read again")
    finally:
        page.close()


@pytest.mark.parametrize("opts,key", [
    ({"load": "inflight", "llm_metrics_url": "http://{host}:8000/metrics"}, "llm_metrics_url"),
    ({"load": "llm", "llm_metrics_url": "http://127.9.9.9:8000/metrics"}, "llm_metrics_url"),
    ({"load": "llm", "llm_metrics_url": "http://localhost:8000/metrics"}, "llm_metrics_url"),
    ({"load": "llm", "llm_metrics_url": "http://{host}:8000/metrics", "llm_kv_busy_at": 1.5}, "llm_kv_busy_at"),
    ({"load": "llm", "llm_metrics_url": "http://{host}:8000/metrics", "llm_kv_busy_at": 0}, "llm_kv_busy_at"),
    ({"load": "llm", "llm_metrics_url": "http://{host}:8000/metrics", "llm_metrics_poll_ms": 0}, "llm_metrics_poll_ms"),
    ({"load": "llm", "llm_kv_busy_at": 0.9}, "llm_kv_busy_at"),
])
def test_config_errors_name_the_key(procs, addrs, opts, key):
    host = addrs.host()
    argv = [binary("huntlb-agent"), "--listen", f"{host}:8080", "--admin", f"{host}:9901", "--app", f"{host}:8000"]
    for k, v in opts.items():
        argv += [f"--{k.replace('_', '-')}", str(v).format(host=host)]
    p = procs.start(f"agent-{key}", argv)
    assert p.wait(10) == 2
    log = p.log()
    assert f"config key `{key}`" in log, log


def test_the_bench_arms_over_agents_with_the_kv_rule_run_them(procs, addrs):
    # bench/llm_gateways.py's huntk1/huntk2/huntk4: the tier fronts over a
    # fourth set of agents beside the same servers, reading each server's KV use
    import llm_gateways as bench
    from benchlib.llmfleet import gateways, llm_agents, model_fleet
    assert bench.arms_over("kv") == ("huntk1", "huntk2", "huntk4") and bench.one_of_kind("huntk4") == "huntk1"
    assert not bench.ARMS["huntk2"].by_default
    fleet = model_fleet(procs, addrs, 2, 2, 0.1)
    llm = llm_agents(procs, fleet, 2)
    kv = llm_agents(procs, fleet, 2, kv_busy_at=agent_default("llm_kv_busy_at"))
    fleets = {"counts": fleet, "llm": llm, "kv": kv}
    assert bench.fleet_of("huntk2", fleets) is kv and bench.fleet_of("hunt2t", fleets) is llm
    assert {a.agent for a in kv}.isdisjoint(a.agent for a in llm + fleet)
    # each reads its own server's page
    wait_until(lambda: all(a.metrics()[POLLS % "ok"] >= 2 for a in kv), what="the kv agents reading their servers")
    assert all(a.metrics()[FULL] == 0 and a.metrics()[POLLS % "failed"] == a.metrics()[POLLS % "rejected"] == 0 for a in kv)
    assert FULL not in llm[0].metrics()
    arm = bench.ARMS["huntk2"]
    g0, g1 = gateways(procs, addrs, bench.fleet_of("huntk2", fleets), arm.kind, arm.gateways, arm.proxy)  # as run_arm builds them
    before = served(fleet)
    for i in range(4):
        status, _, _ = request((g0, g1)[i % 2].target, "POST", "/v1/completions", headers={"content-type": "application/json"},
                               body=json.dumps({"prompt": f"q {i}", "max_tokens": 2}).encode())
        assert status == 200
    assert sum(served(fleet)) - sum(before) == 4
    through = "huntlb_request_duration_seconds_count"
    assert sum(x.metrics()[through] for x in kv) == 4 and sum(x.metrics()[through] for x in llm + fleet) == 0
