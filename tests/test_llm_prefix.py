"""Prefix affinity (`llm_prefix_bytes`, docs/llm.md "Prefix affinity"): real
agents in a forwarding tier beside emulated model servers (`huntlb-llm`). A
prompt offered at any agent, as several gateways would, is served by its
prefix's home while an offer would wait there (all seats taken) no longer
than at the least loaded, plus `llm_prefix_bound` (counted at the servers,
and in the home's prefix cache); past that the ordinary rule decides; chat bodies have a home too; a body the agent cannot
read for a prompt goes on as without affinity; a body reaches the server whole
and once; affinity off is the tier as before; and a client that sends one
prefix over and over gets its home's free seats and no more than the bound
past the least."""

import http.client
import json
import time

from benchlib.llmfleet import llm_metrics
from harness import OFFER, Backend, request, wait_until
from harness.testbed import FleetSpec, Loopback, Testbed, model_server
from test_llm import events

SYSTEM = "You are a terse assistant; answer every question in one line. " * 7  # 441 bytes: 6 full KV blocks of 64
PREFIX = 256  # llm_prefix_bytes: inside SYSTEM, so every question shares it
BLOCK = 16    # the emulator's KV block, in tokens (4 bytes each)
JSON = {"content-type": "application/json"}


def servers(procs, addrs, n: int = 3, seats: int = 2, prefix: int | None = PREFIX, bound: int | None = None) -> list[Backend]:
    """n emulated servers (`seats` seats, time scaled by 0.05), each with an
    agent (load = llm) in one forwarding tier, prefix-affine when `prefix`."""
    opts = {"load": "llm", "workers": seats, "app_stall_ms": 0, "llm_prefix_bytes": prefix, "llm_prefix_bound": bound}
    spec = FleetSpec([{"max_num_seqs": seats, "time_scale": 0.05}] * n, agent={k: v for k, v in opts.items() if v is not None})
    return Testbed(spec, Loopback(procs, addrs, model_server)).start().backends


def offer(b: Backend, body, path: str = "/v1/completions", headers: dict | None = None):
    """One offer at b's agent, as a gateway sends it: (status, headers, body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return request(b.agent, "POST", path, headers={**OFFER, **JSON, **(headers or {})}, body=data)


def success(bs: list[Backend]) -> list[float]:
    """Requests each server finished."""
    return [llm_metrics(b.app)["vllm:request_success_total"] for b in bs]


def prefix_outcomes(bs: list[Backend], outcome: str) -> float:
    return sum(b.metrics().get(f'huntlb_llm_prefix_total{{outcome="{outcome}"}}', 0) for b in bs)


def home_of(bs: list[Backend], body: dict) -> Backend:
    """The agent that serves an offer of `body` made at the first agent."""
    status, h, _ = offer(bs[0], body)
    assert status == 200
    return next(b for b in bs if b.id == h["hunt-served-by"])


def hold(b: Backend, n: int) -> list[http.client.HTTPConnection]:
    """n streams at b's server through its agent (plain tries: kept there), each past its first token."""
    held = []
    for i in range(n):
        host, port = b.agent.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": f"held {i}", "max_tokens": 100_000, "stream": True}), headers=JSON)
        r = c.getresponse()
        assert r.status == 200 and events(r, 1)
        held.append(c)
    return held


def test_one_prefix_offered_at_every_agent_is_served_by_its_home(procs, addrs):
    bs = servers(procs, addrs)
    served = []
    for i in range(6):
        status, h, _ = offer(bs[i % 3], {"prompt": SYSTEM + f"question {i}?", "max_tokens": 2})
        assert status == 200
        served.append(h["hunt-served-by"])
        # as `settled`: the last one's slot goes just after its client has the
        # last byte, and every agent hears that a few heartbeats later; an
        # offer sent sooner meets a home still counting it (a race, not the rule)
        wait_until(lambda: all(b.metrics()["huntlb_busy"] == 0 for b in bs), what="every server idle")
        time.sleep(0.3)
    assert len(set(served)) == 1, served
    home = next(b for b in bs if b.id == served[0])
    # counted at the servers: every one at the home, once
    assert success(bs) == [6 if b is home else 0 for b in bs]
    # the home's prefix cache held the system prompt for the five after the first (6 blocks each)
    assert llm_metrics(home.app)["vllm:prefix_cache_hits_total"] >= 5 * 6 * BLOCK
    assert prefix_outcomes(bs, "home") == 6 and prefix_outcomes(bs, "ordinary") == 0
    # the four offered elsewhere went to the home as forwards, taken there
    assert sum(b.metrics()['huntlb_forwards_total{outcome="sent"}'] for b in bs) == 4
    assert home.metrics()['huntlb_forwards_in_total{outcome="taken"}'] == 4


def settled(bs: list[Backend], home: Backend, n: int) -> None:
    """The home's load n and every other's 0 (a finished request's slot goes
    just after its client has the last byte), then a few heartbeats (50 ms):
    every agent has heard them."""
    wait_until(lambda: [b.metrics()["huntlb_busy"] for b in bs] == [n if b is home else 0 for b in bs], what=f"the home at {n}, the others idle")
    time.sleep(0.3)


def test_a_home_past_the_bound_leaves_its_prefix_to_the_ordinary_rule(procs, addrs):
    # two seats, bound 0: the home keeps its prefix while a seat is free there
    bs = servers(procs, addrs, seats=2, bound=0)
    body = lambda i: {"prompt": SYSTEM + f"q{i}", "max_tokens": 1}
    home = home_of(bs, body(0))
    others = [b for b in bs if b is not home]
    held = hold(home, 1)
    try:
        # one above the least (0), a seat free: no wait there, still the home, wherever offered
        for i, b in enumerate(bs):
            settled(bs, home, 1)
            status, h, _ = offer(b, body(i + 1))
            assert (status, h["hunt-served-by"]) == (200, home.id)
        held += hold(home, 1)
        # both seats taken: an offer would wait there and not at the least; it stays where it is offered
        # (the least), and one at the home goes to a least peer
        before = success(bs)
        for b in others:
            settled(bs, home, 2)
            status, h, _ = offer(b, body(10))
            assert (status, h["hunt-served-by"]) == (200, b.id)
        settled(bs, home, 2)
        status, h, _ = offer(home, body(11))
        assert status == 200 and h["hunt-served-by"] in {b.id for b in others}
        after = success(bs)
        assert after[bs.index(home)] == before[bs.index(home)]
        assert sum(after) - sum(before) == 3  # each once
        assert prefix_outcomes(bs, "ordinary") == 3
    finally:
        for c in held:
            c.close()


def test_a_chat_has_a_home_and_a_body_without_a_prompt_goes_on_as_without_affinity(procs, addrs):
    bs = servers(procs, addrs)
    chat = lambda q: {"model": "m", "max_tokens": 2, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]}
    served = set()
    for i, b in enumerate(bs):
        if served:
            # the last chat's slot at its home goes just after its client has
            # the last byte: the next is offered once every agent has heard it
            # (settled), as the tests above do, or a peer may see the home at
            # 1 and keep the chat by the ordinary rule (a bound of 0)
            settled(bs, next(x for x in bs if x.id in served), 0)
        status, h, _ = offer(b, chat(f"question {i}?"), path="/v1/chat/completions")
        assert status == 200
        served.add(h["hunt-served-by"])
    assert len(served) == 1
    home = next(b for b in bs if b.id in served)
    assert success(bs) == [3 if b is home else 0 for b in bs]
    settled(bs, home, 0)
    # not JSON: no prompt, decided as without affinity (kept where offered, every server idle); the server says what it got
    status, h, data = offer(bs[1], b'{"prompt": "unterminated')
    assert (status, h["hunt-served-by"]) == (400, bs[1].id) and b"not JSON" in data
    # a token list: JSON, but no prompt the agent hashes
    settled(bs, home, 0)
    status, h, _ = offer(bs[2], {"prompt": [1, 2, 3]})
    assert h["hunt-served-by"] == bs[2].id
    assert prefix_outcomes(bs, "none") == 2 and prefix_outcomes(bs, "home") == 3


def test_a_body_reaches_the_home_whole_and_once(procs, addrs):
    bs = servers(procs, addrs)
    home = home_of(bs, {"prompt": SYSTEM, "max_tokens": 1})
    # that offer's slot at the home goes just after its client has the last
    # byte: offered on before every agent heard it, the big one could find the
    # home at 1 and stay where it landed by the ordinary rule
    settled(bs, home, 0)
    elsewhere = next(b for b in bs if b is not home)
    # 200 kB: several frames, more than a try keeps for a resend (64 KiB); offered away from its home
    prompt = SYSTEM + "".join(f"line {i:06d}. " for i in range(15_000))
    tokens0 = [llm_metrics(b.app)["vllm:prompt_tokens_total"] for b in bs]
    before = success(bs)
    status, h, _ = offer(elsewhere, {"prompt": prompt, "max_tokens": 1})
    assert (status, h["hunt-served-by"]) == (200, home.id)
    tokens = [llm_metrics(b.app)["vllm:prompt_tokens_total"] for b in bs]
    # the server counts the prompt it parsed: every byte of it (4 a token, rounded up), at the home alone
    assert [t - t0 for t, t0 in zip(tokens, tokens0)] == [(len(prompt) + 3) // 4 if b is home else 0 for b in bs]
    assert [a - b0 for a, b0 in zip(success(bs), before)] == [1 if b is home else 0 for b in bs]
    # a chunked body (no Content-Length) is not read: no affinity, served where offered, whole
    host, port = elsewhere.agent.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    data = json.dumps({"prompt": SYSTEM + "chunked", "max_tokens": 1}).encode()
    c.request("POST", "/v1/completions", body=iter([data[:100], data[100:]]), headers={**OFFER, **JSON}, encode_chunked=True)
    r = c.getresponse()
    assert (r.status, r.getheader("hunt-served-by")) == (200, elsewhere.id)
    r.read()
    c.close()
    assert prefix_outcomes(bs, "home") == 2 and prefix_outcomes(bs, "none") == 0


def test_affinity_off_is_the_tier_as_before(procs, addrs):
    bs = servers(procs, addrs, prefix=None)
    for i in range(6):
        settled(bs, bs[0], 0)
        status, h, _ = offer(bs[i % 3], {"prompt": SYSTEM + f"question {i}?", "max_tokens": 2})
        # every agent idle: each keeps what it is offered
        assert (status, h["hunt-served-by"]) == (200, bs[i % 3].id)
    assert success(bs) == [2, 2, 2]
    assert all('huntlb_llm_prefix_total{outcome="home"}' not in b.metrics() for b in bs)


def inflight(b: Backend) -> float:
    """Requests at b's server: running, or waiting for a seat."""
    m = llm_metrics(b.app)
    return m["vllm:num_requests_running"] + m["vllm:num_requests_waiting"]


def test_a_client_steering_one_prefix_gets_its_home_at_most_the_bound_above_the_least(procs, addrs):
    """The attacker: every request with one prefix, offered at every agent in
    turn, each held running. The home takes them only while an offer would wait
    there no longer than at the least, plus the bound: it fills its own free
    seats (what any client's requests may do) and past them holds at most the
    bound more than the least + 1, the rest spread as without affinity."""
    bound, n, seats = 0, 12, 4  # 12 seats in all: every request runs (a queued stream would send no first token)
    bs = servers(procs, addrs, seats=seats, bound=bound)
    held = []
    try:
        home = None
        for i in range(n):
            b = bs[i % 3]
            host, port = b.agent.rsplit(":", 1)
            c = http.client.HTTPConnection(host, int(port), timeout=30)
            held.append(c)
            c.request("POST", "/v1/completions", body=json.dumps({"prompt": SYSTEM + f"steer {i}", "max_tokens": 100_000, "stream": True}),
                      headers={**OFFER, **JSON})
            r = c.getresponse()
            assert r.status == 200 and events(r, 1)
            home = home or next(x for x in bs if x.id == r.getheader("hunt-served-by"))
            held_at = [inflight(x) for x in bs]
            assert sum(held_at) == i + 1  # each once
            assert held_at[bs.index(home)] <= max(seats + bound, min(held_at) + bound + 1), held_at
            time.sleep(0.1)  # its count reaches every peer before the next offer
        held_at = [inflight(x) for x in bs]
        assert held_at[bs.index(home)] <= n // 3 + bound + 1, held_at
        assert prefix_outcomes(bs, "ordinary") > 0 and prefix_outcomes(bs, "home") >= bound + 1
    finally:
        for c in held:
            c.close()


def test_the_bench_arms_over_prefix_affine_agents_run_them(procs, addrs):
    # bench/llm_gateways.py's huntp1/huntp2/huntp4: the tier fronts over a third
    # set of agents beside the same servers, prefix-affine (benchlib.llmfleet.llm_agents)
    import llm_gateways as bench
    from benchlib.llmfleet import gateways, llm_agents, model_fleet
    assert bench.arms_over("prefix") == ("huntp1", "huntp2", "huntp4") and bench.one_of_kind("huntp4") == "huntp1"
    fleet = model_fleet(procs, addrs, 3, 4, 0.1)
    llm = llm_agents(procs, fleet, 4)
    prefix = llm_agents(procs, fleet, 4, prefix_bytes=bench.PREFIX_BYTES)
    fleets = {"counts": fleet, "llm": llm, "prefix": prefix}
    assert bench.fleet_of("huntp2", fleets) is prefix and bench.fleet_of("hunt2t", fleets) is llm
    assert bench.fleet_of("hunt2", fleets) is fleet and bench.fleet_of("lr2", fleets) is fleet
    assert {a.agent for a in prefix}.isdisjoint(a.agent for a in llm + fleet)
    arm = bench.ARMS["huntp2"]
    g0, g1 = gateways(procs, addrs, bench.fleet_of("huntp2", fleets), arm.kind, arm.gateways, arm.proxy)  # as run_arm builds them
    before = success(fleet)
    for i in range(6):
        status, _, _ = request((g0, g1)[i % 2].target, "POST", "/v1/completions", headers=JSON,
                               body=json.dumps({"prompt": SYSTEM + f"question {i}", "max_tokens": 2}).encode())
        assert status == 200
    # both gateways' requests, one system prompt: one server served them all, through the prefix-affine agents
    assert sorted(a - b for a, b in zip(success(fleet), before)) == [0, 0, 6]
    assert prefix_outcomes(prefix, "home") == 6
    through = "huntlb_request_duration_seconds_count"
    assert sum(x.metrics()[through] for x in llm + fleet) == 0
