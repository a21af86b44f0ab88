"""The GIE-style baseline the LLM gateways are measured against: an Envoy that
asks its endpoint picker (`huntlb-epp`, bench/configs/epp-gateway.yaml)
where each request goes. The picker sends requests to the server its scrape
of `/metrics` shows least loaded (counted at the servers); a client's own
`x-gateway-destination-endpoint` is never obeyed; a picker that is down is a
503 at the client, and no request reaches any server unpicked."""

import json

from benchlib.llmfleet import DEST, EppGateway, gateways, llm_agents, llm_metrics, model_fleet, served
from harness import request, wait_until
from test_llm import events, stream

SEATS = 1


def held(addr: str, n: int) -> list:
    """n streams that never end by themselves, sent straight to a server."""
    return [stream(addr, {"prompt": f"held {i}", "max_tokens": 100_000}) for i in range(n)]


def ask(gw: EppGateway, i: int, headers: dict | None = None) -> int:
    status, _, _ = request(gw.listen, "POST", "/v1/completions", headers={"content-type": "application/json", **(headers or {})},
                           body=json.dumps({"prompt": f"question {i}", "max_tokens": 3}).encode())
    return status


def load_seen(gw: EppGateway, want: dict[str, float]) -> None:
    """The servers show these waiting counts, and the picker scraped since."""
    wait_until(lambda: all(llm_metrics(a)["vllm:num_requests_waiting"] == w for a, w in want.items()), what="queues built")
    n = gw.picker_stats()["huntlb_epp_scrapes_total"]
    wait_until(lambda: gw.picker_stats()["huntlb_epp_scrapes_total"] >= n + 2 * len(want), what="fresh scrapes")


def close(streams: list) -> None:
    for c, _ in streams:
        c.close()


def test_the_picker_sends_each_request_to_the_least_loaded_server(procs, addrs):
    a, b, c = bs = model_fleet(procs, addrs, 3, SEATS, 0.1, agents=False)
    gw = EppGateway(procs, addrs, [x.app for x in bs])
    # a: its seat and 2 waiting; c: its seat and 1 waiting; b: idle
    hold = held(a.app, 3) + held(c.app, 2)
    try:
        load_seen(gw, {a.app: 2, b.app: 0, c.app: 1})
        for i in range(6):
            assert ask(gw, i) == 200
        assert (served(a), served(b), served(c)) == (0, 6, 0)
        picks = gw.picker_stats()
        assert picks[f'huntlb_epp_picks_total{{endpoint="{b.app}"}}'] == 6
    finally:
        close(hold)


def test_a_clients_destination_header_is_not_obeyed(procs, addrs):
    """The attacker names a server outside the pool (and, second, the busiest
    in it): neither is where its request goes."""
    *pool, outside = bs = model_fleet(procs, addrs, 3, SEATS, 0.1, agents=False)
    a, b = pool
    gw = EppGateway(procs, addrs, [x.app for x in pool])
    hold = held(a.app, 2)  # a busy: its seat and 1 waiting
    try:
        load_seen(gw, {a.app: 1, b.app: 0})
        for i, target in enumerate([outside.app] * 3 + [a.app] * 3):
            assert ask(gw, i, headers={DEST: target}) == 200
        assert served(outside) == 0
        assert (served(a), served(b)) == (0, 6)
        assert sum(served(x) for x in bs) == 6
    finally:
        close(hold)


def test_a_picker_that_is_down_is_a_503_and_nothing_is_sent(procs, addrs):
    bs = model_fleet(procs, addrs, 2, SEATS, 0.1, agents=False)
    gw = EppGateway(procs, addrs, [x.app for x in bs])
    assert ask(gw, 0) == 200
    gw.picker_proc.stop()
    # a client naming a server itself is not let through either
    assert ask(gw, 1) == 503
    assert ask(gw, 2, headers={DEST: bs[0].app}) == 503
    assert sum(served(x) for x in bs) == 1


def test_a_picker_with_no_live_server_answers_503_through_the_gateway(procs, addrs):
    bs = model_fleet(procs, addrs, 2, SEATS, 0.1, agents=False)
    gw = EppGateway(procs, addrs, [x.app for x in bs])
    for x in bs:
        x.app_proc.stop()
    # Until the staleness bound (2 s) the picker still names a server, and
    # Envoy's connection to it fails (a 503 of its own: one endpoint, no
    # retry); past it, no server is a candidate and the picker answers 503,
    # which Envoy takes as a failed check: a 503 too, the reason counted at
    # the picker.
    wait_until(lambda: ask(gw, 0) == 503 and gw.picker_stats()["huntlb_epp_no_endpoint_total"] >= 1, timeout=10, every=0.2,
               what="the picker finding no live server")
    assert gw.picker_stats()["huntlb_epp_no_endpoint_total"] >= 1


def test_a_stream_through_the_epp_gateway_arrives_token_by_token(procs, addrs):
    bs = model_fleet(procs, addrs, 2, SEATS, 0.1, agents=False)
    gw = EppGateway(procs, addrs, [x.app for x in bs])
    c, r = stream(gw.listen, {"prompt": "hello", "max_tokens": 100_000})
    try:
        assert r.status == 200
        assert len(events(r, 3)) == 3  # tokens arrive while the server still runs it
        assert sum(llm_metrics(x.app)["vllm:num_requests_running"] for x in bs) == 1
    finally:
        c.close()
    wait_until(lambda: sum(llm_metrics(x.app)["vllm:num_requests_running"] for x in bs) == 0, what="the seat freed")


def test_a_pick_whose_server_is_full_is_passed_on_by_the_agent(procs, addrs):
    """The picker unchanged, naming the agent beside each server (load =
    "llm", fleet_pass_plain) and reading the engine's /metrics beside it: a
    request it sends to a full server is served once, by the idle one, the
    picker's own counters saying it picked the full one. The picker here knows
    only a's agent, so every pick is a, whatever its scrape says."""
    a, b = bs = model_fleet(procs, addrs, 2, SEATS, 0.1, agents=False)
    # the front's count alone (llm_seen_while_free off): else a's agent would
    # pass the test's own second request on, as the tests below show
    ga, gb = llm_agents(procs, bs, SEATS, pass_plain=True, seen_while_free=False)
    gw = EppGateway(procs, addrs, [ga.agent], metrics_port=int(a.app.rpartition(":")[2]))
    # a's one seat taken and one waiting, through a's agent (which counts
    # them, load = "llm", for another front: the test's own IP, one front
    # alone, so both kept): more than the gateway's own count at a (0) plus
    # forward_seen_margin (1)
    hold = [stream(ga.agent, {"prompt": f"held {i}", "max_tokens": 100_000}) for i in range(2)]
    try:
        wait_until(lambda: [(m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]) for m in map(llm_metrics, (a.app, b.app))]
                   == [(1, 1), (0, 0)], what="a full, b idle")
        # b's agent has heard a's count
        wait_until(lambda: gb.metrics()["huntlb_fleet_peers"] == 1, what="b's agent hearing a's")
        n = gw.picker_stats()["huntlb_epp_scrapes_total"]
        wait_until(lambda: gw.picker_stats()["huntlb_epp_scrapes_total"] >= n + 2, what="fresh scrapes of a's engine")
        assert ask(gw, 0) == 200
        assert (served(a), served(b)) == (0, 1)
        assert ga.metrics()['huntlb_forwards_total{outcome="sent"}'] == 1
        assert gw.picker_stats()[f'huntlb_epp_picks_total{{endpoint="{ga.agent}"}}'] == 1
        # the engine's gauges, read at its own port: a running 1, the picker's scrape good
        assert gw.picker_stats()["huntlb_epp_scrape_errors_total"] == 0
    finally:
        close(hold)


def test_two_pickers_over_agents_are_two_fronts_and_one_corrects_the_other(procs, addrs):
    """The bench's eppa arms (benchlib.llmfleet.gateways, via_agents): each
    gateway's connections leave from its own IP, so the agents count each
    picker as a front of its own. Gateway 1 fills a (kept: its own count
    there); gateway 2's pick of a is passed on to b. Were both one front (one
    source IP), a would keep it behind gateway 1's requests. Both pickers
    know only a's agent. The fronts' counts alone (llm_seen_while_free off:
    with it, a full a would pass gateway 1's own second request on too)."""
    a, b = bs = model_fleet(procs, addrs, 2, SEATS, 0.1, agents=False)
    ga, gb = llm_agents(procs, bs, SEATS, pass_plain=True, seen_while_free=False)
    g1, g2 = gateways(procs, addrs, [ga], "epp", 2, via_agents=True)
    hold = [stream(g1.target, {"prompt": f"held {i}", "max_tokens": 100_000}) for i in range(2)]
    try:
        wait_until(lambda: [(m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]) for m in map(llm_metrics, (a.app, b.app))]
                   == [(1, 1), (0, 0)], what="gateway 1's two requests kept at a")
        wait_until(lambda: gb.metrics()["huntlb_fleet_peers"] == 1, what="b's agent hearing a's")
        status, _, _ = request(g2.target, "POST", "/v1/completions", headers={"content-type": "application/json"},
                               body=json.dumps({"prompt": "from gateway 2", "max_tokens": 3}).encode())
        assert status == 200
        assert (served(a), served(b)) == (0, 1)
        assert ga.metrics()['huntlb_forwards_total{outcome="sent"}'] == 1
    finally:
        close(hold)


def one_picker_fills_a(procs, addrs, seen_while_free: bool | None):
    """One picker over agents (load = "llm", fleet_pass_plain), knowing only
    a's agent, so every pick is a: its first request takes a's one seat
    (kept: a idle). Returns the servers, the agents, the gateway and the hold."""
    a, b = bs = model_fleet(procs, addrs, 2, SEATS, 0.1, agents=False)
    ga, gb = llm_agents(procs, bs, SEATS, pass_plain=True, seen_while_free=seen_while_free)
    (g,) = gateways(procs, addrs, [ga], "eppp", 1, via_agents=True)
    hold = [stream(g.target, {"prompt": "held", "max_tokens": 100_000})]
    wait_until(lambda: [(m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]) for m in map(llm_metrics, (a.app, b.app))]
               == [(1, 0), (0, 0)], what="the picker's first request at a")
    wait_until(lambda: gb.metrics()["huntlb_fleet_peers"] == 1 and ga.metrics()["huntlb_fleet_peers"] == 1, what="a's and b's agents hearing each other")
    return (a, b), (ga, gb), g, hold


def test_one_pickers_pick_of_a_full_server_is_passed_to_a_free_seat(procs, addrs):
    """What the prefix-scoring picker over agents needed to be as good as
    least-request: with one picker every request at a server is its own, so
    its count there (forward_seen_margin) would keep its pick at a full
    server. With `llm_seen_while_free` (on by default) a server with no free
    seat passes it to a member with one, whatever the picker saw."""
    (a, b), (ga, _), g, hold = one_picker_fills_a(procs, addrs, None)
    try:
        status, _, _ = request(g.target, "POST", "/v1/completions", headers={"content-type": "application/json"},
                               body=json.dumps({"prompt": "second", "max_tokens": 3}).encode())
        assert status == 200
        assert (served(a), served(b)) == (0, 1)
        assert ga.metrics()['huntlb_forwards_total{outcome="sent"}'] == 1
        assert g.picker.picker_stats()[f'huntlb_epp_picks_total{{endpoint="{ga.agent}"}}'] == 2
    finally:
        close(hold)


def test_without_llm_seen_while_free_one_pickers_pick_waits_at_its_full_server(procs, addrs):
    """The same with `llm_seen_while_free = false`: the picker's own count at
    a keeps its pick there, queued behind the held request, b idle."""
    import concurrent.futures
    (a, b), (ga, _), g, hold = one_picker_fills_a(procs, addrs, False)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            second = pool.submit(request, g.target, "POST", "/v1/completions", headers={"content-type": "application/json"},
                                 body=json.dumps({"prompt": "second", "max_tokens": 3}).encode())
            wait_until(lambda: llm_metrics(a.app)["vllm:num_requests_waiting"] == 1, what="the second request waiting at a")
            assert llm_metrics(b.app)["vllm:num_requests_running"] == 0
        finally:
            close(hold)
        assert second.result(timeout=30)[0] == 200
    assert served(b) == 0
    assert ga.metrics()['huntlb_forwards_total{outcome="sent"}'] == 0


def test_the_llm_gateways_report_renders_from_its_data():
    """docs/results/llm-gateways.md is what bench/llm_gateways.py renders from
    the committed data (as tests/test_reports.py holds the other reports)."""
    import llm_gateways
    from benchlib.reports import RESULTS, read_data
    data = read_data("llm-gateways")
    kept = data.get("shown")
    assert llm_gateways.report(data) == (RESULTS / "llm-gateways.md").read_text()
    assert data.get("shown") == kept


def test_the_llm_pickers_report_renders_from_its_data():
    """docs/results/llm-pickers.md is what bench/llm_pickers.py renders from
    the committed data."""
    import llm_pickers
    from benchlib.reports import RESULTS, read_data
    data = read_data("llm-pickers")
    kept = data.get("shown")
    assert llm_pickers.report(data) == (RESULTS / "llm-pickers.md").read_text()
    assert data.get("shown") == kept
