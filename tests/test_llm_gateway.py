"""Gateways in front of model servers: the shipped tier fronts (Envoy and
HAProxy, `hunt-pass`) over agents in a forwarding tier, each beside an
emulated model server (`huntlb-llm`). A server whose seats are full is passed
by: a stream its front sent there is forwarded to a free server, and arrives
token by token; each request runs once, counted at the servers; a client that
leaves mid-stream frees its seat at the far end of the chain."""

import pytest
from harness import Backend, request, start_front, wait_until
from harness.testbed import FleetSpec, Loopback, Testbed, model_server
from test_llm import events, metrics, stream

FRONTS = [("envoy", "front-tier.yaml"), ("haproxy-2.6", "front-tier.cfg")]
SEATS = 2


def model_fleet(procs, addrs, n: int = 3) -> list[Backend]:
    """n hosts, each an emulated model server (SEATS seats, ten times faster
    than real) and an agent beside it, the agents a forwarding tier."""
    # a model server's seats are its workers; a long generation answers no
    # head for a while, which is not a stall
    spec = FleetSpec([{"time_scale": 0.1, "max_num_seqs": SEATS}] * n, policy="dynamic:seen_margin=1",
                     agent={"workers": SEATS, "app_stall_ms": 0})
    return Testbed(spec, Loopback(procs, addrs, model_server)).start().backends


def gateway(kind, example, procs, addrs, bs):
    """The tier front of `kind` over the model servers' agents, once it serves
    (a model server answers a GET of /v1/models, not of the harness's /warmup)."""
    front = start_front(kind, procs, addrs, bs, example=example, warm=False)
    wait_until(lambda: all(request(front.listen, "GET", "/v1/models")[0] == 200 for _ in range(2)), what="the gateway serving")
    return front


def done(b: Backend) -> float:
    return metrics(b.app)["vllm:request_success_total"]


@pytest.mark.parametrize("kind,example", FRONTS)
def test_a_full_server_is_passed_by_and_streams_arrive_whole(procs, addrs, kind, example):
    a, *rest = bs = model_fleet(procs, addrs)
    front = gateway(kind, example, procs, addrs, bs)
    # a's seats are taken by streams no front sent (another gateway's)
    held = [stream(a.agent, {"prompt": f"held {i}", "max_tokens": 100_000}) for i in range(SEATS)]
    for _, r in held:
        assert events(r, 1)
    try:
        wait_until(lambda: metrics(a.app)["vllm:num_requests_running"] == SEATS, what="a's seats full")
        # The front's own pick sees no load anywhere, so a gets its share of
        # them; Envoy breaks least-request ties at random, so how many land on
        # a first varies: send until a has passed two on (at most 40; a run
        # that never offers a anything fails below).
        sent = 0
        for i in range(40):
            c, r = stream(front.listen, {"prompt": f"question {i}", "max_tokens": 5})
            assert r.status == 200
            evs = events(r)
            c.close()
            assert evs[-1] == "[DONE]" and len(evs) == 6, evs
            sent += 1
            if sent >= 9 and a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 2:
                break
        assert done(a) == 0  # none ran at the full server
        assert sum(done(b) for b in rest) == sent  # each ran once, elsewhere
        assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 2
    finally:
        for c, _ in held:
            c.close()


@pytest.mark.parametrize("kind,example", FRONTS)
def test_a_client_that_leaves_through_a_gateway_frees_its_seat(procs, addrs, kind, example):
    bs = model_fleet(procs, addrs)
    front = gateway(kind, example, procs, addrs, bs)
    c, r = stream(front.listen, {"prompt": "long", "max_tokens": 100_000})
    assert len(events(r, 3)) == 3
    assert sum(metrics(b.app)["vllm:num_requests_running"] for b in bs) == 1
    c.close()
    wait_until(lambda: sum(metrics(b.app)["vllm:num_requests_running"] for b in bs) == 0, what="the seat freed")
    assert sum(metrics(b.app)["huntlb_llm_aborted_total"] for b in bs) == 1
    status, _, _ = request(front.listen, "POST", "/v1/completions", body=b'{"prompt": "next", "max_tokens": 2}')
    assert status == 200
