"""The LLM gateways benchmark's arms as bench/llm_gateways.py builds them
(benchlib.llmfleet.gateways), on the real Envoy and HAProxy: the proxy's own
least-request goes straight to the model servers, no agent in the path, and
spreads what it holds; with several hunting gateways, each reaches the fleet
through the agents, and a server whose seats are full is passed by whichever
gateway sent there."""

import time

import pytest
from benchlib.llmfleet import gateways, llm_metrics, model_fleet, served
from harness import HaproxyRoot, request, wait_until
from test_llm import events, stream

PROXIES = ["envoy", "haproxy"]
SEATS = 1
AGENT_REQUESTS = "huntlb_request_duration_seconds_count"


def hr_for(procs, proxy: str):
    if proxy != "haproxy":
        return None
    hr = HaproxyRoot("2.6")
    procs.cleanups.append(hr.cleanup)
    return hr


def running(bs) -> list[float]:
    return [llm_metrics(b.app)["vllm:num_requests_running"] for b in bs]


def hold(target: str, i: int):
    c, r = stream(target, {"prompt": f"held {i}", "max_tokens": 100_000})
    assert r.status == 200
    assert events(r, 1)
    return c


def ask(target: str, i: int) -> int:
    status, _, _ = request(target, "POST", "/v1/completions", headers={"content-type": "application/json"},
                           body=f'{{"prompt": "question {i}", "max_tokens": 3}}'.encode())
    return status


@pytest.mark.parametrize("proxy", PROXIES)
def test_least_request_gateways_go_straight_to_the_servers(procs, addrs, proxy):
    bs = model_fleet(procs, addrs, 3, SEATS, 0.1)  # agents beside them, unused by this arm
    g0, g1 = gateways(procs, addrs, bs, "lr", 2, proxy, hr=hr_for(procs, proxy))
    # the gateway's own count spreads what it holds: one stream a server
    held = [hold(g0.target, i) for i in range(3)]
    try:
        wait_until(lambda: running(bs) == [1, 1, 1], what="one stream at each server")
    finally:
        for c in held:
            c.close()
    wait_until(lambda: sum(running(bs)) == 0, what="the seats freed")
    done0 = sum(served(b) for b in bs)
    for i in range(4):
        assert ask(g0.target, i) == 200
        assert ask(g1.target, 10 + i) == 200
    assert sum(served(b) for b in bs) - done0 == 8
    # no agent saw any of it
    assert sum(b.metrics()[AGENT_REQUESTS] for b in bs) == 0


@pytest.mark.parametrize("proxy", PROXIES)
def test_two_hunting_gateways_each_reach_the_fleet_and_pass_a_full_server_by(procs, addrs, proxy):
    a, *rest = bs = model_fleet(procs, addrs, 3, 2, 0.1)
    g0, g1 = gateways(procs, addrs, bs, "hunt", 2, proxy, hr=hr_for(procs, proxy))
    for i in range(3):
        assert ask(g0.target, i) == 200
        assert ask(g1.target, 10 + i) == 200
    assert sum(served(b) for b in bs) == 6
    assert sum(b.metrics()[AGENT_REQUESTS] for b in bs) >= 6  # through the agents
    # a's two seats are taken by streams neither gateway sent (a third's):
    # neither gateway's own count sees them, so both send a its share, and
    # a's agent passes each on
    held = [hold(a.agent, i) for i in range(2)]
    try:
        wait_until(lambda: running([a]) == [2], what="a's seats full")
        time.sleep(0.3)  # a few heartbeats: every agent has heard a is full
        a0, done0 = served(a), [served(b) for b in rest]
        sent = 0
        for i in range(40):
            assert ask((g0, g1)[i % 2].target, 100 + i) == 200
            sent += 1
            if sent >= 10 and a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 2:
                break
        assert served(a) == a0  # none ran at the full server
        assert sum(served(b) for b in rest) - sum(done0) == sent  # each once, elsewhere
        assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 2
    finally:
        for c in held:
            c.close()
