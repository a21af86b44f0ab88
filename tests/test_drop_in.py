"""docs/drop-in.md as a user follows it: its blocks, taken from the page (only
addresses and paths changed to this test's own), make the key, configure three
agents in a tier, and go into four stock fronts of each proxy; then tries sent
through all four fronts are passed on by the loaded backend's agent, none is
processed twice, and the page's check command shows the forwards."""

import copy
import re
import shutil
import subprocess
import uuid

import pytest
import yaml
from harness import (EXAMPLES, HAPROXY_EXAMPLES, ROOT, Backend, HaproxyRoot, app_stats, binary, hold, request, wait_http,
                     wait_tcp, wait_until)
from harness.testbed import peers_of
from test_envoy_snippet import STOCK as ENVOY_STOCK, run_stock
from test_tier_snippets import HAPROXY_STOCK

PAGE = ROOT / "docs" / "drop-in.md"
FRONTS = 4


def blocks() -> dict[str, str]:
    """Each `<!-- drop-in: NAME -->` marked fenced block of the page, by name."""
    found = re.findall(r"<!-- drop-in: (\S+) -->\n```[^\n]*\n(.*?)```", PAGE.read_text(), re.S)
    return dict(found)


def test_the_page_has_every_step_and_its_fronts_are_the_shipped_snippets():
    b = blocks()
    assert sorted(b) == ["agent.toml", "check", "check-front", "envoy", "haproxy", "key"]
    # the files users are also pointed at, and that the other tests paste, say the same
    assert b["haproxy"] == "\n".join(l for l in (HAPROXY_EXAMPLES / "tier-snippet.cfg").read_text().splitlines()
                                     if not l.startswith("#")) + "\n"
    assert b["envoy"] == "\n".join(l for l in (EXAMPLES / "tier-snippet.yaml").read_text().splitlines()
                                   if not l.startswith("#")) + "\n"


@pytest.fixture
def fleet(procs, addrs, tmp_path):
    """Step 1 and step 2 as written: the key made by the page's commands, and
    three agents (each beside a workload app) from the page's agent.toml."""
    b = blocks()
    etc = tmp_path / "etc-huntlb"
    key_cmds = b["key"].replace("sudo ", "").replace("/etc/huntlb", str(etc))
    subprocess.run(["bash", "-euo", "pipefail", "-c", key_cmds], check=True, timeout=30)
    key = etc / "fleet.key"
    assert re.fullmatch(r"[0-9a-f]{64}\n", key.read_text()) and key.stat().st_mode & 0o077 == 0
    hosts = [addrs.host() for _ in range(3)]
    out = []
    for i, host in enumerate(hosts):
        app_proc, app = procs.workload(host, demand="const:0")
        toml = b["agent.toml"].replace("127.0.0.1:9000", app).replace("/etc/huntlb", str(etc))
        # the peer list names the three hosts; everything else on the page is
        # 10.0.0.11's own address, which each host writes as its own
        peers = peers_of(hosts)
        toml = toml.replace("10.0.0.11:9700,10.0.0.12:9700,10.0.0.13:9700", peers).replace("10.0.0.11", host)
        assert "10.0.0." not in toml, toml
        path = tmp_path / f"agent-{i}.toml"
        path.write_text(toml)
        p = procs.start(f"agent-{host}", [binary("huntlb-agent"), "--config", str(path), "--id", f"agent-{host}"])
        wait_http(f"{host}:9901", "/metrics", proc=p)
        out.append(Backend(host, app, f"{host}:8080", f"{host}:9901", app_proc, p))
    wait_until(lambda: all(x.metrics()["huntlb_fleet_peers"] == 2 for x in out), what="every agent hearing the 2 others")
    return out


def through_four_fronts(listens: list[str], bs: list[Backend]):
    """Backend a holds 4 requests no front sent. 48 POSTs, round robin over the
    four fronts: each processed exactly once, none by a (its agent passed on
    what its fronts sent it), and no client error."""
    a = bs[0]
    ts = hold(a, 4, work_ms=8000)
    try:
        for i in range(48):
            path = f"/drop-in/{uuid.uuid4()}"
            status, h, _ = request(listens[i % FRONTS], "POST", path, body=b"x" * (i * 50))
            assert status == 200, (listens[i % FRONTS], status, h)
            assert sorted(app_stats(x.app)["paths"].get(path, 0) for x in bs) == [0, 0, 1], path
        assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 1
        assert sum(x.metrics()['huntlb_offers_total{decision="refuse"}'] for x in bs) == 0
    finally:
        for t in ts:
            t.join(timeout=15)


def the_check_shows_forwards(bs: list[Backend]):
    """Step 4 as written, on backend a: its forwards, and the 2 peers it hears."""
    if not shutil.which("curl"):
        pytest.skip("curl not installed: the page's check uses it")
    cmd = blocks()["check"].replace("10.0.0.11:9901", bs[0].admin)
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=30).stdout
    sent = re.search(r'^huntlb_forwards_total\{outcome="sent"\} (\d+)$', out, re.M)
    assert sent and int(sent.group(1)) >= 1, out
    assert re.search(r"^huntlb_fleet_peers 2$", out, re.M), out


def the_front_check_says(listen: str) -> str:
    """Step 4's front check as written, asked of the front at `listen`."""
    if not shutil.which("curl"):
        pytest.skip("curl not installed: the page's check uses it")
    cmd = blocks()["check-front"].replace("10.0.0.1:80", listen)
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out
    return out.stdout.strip()


def test_haproxy_fronts_from_the_page_pass_tries_on(procs, addrs, fleet):
    hr = HaproxyRoot("2.6")
    procs.cleanups.append(hr.cleanup)
    servers = "\n".join(f"    server web{i + 1} {b.agent} check inter 500" for i, b in enumerate(fleet))
    listens = []
    for i in range(FRONTS):
        listen = f"{addrs.host()}:10000"
        cfg = hr.dir / f"front-{i}.cfg"
        cfg.write_text(HAPROXY_STOCK.format(listen=listen, snippet=blocks()["haproxy"], servers=servers))
        v = subprocess.run(hr.argv(cfg) + ["-c"], capture_output=True, text=True, timeout=60)
        assert v.returncode == 0, v.stdout + v.stderr
        # four fronts on one machine share a host name: each its own, as the page says (-L)
        wait_tcp(listen, procs.start(f"haproxy-front-{i}", hr.argv(cfg) + ["-L", f"front-{i}"]))
        wait_until(lambda: request(listen, "GET", "/warm")[0] == 200, what=f"front {i} serving")
        listens.append(listen)
    through_four_fronts(listens, fleet)
    the_check_shows_forwards(fleet)
    # Step 4's front check tells a front with its line from one without (a
    # stock leastconn front over the same agents), whatever the forwards say;
    # the probe reached the app through the first and nothing through the second.
    before = sum(app_stats(b.app)["paths"].get("/", 0) for b in fleet)
    assert the_front_check_says(listens[0]) == f"front {listens[0]}: hunt-pass line in"
    assert sum(app_stats(b.app)["paths"].get("/", 0) for b in fleet) == before + 1
    bare = f"{addrs.host()}:10000"
    cfg = hr.dir / "front-bare.cfg"
    cfg.write_text(HAPROXY_STOCK.format(listen=bare, snippet="    balance leastconn", servers=servers))
    wait_tcp(bare, procs.start("haproxy-front-bare", hr.argv(cfg)))
    wait_until(lambda: request(bare, "GET", "/warm")[0] == 200, what="the bare front serving")
    before = sum(app_stats(b.app)["paths"].get("/", 0) for b in fleet)
    assert the_front_check_says(bare) == f"front {bare}: no hunt-pass line"
    assert sum(app_stats(b.app)["paths"].get("/", 0) for b in fleet) == before


def test_envoy_fronts_from_the_page_pass_tries_on(procs, addrs, tmp_path, fleet):
    snippet = yaml.safe_load(blocks()["envoy"])
    listens = []
    for i in range(FRONTS):
        cfg = copy.deepcopy(yaml.safe_load(ENVOY_STOCK))
        hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        hcm["route_config"]["virtual_hosts"][0].update(copy.deepcopy(snippet["virtual_host"]))
        cfg["static_resources"]["clusters"][0].update(copy.deepcopy(snippet["cluster"]))
        listens.append(run_stock(procs, addrs, tmp_path, cfg, fleet, f"envoy-front-{i}"))
    through_four_fronts(listens, fleet)
    the_check_shows_forwards(fleet)
    assert the_front_check_says(listens[0]) == f"front {listens[0]}: hunt-pass line in"
