"""The agent beside a real LLM engine: llama-cpp-python's OpenAI
server (llama.cpp underneath) on a tiny random-weight model (`make
setup-llama`), two servers, each with its agent, the agents a forwarding
tier. The server runs one request at a time (workers = 1) and has no
/metrics, so arrivals are counted from its own access log (uvicorn's
`"POST /v1/completions HTTP/1.1" 200` lines), not by the agents.

llama-cpp-python's server ends the stream it is running when another request
arrives (`interrupt_requests`, on by default): two requests at one server
cut the first short. The tier keeps a second request away from a busy
server, so no stream is cut; the tests below check both."""

import http.client
import importlib.util
import json
import os
import sys
import time

import pytest
from harness import OFFER, ROOT, Backend, wait_http, wait_until
from harness.testbed import FleetSpec, Loopback, Testbed
from test_llm import events, stream
from test_llm_gateway import gateway

MODEL = os.environ.get("HUNTLB_LLAMA_MODEL", str(ROOT / ".cache" / "llama" / "tiny.gguf"))
pytestmark = [
    pytest.mark.llama,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama-cpp-python not installed: run make setup-llama (make test-llama does)"),
    pytest.mark.skipif(not os.path.exists(MODEL), reason=f"no model at {MODEL}: run make setup-llama"),
]

# The model's context (scripts/tiny_gguf.py): a stream of up to N_CTX tokens.
N_CTX = 32768
LONG = {"prompt": "hold", "max_tokens": N_CTX - 64, "temperature": 0}
# Run out, LONG would take minutes: llama-cpp-python re-reads the whole
# completion at each token (measured once while writing this, the server
# alone: 2000 tokens took 8.6 s, the first 100 took 0.1 s; even at that first
# pace its 32704 would take 30 s). A stream that
# ends within BOUND after LONG's client left did not wait for LONG to end.
BOUND = 20.0


def arrivals(proc) -> int:
    """POSTs of completions the server answered, from its own access log."""
    return sum('"POST /v1/completions HTTP/1.1" 200' in line for line in proc.log().splitlines())


def llama_server(procs, host: str, interrupt: bool = True):
    """One llama-cpp-python server on host:8000 (one thread: the box has 2
    cores and two servers); -> (its process, its address)."""
    addr = f"{host}:8000"
    p = procs.start(f"llama-{host}", [sys.executable, "-m", "llama_cpp.server", "--model", MODEL, "--host", host,
                                       "--port", "8000", "--n_ctx", str(N_CTX), "--n_threads", "1",
                                       "--n_threads_batch", "1", "--seed", "43", "--verbose", "False",
                                       "--interrupt_requests", str(interrupt)],
                    # its access log goes to stdout, a file here: line by line, as it happens
                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wait_http(addr, "/v1/models", proc=p, timeout=60)
    return p, addr


def real_fleet(procs, addrs, n: int = 2, interrupt: bool = True) -> list[Backend]:
    """n hosts, each a llama server and an agent beside it (one seat: the
    server runs one request at a time), the agents a forwarding tier. Both
    seen margins 0: at the default 1 an agent keeps a try while it holds at
    most one more than the try's front knows of, and one more is the whole of
    a one-seat server (through the tier front, a's agent kept every try the
    front sent it, beside a stream the front had not seen)."""
    spec = FleetSpec([{"interrupt": interrupt}] * n, policy="dynamic:seen_margin=0",
                     agent={"forward_seen_margin": 0, "workers": 1, "app_stall_ms": 0})
    return Testbed(spec, Loopback(procs, addrs, llama_server)).start().backends


def chunks(evs: list[str]) -> list[dict]:
    """A whole stream's chunks. llama-cpp-python sends one a token, then one
    more with no text and the finish_reason (the emulator puts it on the
    last token's), then [DONE]."""
    assert evs and evs[-1] == "[DONE]", evs[-3:]
    return [json.loads(e) for e in evs[:-1]]


def tokens(evs: list[str], n: int) -> list[str]:
    """The texts of a whole stream of n tokens, held to its shape."""
    cs = chunks(evs)
    assert len(cs) == n + 1, len(cs)
    assert [c["choices"][0]["finish_reason"] for c in cs] == [None] * n + ["length"]
    assert cs[-1]["choices"][0]["text"] == ""
    return [c["choices"][0]["text"] for c in cs[:-1]]


def streamed(addr: str, body: dict, headers: dict | None = None) -> tuple[list[str], dict]:
    """A whole stream: its SSE data lines and its response headers, read to
    the response's end. llama-cpp-python ends it 1-3 ms after `[DONE]`, and
    until then its agent counts it: a request sent on `[DONE]` finds that
    server still busy (docs/llm.md § 6)."""
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        c.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
                  headers={"content-type": "application/json", **(headers or {})})
        r = c.getresponse()
        assert r.status == 200 and r.getheader("content-type", "").startswith("text/event-stream"), r.status
        evs = events(r)
        r.read()
        return evs, {k.lower(): v for k, v in r.getheaders()}
    finally:
        c.close()


def test_a_stream_through_the_agent_is_the_servers_own_token_by_token(procs, addrs):
    (a, _) = real_fleet(procs, addrs)
    body = {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}
    direct, _ = streamed(a.app, body)
    via, h = streamed(a.agent, body)
    again, _ = streamed(a.app, body)
    # greedy decoding on the same prompt: the server repeats itself, so the
    # agent's stream can be held to it token by token
    assert tokens(direct, 48) == tokens(again, 48)
    assert tokens(via, 48) == tokens(direct, 48)
    assert all(len(t) == 1 for t in tokens(via, 48))  # one byte a token: none merged, none split
    assert h["hunt-served-by"] == a.id
    assert arrivals(a.app_proc) == 3


def test_a_busy_servers_offer_is_forwarded_and_runs_once_and_the_held_stream_is_not_cut(procs, addrs):
    a, b = real_fleet(procs, addrs)
    held_c, held = stream(a.agent, LONG)  # a's one seat: a stream no front sent
    try:
        assert len(events(held, 3)) == 3
        wait_until(lambda: a.metrics()["huntlb_inflight"] == 1, what="a's seat taken")
        body = {"prompt": "question", "max_tokens": 16, "temperature": 0}
        evs, h = streamed(a.agent, body, OFFER)
        assert h["hunt-served-by"] == b.id
        assert tokens(evs, 16) == tokens(streamed(b.app, body)[0], 16)  # b's own answer, whole
        assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] == 1
        # each ran once, the second at b only (the servers' own logs)
        assert (arrivals(a.app_proc), arrivals(b.app_proc)) == (1, 2)  # b: the offer, then the check just above
        # a's stream runs on: had the offer reached a's server, it would have
        # ended the held stream ([DONE] after one more chunk, no finish_reason)
        more = events(held, 20)
        assert len(more) == 20 and "[DONE]" not in more
    finally:
        held_c.close()


def test_two_requests_at_one_server_cut_the_first_short(procs, addrs):
    # What the tier keeps from happening (above): the engine's own behaviour.
    host = addrs.host()
    p, addr = llama_server(procs, host)
    held_c, held = stream(addr, LONG)
    try:
        assert len(events(held, 3)) == 3
        evs, _ = streamed(addr, {"prompt": "second", "max_tokens": 4, "temperature": 0})
        assert len(tokens(evs, 4)) == 4
        rest = events(held)  # to its end: [DONE] soon after the second arrived
        assert rest[-1] == "[DONE]" and len(rest) < 1000, len(rest)
        assert json.loads(rest[-2])["choices"][0]["finish_reason"] is None
    finally:
        held_c.close()


def test_a_client_that_leaves_mid_stream_frees_the_seat(procs, addrs):
    # interrupt_requests off: the server finishes what it runs before it
    # takes the next, so the next stream ends soon only if the one whose
    # client left was stopped (run out, it is N_CTX tokens: see BOUND).
    a, _ = real_fleet(procs, addrs, interrupt=False)
    c, r = stream(a.agent, LONG)
    assert len(events(r, 3)) == 3
    c.close()
    wait_until(lambda: "Disconnected from client" in a.app_proc.log(), what="the server seeing its client leave")
    t0 = time.monotonic()
    evs, h = streamed(a.agent, {"prompt": "next", "max_tokens": 8, "temperature": 0})
    took = time.monotonic() - t0
    assert len(tokens(evs, 8)) == 8 and h["hunt-served-by"] == a.id
    assert arrivals(a.app_proc) == 2
    assert took < BOUND, took


def test_through_a_haproxy_tier_front_no_stream_reaches_the_busy_server(procs, addrs):
    # The front (HAProxy 2.6, leastconn + hunt-pass) sees no load at either
    # server, so some of these land on a's agent; each must be passed on to
    # b (a's held stream would be cut, and a's log would count it, were it not).
    # Each is sent once the one before has ended (`streamed`): b is free then,
    # and a's agent must know it (llama-cpp-python sends [DONE] 1-3 ms before
    # the response ends, and b's agent counts the stream until it ends).
    a, b = bs = real_fleet(procs, addrs)
    front = gateway("haproxy-2.6", "front-tier.cfg", procs, addrs, bs)
    # Until an offer at a decides by the counts, b's count reaches a in beats
    # only, up to fleet_heartbeat_ms old (one beat sent while b served the
    # gateway's GETs above says 1). The first such offer, here while a is
    # idle (kept), makes a want b's every change, and b sends its count then.
    evs, h = streamed(a.agent, {"prompt": "first", "max_tokens": 2, "temperature": 0}, OFFER)
    assert len(tokens(evs, 2)) == 2 and h["hunt-served-by"] == a.id
    wait_until(lambda: b.metrics()["huntlb_fleet_peers_wanting"] == 1, what="b told that a wants its changes")
    held_c, held = stream(a.agent, LONG)
    try:
        assert len(events(held, 3)) == 3
        wait_until(lambda: a.metrics()["huntlb_inflight"] == 1, what="a's seat taken")
        body = {"prompt": "through the gateway", "max_tokens": 8, "temperature": 0}
        want = None
        served = []
        for _ in range(6):
            evs, h = streamed(front.listen, body)
            got = tokens(evs, 8)
            assert want is None or got == want
            want = got
            served.append(h.get("hunt-served-by"))
        assert served == [b.id] * 6, served
        assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 1
        assert (arrivals(a.app_proc), arrivals(b.app_proc)) == (2, 6)  # a: the first offer, the held stream
        more = events(held, 20)
        assert len(more) == 20 and "[DONE]" not in more
    finally:
        held_c.close()
