"""The agent's load for model servers (`load = "llm"`, policy/src/llm.rs):
requests in flight plus, until each one's first response byte, its prompt's
estimated tokens (Content-Length / llm_bytes_per_token) in seats of
llm_prefill_tokens_per_seat. Real agents beside emulated model servers
(`huntlb-llm`): a server with a long prompt waiting looks busier than one with
a short one, the weight goes at the first token, an offer at the server with
the bigger backlog goes to the peer with the smaller one (processed once,
counted at the servers), and a forged Content-Length weighs at most the
server's seats."""

import http.client
import json
import socket
import time

import pytest
from benchlib.llmfleet import gateways, llm_agents, model_fleet
from harness import OFFER, Backend, request, wait_until
from harness.testbed import FleetSpec, Loopback, Testbed, model_server
from test_llm import events, metrics, stream

SEATS = 2          # max_num_seqs, and the agents' workers
PER_SEAT = 64      # llm_prefill_tokens_per_seat: a prompt of 128 tokens or more weighs the cap, SEATS seats
LONG = "x" * 2000  # ~510 tokens: capped at 2 seats
SHORT = "q"        # a body of ~50 bytes: 13 tokens, 1 seat (rounded up)
PREFILL = "huntlb_llm_prefill_seats"


def model_servers(procs, addrs, n: int, load: str = "llm", tier: bool = False, **opts) -> list[Backend]:
    """n emulated servers (SEATS seats, real time: a holder's tokens come
    12 ms apart), an agent beside each with `load`; a forwarding tier if `tier`."""
    own = {"llm_prefill_tokens_per_seat": PER_SEAT} if load == "llm" else {}
    spec = FleetSpec([{"max_num_seqs": SEATS}] * n, agent={"load": load, "workers": SEATS, "app_stall_ms": 0, **own, **opts}, tier=tier)
    return Testbed(spec, Loopback(procs, addrs, model_server)).start().backends


def hold_seats(b: Backend) -> list:
    """Every seat of b's server taken by a stream through its agent, each past its first token."""
    held = []
    for i in range(SEATS):
        c, r = stream(b.agent, {"prompt": f"held {i}", "max_tokens": 100_000})
        assert r.status == 200 and events(r, 1)
        held.append(c)
    return held


def waiting(b: Backend, n: int) -> None:
    wait_until(lambda: metrics(b.app)["vllm:num_requests_waiting"] == n, what=f"{n} waiting at {b.app}")


def test_a_prompt_waiting_for_prefill_weighs_until_its_first_token(procs, addrs):
    a, b = model_servers(procs, addrs, 2)
    held = hold_seats(a) + hold_seats(b)
    try:
        # both servers full; one more request waits at each: a long prompt at a, a short one at b
        ca, ra = stream(a.agent, {"prompt": LONG, "max_tokens": 100_000})
        cb, rb = stream(b.agent, {"prompt": SHORT, "max_tokens": 100_000})
        waiting(a, 1)
        waiting(b, 1)
        ma, mb = a.metrics(), b.metrics()
        # the same count of requests, not the same work
        assert (ma["huntlb_inflight"], mb["huntlb_inflight"]) == (SEATS + 1, SEATS + 1)
        assert (ma[PREFILL], mb[PREFILL]) == (SEATS, 1)  # a's capped at the server's seats
        assert (ma["huntlb_busy"], mb["huntlb_busy"]) == (2 * SEATS + 1, SEATS + 2)
        # a's seats free: its long prompt runs, and weighs nothing once its first token is out
        for c in held[:SEATS]:
            c.close()
        assert r_first(ra)
        wait_until(lambda: a.metrics()[PREFILL] == 0, what="a's weight gone")
        wait_until(lambda: a.metrics()["huntlb_inflight"] == 1, what="a's holders gone")
        assert a.metrics()["huntlb_busy"] == 1
        assert b.metrics()[PREFILL] == 1  # b's still waits
        ca.close()
        cb.close()
    finally:
        for c in held:
            c.close()
    for s in (a, b):
        wait_until(lambda: s.metrics()["huntlb_busy"] == 0, what="every weight gone")


def r_first(r: http.client.HTTPResponse) -> bool:
    return r.status == 200 and len(events(r, 1)) == 1


@pytest.mark.parametrize("load,to", [("llm", "b"), ("inflight", "a")])
def test_an_offer_goes_to_the_peer_with_the_smaller_prefill_backlog(procs, addrs, load, to):
    a, b = bs = model_servers(procs, addrs, 2, load=load, tier=True)
    held = hold_seats(a) + hold_seats(b)
    queued = []
    try:
        queued.append(stream(a.agent, {"prompt": LONG, "max_tokens": 1})[0])
        queued.append(stream(b.agent, {"prompt": SHORT, "max_tokens": 1})[0])
        waiting(a, 1)
        waiting(b, 1)
        # three requests at each; with load = llm a's is 3 + 2 and b's 3 + 1
        # no offer yet: the tier is quiet and beats each quiet beat, so wait
        # past one (1.3 s covers a 1-s quiet beat too): each agent has heard the other's load
        time.sleep(1.3)
        done0 = [metrics(s.app)["vllm:request_success_total"] for s in bs]
        host, port = a.agent.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        queued.append(c)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "the offer", "max_tokens": 1}),
                  headers={**OFFER, "content-type": "application/json"})
        there = {"a": a, "b": b}[to]
        waiting(there, 2)  # it waits for a seat where it was placed, and nowhere else
        assert metrics({"a": b, "b": a}[to].app)["vllm:num_requests_waiting"] == 1
        for h in held:
            h.close()
        resp = c.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["usage"]["completion_tokens"] == 1
        # run once, at the server it was placed at (each server also ran its own queued one)
        wait_until(lambda: sum(metrics(s.app)["vllm:request_success_total"] for s in bs) - sum(done0) == 3, what="all three done")
        done = [metrics(s.app)["vllm:request_success_total"] - d for s, d in zip(bs, done0)]
        assert done == ([2, 1] if to == "a" else [1, 2])
        assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] == (1 if to == "b" else 0)
    finally:
        for h in held + queued:
            h.close()


def raw_head(addr: str, head: bytes) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(head)
    return s


def test_a_forged_content_length_weighs_at_most_the_servers_seats(procs, addrs):
    # The attacker: a client behind any front. Its Content-Length claims an
    # exabyte and its body never comes; the agent counts it as a prompt of
    # SEATS seats at most, and serves others beside it.
    (a,) = model_servers(procs, addrs, 1)
    body = b'{"prompt": "p", "max_tokens": 1}'
    forged = raw_head(a.agent, b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                               b"content-length: 1000000000000000000\r\n\r\n" + body)
    try:
        wait_until(lambda: a.metrics()["huntlb_inflight"] == 1, what="the forged request at the server")
        m = a.metrics()
        assert (m[PREFILL], m["huntlb_busy"]) == (SEATS, SEATS + 1)
        # others are still served beside it
        for i in range(3):
            status, _, out = request(a.agent, "POST", "/v1/completions", body=json.dumps({"prompt": f"ok {i}", "max_tokens": 2}).encode())
            assert status == 200 and json.loads(out)["usage"]["completion_tokens"] == 2
        # it makes the server look full (an offer refused, before the app, so
        # its front sends it elsewhere), never fuller than a real prompt could
        status, h, _ = request(a.agent, "POST", "/v1/completions", headers=OFFER, body=body)
        assert status == 425 and h.get("hunt") == "busy", (status, h)
    finally:
        forged.close()
    # the attacker leaves: its weight and its seat go with it
    wait_until(lambda: a.metrics()["huntlb_busy"] == 0, what="the forged weight gone")
    # a length past 2^64 is no length: refused before the app, nothing counted
    bad = raw_head(a.agent, b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999999999999999999\r\n\r\n")
    try:
        assert bad.recv(64).startswith(b"HTTP/1.1 400")
    finally:
        bad.close()
    # a chunked prompt has no length: it counts its seat only, and is served
    chunked = raw_head(a.agent, b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                                + b"%x\r\n" % len(body) + body + b"\r\n")
    try:
        wait_until(lambda: a.metrics()["huntlb_inflight"] == 1, what="the chunked request in flight")
        assert a.metrics()[PREFILL] == 0
        chunked.sendall(b"0\r\n\r\n")
        assert chunked.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        chunked.close()
    assert metrics(a.app)["vllm:request_success_total"] == 3 + 1  # the 3 served beside it and the chunked one; never the refused offer


def test_the_bench_arms_over_load_llm_agents_run_them(procs, addrs):
    # bench/llm_gateways.py's hunt1t/hunt2t/hunt4t: the tier fronts over a
    # second set of agents beside the same servers (benchlib.llmfleet.llm_agents)
    import llm_gateways as bench
    assert bench.arms_over("llm") == ("hunt1t", "hunt2t", "hunt4t") and bench.one_of_kind("hunt4t") == "hunt1t"
    fleet = model_fleet(procs, addrs, 2, 1, 0.1)
    a, b = llm = llm_agents(procs, fleet, 1)
    fleets = {"counts": fleet, "llm": llm}
    assert bench.fleet_of("hunt2t", fleets) is llm and bench.fleet_of("hunt2", fleets) is fleet
    # they weigh prompts: a's seat held, a long prompt waiting is a's prefill backlog
    c, r = stream(a.agent, {"prompt": "held", "max_tokens": 100_000})
    assert r.status == 200 and events(r, 1)
    q, _ = stream(a.agent, {"prompt": LONG, "max_tokens": 1})
    try:
        waiting(a, 1)
        assert (a.metrics()[PREFILL], a.metrics()["huntlb_busy"]) == (1, 3)  # 2 in flight + the cap, 1 seat
        assert PREFILL not in fleet[0].metrics()  # model_fleet's agents count requests
    finally:
        q.close()
        c.close()
    wait_until(lambda: a.metrics()["huntlb_busy"] == 0, what="a idle")
    arm = bench.ARMS["hunt2t"]
    g0, g1 = gateways(procs, addrs, bench.fleet_of("hunt2t", fleets), arm.kind, arm.gateways, arm.proxy)  # as run_arm builds them
    for i in range(4):
        status, _, _ = request((g0, g1)[i % 2].target, "POST", "/v1/completions", body=json.dumps({"prompt": f"q {i}", "max_tokens": 2}).encode())
        assert status == 200
    through = "huntlb_request_duration_seconds_count"
    assert sum(x.metrics()[through] for x in llm) >= 4 + 2  # the gateways' four, and the two above
    assert sum(x.metrics()[through] for x in fleet) == 0
