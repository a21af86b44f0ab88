"""Plain fronts over a forwarding tier (`fleet_pass_plain`): the
proxy's own least-request and health check, no hunting line at all
(`envoy-filter/examples/plain-snippet.yaml` and
`haproxy-lua/examples/plain-snippet.cfg` pasted into stock configs, or the
shipped tier fronts with their hunting lines removed). Agents count a try for
the front at its TCP source IP, and ignore every hunt header from an IP that
is no member's: a client's pass through such a front untouched. Real Envoy and
HAProxy, real agents and apps on loopback, each on its own 127.x address;
arrivals counted at the apps."""

import copy
import json
import subprocess
import uuid

import pytest
import yaml
from harness import (EXAMPLES, HAPROXY_EXAMPLES, HaproxyRoot, app_stats, concurrent_statuses, counts, hold, request, start_fleet, start_front,
                     start_haproxy, tries_past_a_loaded_one, wait_tcp, wait_until)
from test_envoy_snippet import STOCK as ENVOY_STOCK, run_stock
from test_tier_snippets import HAPROXY_STOCK

SNIPPETS = {"envoy": EXAMPLES / "plain-snippet.yaml", "haproxy": HAPROXY_EXAMPLES / "plain-snippet.cfg"}
PLAIN = {"fleet_pass_plain": "true"}
SENT = 'huntlb_forwards_total{outcome="sent"}'
# What a client may add through a plain front: an offer's marks (refusable if
# taken), another front's name and count (the loaded backend's own front, so
# taken it would keep the try there), a forwarder's name.
FORGED = {"hunt-offer": "1", "hunt-target": "1", "hunt-pass": "127.0.0.1", "hunt-front": "127.0.0.1", "hunt-seen": "9",
          "hunt-via": "x"}


def plain_fleet(procs, addrs):
    """Three agents in a tier with fleet_pass_plain, each beside its app.
    No warm-up offer: from the test's own address (no member's) it would be
    a pass, kept by its front's count like every try here."""
    return start_fleet(procs, addrs, 3, agent_opts=PLAIN, wanting=False)


def pasted_front(kind, procs, addrs, tmp_path, bs, name, source: str | None):
    """A stock config of `kind` with the plain snippet pasted as its comments
    say (the source line uncommented, with `source`'s address, when given),
    validated by the proxy itself, running over `bs`; its listen address."""
    text = SNIPPETS[kind].read_text()
    if source:
        text = text.replace("# upstream_bind_config: ", "upstream_bind_config: ").replace("# source ", "source ")
        text = text.replace("127.0.1.254", source).replace("127.0.2.254", source)
    if kind == "envoy":
        cfg = copy.deepcopy(yaml.safe_load(ENVOY_STOCK))
        cfg["static_resources"]["clusters"][0].update(yaml.safe_load(text)["cluster"])
        return run_stock(procs, addrs, tmp_path, cfg, bs, name)
    listen = f"{addrs.host()}:10000"
    servers = "\n".join(f"    server s{i} {b.agent} check inter 500" for i, b in enumerate(bs))
    hr = HaproxyRoot("2.6")
    procs.cleanups.append(hr.cleanup)
    cfg_text = HAPROXY_STOCK.format(listen=listen, snippet=text, servers=servers)
    cfg = hr.dir / f"{name}.cfg"
    cfg.write_text(cfg_text)
    v = subprocess.run(hr.argv(cfg) + ["-c"], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stdout + v.stderr
    wait_tcp(listen, start_haproxy(procs, hr, name, cfg_text))
    wait_until(lambda: request(listen, "GET", "/warm")[0] == 200, what="the pasted front serving")
    return listen


def test_the_plain_snippets_are_short_and_have_no_hunting_line():
    for kind, path in SNIPPETS.items():
        lines = [l for l in path.read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")]
        assert len(lines) <= 25, (path, len(lines))
        assert not [l for l in lines if "hunt-" in l.replace("/.hunt/health", "")], lines
        assert "http-request" not in path.read_text() and "request_headers" not in path.read_text()


@pytest.mark.parametrize("kind", ["envoy", "haproxy"])
def test_plain_fronts_pass_tries_on_and_a_clients_hunt_headers_decide_nothing(procs, addrs, tmp_path, kind):
    # a holds 4 requests from the test's own address (127.0.0.1: a front of
    # its own to the agents). Two pasted fronts, each leaving from its own
    # address, send a their share of 24 tries; their own count there is 0, so
    # a passes each on. Every client forges the marks in FORGED: had a taken
    # hunt-pass or hunt-front, it would count the try for 127.0.0.1's front,
    # which holds all of a's 4, and keep it.
    a, b, c = bs = plain_fleet(procs, addrs)
    fronts = [pasted_front(kind, procs, addrs, tmp_path, bs, f"{kind}-plain-{i}", source=addrs.host()) for i in range(2)]

    def no_hunt_header(out):
        assert json.loads(out)["hunt_headers_seen"] == [], out  # no hunt header reached the app

    # each 200: no refusal, a client's offer marks make no offer
    served = tries_past_a_loaded_one(a, bs, fronts, "/plain", FORGED, b"p" * 2000, check=no_hunt_header)
    assert a.id not in served, served
    assert a.metrics()[SENT] >= 1
    assert sum(x.metrics()['huntlb_offers_total{decision="refuse"}'] for x in bs) == 0
    # A client's hunt-commit through a plain front is no peer's forward: refused
    # before anything reached an app (it would have dropped its first byte as go).
    path = f"/commit/{uuid.uuid4()}"
    status, _, out = request(fronts[0], "POST", path, body=b"G", headers={"hunt-commit": "none"})
    assert status == 400 and b"member" in out, (status, out)
    assert counts(bs, path) == [0, 0, 0]
    assert sum(x.metrics()['huntlb_forwards_in_total{outcome="taken"}'] for x in bs) == sum(x.metrics()[SENT] for x in bs)


@pytest.mark.parametrize("kind", ["envoy", "haproxy-2.6"])
def test_one_plain_front_alone_is_its_proxys_least_nothing_forwarded(procs, addrs, kind):
    # The shipped tier front with its hunting lines removed (the harness's
    # pass_plain): each agent holds only this front's tries, counted for its
    # source IP, so it keeps every one where the front's pick placed it.
    bs = plain_fleet(procs, addrs)
    front = start_front(kind, procs, addrs, bs, pass_plain=True)
    results = concurrent_statuses(front.listen, [f"/alone/{uuid.uuid4()}?work_ms=800" for _ in range(9)])
    assert results == [200] * 9
    assert sum(app_stats(b.app)["served"] for b in bs) >= 9
    assert sum(b.metrics()[SENT] for b in bs) == 0


def test_the_shipped_tier_front_still_passes_with_the_option_on(procs, addrs):
    # Back-compat: front-tier.cfg as shipped (hunt-pass: its own name), two of
    # them on their own addresses, over agents with fleet_pass_plain. Their
    # tries pass as before, counted for each front's source IP.
    a, b, c = bs = plain_fleet(procs, addrs)
    fronts = [start_front("haproxy-2.6", procs, addrs, bs, example="front-tier.cfg", source=True) for _ in range(2)]
    hold(a, 4)
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 4)
    for i in range(16):
        path = f"/shipped/{uuid.uuid4()}"
        status, h, _ = request(fronts[i % 2].listen, "GET", path)
        assert status == 200, (status, h)
        assert sorted(counts(bs, path)) == [0, 0, 1]
        assert h["hunt-served-by"] != a.id
    assert a.metrics()[SENT] >= 1
