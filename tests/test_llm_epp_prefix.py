"""The GIE-style picker with GIE's prefix-cache-scorer (`huntlb-epp
--prefix-scorer`, the bench's epppN arms): Envoy sends it each request's body
with the check (ext_authz with_request_body); while the servers' queues are
level, requests that share a prompt prefix go to the server the picker sent
that prefix to before (counted at the servers); a body the picker cannot read
scores nothing and is still sent to a server."""

import json

from benchlib.llmfleet import EppGateway, llm_metrics, model_fleet, served
from harness import request

SEATS = 2
SYSTEM = "You are the fleet's assistant. " * 40  # 1240 bytes: 19 whole blocks of 64


def ask(gw: EppGateway, body: bytes) -> tuple[int, bytes]:
    status, _, data = request(gw.listen, "POST", "/v1/completions", headers={"content-type": "application/json"}, body=body)
    return status, data


def question(i: int) -> bytes:
    return json.dumps({"prompt": SYSTEM + f"question {i}: " + "why? " * 30, "max_tokens": 2}).encode()


def test_a_shared_prefix_goes_back_to_the_server_that_served_it(procs, addrs):
    bs = model_fleet(procs, addrs, 3, SEATS, 0.1, agents=False)
    gw = EppGateway(procs, addrs, [x.app for x in bs], prefix=True)
    # one at a time: every queue empty (level) at every pick, the KV caches
    # free; without the prefix score the picks are a coin toss among three
    for i in range(10):
        assert ask(gw, question(i))[0] == 200
    counts = [served(x) for x in bs]
    assert sorted(counts) == [0, 0, 10], counts
    warm = bs[counts.index(10)]
    # the server found the prefix in its own cache: the system prompt's blocks
    # hit on each request after the first
    assert llm_metrics(warm.app)["vllm:prefix_cache_hits_total"] >= 9 * 16 * 19
    st = gw.picker_stats()
    assert st["huntlb_epp_prefix_unparsed_total"] == 0
    # 9 requests matched at least the system prompt's 19 blocks
    assert st["huntlb_epp_prefix_blocks_matched_total"] >= 9 * 19
    assert st[f'huntlb_epp_picks_total{{endpoint="{warm.app}"}}'] == 10


def test_a_body_the_picker_cannot_read_is_still_served(procs, addrs):
    bs = model_fleet(procs, addrs, 2, SEATS, 0.1, agents=False)
    gw = EppGateway(procs, addrs, [x.app for x in bs], prefix=True)
    # a prompt as a list of one string: the server takes it, GIE's parser does not
    assert ask(gw, json.dumps({"prompt": ["a list prompt " * 20], "max_tokens": 2}).encode())[0] == 200
    # not JSON: the picker still names a server, whose own 400 comes back
    status, data = ask(gw, b"{not json")
    assert status == 400 and b"not JSON" in data
    # past Envoy's max_request_bytes (1 MiB): the picker gets it cut short
    # (allow_partial_message: no 413), cannot parse it, and it is served
    big = json.dumps({"prompt": "x" * (1_100_000), "max_tokens": 1}).encode()
    assert ask(gw, big)[0] == 200
    assert sum(served(x) for x in bs) == 2
    st = gw.picker_stats()
    assert st["huntlb_epp_prefix_unparsed_total"] == 3
    assert st["huntlb_epp_prefix_blocks_total"] == 0
