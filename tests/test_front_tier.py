"""The fronts over a forwarding tier (envoy-filter/examples/front-tier.yaml,
haproxy-lua/examples/front-tier.cfg): the proxy's own least-loaded pick plus
one header, `hunt-pass`. Real Envoy and HAProxy (2.6 and 3.0), real agents
and apps on loopback; arrivals counted at the apps, since these fronts re-send
nothing an agent may have taken: a try is served where it landed or passed on once."""

import uuid

import pytest
from harness import (app_stats, concurrent_statuses, counts, hold, request, start_backends, start_fleet, start_front, tries_past_a_loaded_one,
                     wait_until)

FRONTS = [("envoy", "front-tier.yaml"), ("haproxy-2.6", "front-tier.cfg"), ("haproxy-3.0", "front-tier.cfg")]


@pytest.mark.parametrize("kind,example", FRONTS)
def test_a_try_sent_to_a_loaded_backend_is_passed_on_once(procs, addrs, kind, example):
    # a is loaded by another front's requests (sent past this one), which this
    # front's least-loaded pick cannot see: its tries to a are passed on to b or c.
    a, b, c = bs = start_fleet(procs, addrs, 3, policy="dynamic:seen_margin=1",
                               agent_opts={"fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000})
    front = start_front(kind, procs, addrs, bs, example=example)
    served = tries_past_a_loaded_one(a, bs, [front.listen], "/tier", body=b"x" * 3000,
                                     headers={"hunt-offer": "1", "hunt-target": "1", "hunt-via": "x", "hunt-commit": "5"})
    assert a.id not in served, served
    m = a.metrics()
    assert m['huntlb_forwards_total{outcome="sent"}'] >= 1  # the front sent some to a: a passed them on
    assert sum(x.metrics()['huntlb_offers_total{decision="refuse"}'] for x in bs) == 0


@pytest.mark.parametrize("kind,example", FRONTS)
def test_agents_nobody_named_tell_clients_nothing(procs, addrs, kind, example):
    # The tier fronts remove no response header (it costs Envoy ~2% of its
    # req/s): what keeps the fleet's names and hunt marks from clients is the
    # agents. As shipped (no id), neither an answer served where it landed nor
    # one a peer served after a pass carries a hunt header.
    a, b, c = bs = start_fleet(procs, addrs, 3, policy="dynamic:seen_margin=1", agent_opts={"id": None})
    front = start_front(kind, procs, addrs, bs, example=example)
    hold(a, 4)
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 4)
    for i in range(24):  # Envoy's ties are random: some of 24 reach a, 1 - (2/3)^24
        path = f"/quiet/{uuid.uuid4()}"
        status, h, _ = request(front.listen, "POST" if i % 2 else "GET", path, body=b"q" * 500 if i % 2 else None)
        assert status == 200, (status, h)
        assert sum(counts(bs, path)) == 1
        assert not [k for k in h if k == "hunt" or k.startswith("hunt-")], h
    assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 1  # passed answers were among them


@pytest.mark.parametrize("kind,example", FRONTS)
def test_a_passed_try_is_never_refused_even_by_an_agent_that_refuses_every_offer(procs, addrs, kind, example):
    # No tier, and agents whose policy refuses every offer (static:0): a try
    # the front lets pass is no offer, so each is served where the front sent
    # it, with 200, and no client-sent hunt header makes it an offer.
    bs = start_backends(procs, addrs, 2, "static:0")
    front = start_front(kind, procs, addrs, bs, example=example)
    for _ in range(6):
        path = f"/never/{uuid.uuid4()}"
        status, h, _ = request(front.listen, "GET", path, headers={"hunt-offer": "1", "hunt-target": "1"})
        assert status == 200, (status, h)
        assert sum(counts(bs, path)) == 1
    assert sum(b.metrics()['huntlb_offers_total{decision="refuse"}'] for b in bs) == 0


@pytest.mark.parametrize("kind,example", FRONTS)
def test_one_front_alone_is_its_proxys_least_nothing_passed_on(procs, addrs, kind, example):
    # Concurrent slow requests through one front: each agent holds only this
    # front's tries (hunt-front counts them), so it keeps every one where the
    # front's least-loaded pick placed it; nothing is forwarded.
    bs = start_fleet(procs, addrs, 3, policy="dynamic:seen_margin=1",
                     agent_opts={"fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000})
    front = start_front(kind, procs, addrs, bs, example=example)
    results = concurrent_statuses(front.listen, [f"/alone/{uuid.uuid4()}?work_ms=800" for _ in range(9)])
    assert results == [200] * 9
    assert sum(b.metrics()['huntlb_forwards_total{outcome="sent"}'] for b in bs) == 0


@pytest.mark.parametrize("kind,example", FRONTS)
def test_an_agent_killed_under_load_loses_nothing_twice(procs, addrs, kind, example):
    # 60 requests one after another through the front; after the 20th, c's
    # agent is SIGKILLed (its app lives on). Every request is processed at
    # most once; every answered one exactly once; what failed was in flight
    # at c (one at a time here: at most one), the rest served by a and b.
    import signal
    a, b, c = bs = start_fleet(procs, addrs, 3, policy="dynamic:seen_margin=1",
                               agent_opts={"fleet_heartbeat_ms": 200, "fleet_dead_after_ms": 1000})
    front = start_front(kind, procs, addrs, bs, example=example)
    failed = 0
    for i in range(60):
        if i == 20:
            c.agent_proc.signal(signal.SIGKILL)
        path = f"/kill/{uuid.uuid4()}"
        status, _, _ = request(front.listen, "POST", path, body=b"k" * 500, timeout=30)
        n = sum(app_stats(x.app)["paths"].get(path, 0) for x in bs)
        assert n <= 1, (i, status, n)
        if status == 200:
            assert n == 1, (i, n)
        else:
            failed += 1
    assert failed <= 1, failed


def test_a_clients_hunt_pass_straight_to_an_agent_only_places_its_own_request(procs, addrs):
    # The attacker reaches an agent past every front, with hunt-pass under a
    # new name each time and an offer's marks besides, while the agent is
    # loaded: each request is served once (here or at a peer), never refused,
    # and nothing it names outlives it (the agent's count per front name is
    # held only while that name's requests are in flight).
    a, b, c = bs = start_fleet(procs, addrs, 3, policy="static:0",
                               agent_opts={"fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000})
    hold(a, 3)
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 3)
    for i in range(40):
        path = f"/attacker/{uuid.uuid4()}"
        status, h, _ = request(a.agent, "GET", path, headers={"hunt-pass": f"forged-{i}", "hunt-seen": "0"})
        assert status == 200, (status, h)
        assert sorted(counts(bs, path)) == [0, 0, 1]
    assert sum(x.metrics()['huntlb_offers_total{decision="refuse"}'] for x in bs) == 0
    # The forged names counted a's tries as their own fronts': seen 0, so a
    # (holding 3) passed them on, as it would any front's.
    assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 1
