"""The drop-ins over a forwarding tier, pasted as a user would:
`envoy-filter/examples/tier-snippet.yaml` into a stock Envoy config (the shape
of Envoy's own front-proxy example) and `haproxy-lua/examples/tier-snippet.cfg`
into a stock haproxy.cfg; each validated by the proxy itself, then run over real
agents that form a tier, arrivals counted at the apps."""

import copy
import subprocess
import uuid

import yaml
from harness import EXAMPLES, HAPROXY_EXAMPLES, HaproxyRoot, app_stats, hold, request, start_fleet, start_haproxy, wait_tcp, wait_until
from test_envoy_snippet import STOCK as ENVOY_STOCK, run_stock

HAPROXY_STOCK = """global
    maxconn 1000
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
frontend web
    bind {listen}
    default_backend app
backend app
{snippet}
{servers}
"""


def loaded_fleet(procs, addrs):
    """Three agents in a tier; a holds 4 requests no front sent."""
    bs = start_fleet(procs, addrs, 3, policy="dynamic:seen_margin=1",
                     agent_opts={"fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000})
    hold(bs[0], 4, work_ms=6000)
    return bs


def passes_the_loaded_backend_by(listen, bs):
    """24 requests through the front: none served by the loaded a, each
    processed once, and a passed on what the front sent it."""
    a = bs[0]
    for i in range(24):
        path = f"/pasted/{uuid.uuid4()}"
        status, h, _ = request(listen, "POST", path, body=b"x" * (i * 100), headers={"hunt-offer": "1", "hunt-target": "1"})
        assert status == 200, (status, h)
        assert sorted(app_stats(b.app)["paths"].get(path, 0) for b in bs) == [0, 0, 1]
    assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 1
    assert sum(b.metrics()['huntlb_offers_total{decision="refuse"}'] for b in bs) == 0


def test_the_envoy_tier_snippet_is_short_and_pasted_passes_tries_on(procs, addrs, tmp_path):
    text = (EXAMPLES / "tier-snippet.yaml").read_text()
    assert len(text.splitlines()) <= 25
    snippet = yaml.safe_load(text)
    cfg = copy.deepcopy(yaml.safe_load(ENVOY_STOCK))
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["route_config"]["virtual_hosts"][0].update(snippet["virtual_host"])
    cfg["static_resources"]["clusters"][0].update(snippet["cluster"])
    bs = loaded_fleet(procs, addrs)
    listen = run_stock(procs, addrs, tmp_path, cfg, bs, "envoy-stock-tier")
    passes_the_loaded_backend_by(listen, bs)


def test_the_haproxy_tier_snippet_is_short_and_pasted_passes_tries_on(procs, addrs):
    text = (HAPROXY_EXAMPLES / "tier-snippet.cfg").read_text()
    assert len(text.splitlines()) <= 25
    assert "lua" not in text.lower().replace("no lua", "")  # nothing to load
    bs = loaded_fleet(procs, addrs)
    listen = f"{addrs.host()}:10000"
    servers = "\n".join(f"    server s{i} {b.agent} check inter 500" for i, b in enumerate(bs))
    hr = HaproxyRoot("2.6")
    procs.cleanups.append(hr.cleanup)
    cfg_text = HAPROXY_STOCK.format(listen=listen, snippet=text, servers=servers)
    cfg = hr.dir / "stock-with-tier-snippet.cfg"
    cfg.write_text(cfg_text)
    v = subprocess.run(hr.argv(cfg) + ["-c"], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stdout + v.stderr
    wait_tcp(listen, start_haproxy(procs, hr, "haproxy-stock-tier", cfg_text))
    wait_until(lambda: request(listen, "GET", "/warm")[0] == 200, what="the pasted front serving")
    passes_the_loaded_backend_by(listen, bs)
