"""The compose demo's files, without Docker (part of `make test`): the proxy
configs it derives from the shipped fronts are accepted by the real Envoy and
HAProxy, the committed Grafana dashboard is the dashboard's own panels, and the
compose file keeps to what both Compose v2 and Debian's docker-compose 1.29 run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from harness import ROOT, envoy_binary

sys.path.insert(0, str(ROOT / "compose"))
import configs  # noqa: E402  (compose/configs.py: a script, not a package)

ENV = {"HEALTH_INTERVAL_MS": "500", "HEALTH_FALL": "2", "HEALTH_RISE": "2", "KEEPALIVE_S": "60", "TCP_SMART": "on"}


def dotenv() -> dict[str, str]:
    out = {}
    for line in (ROOT / "compose/.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


def test_envoy_config_is_valid(tmp_path):
    text = yaml.safe_dump(configs.envoy_config(), sort_keys=False)
    # what images/envoy/entrypoint.sh substitutes
    text = text.replace("${HEALTH_INTERVAL_S}", "0.500")
    for k, v in ENV.items():
        text = text.replace("${" + k + "}", v)
    assert "${" not in text
    cfg = yaml.safe_load(text)
    assert [l["address"]["socket_address"]["port_value"] for l in cfg["static_resources"]["listeners"]] == [10000, 10001, 10002]
    clusters = {c["name"]: c for c in cfg["static_resources"]["clusters"]}
    # hunting offers to, and the control is, Envoy's strongest least-request:
    # over every host (FULL_SCAN); only the hunting front names itself
    pick = lambda c: c.get("lb_policy") or c["load_balancing_policy"]["policies"][0]["typed_extension_config"]["typed_config"]["selection_method"]  # noqa: E731
    assert {n: pick(c) for n, c in clusters.items()} == {"hunting": "FULL_SCAN", "least": "FULL_SCAN", "random": "RANDOM"}
    named = {l["name"]: [h["header"]["key"] for vh in l["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"]
                         for h in vh.get("request_headers_to_add", [])] for l in cfg["static_resources"]["listeners"]}
    assert named == {"hunting": ["hunt-front"], "least": [], "random": []}
    assert all(c["type"] == "STRICT_DNS" for c in clusters.values())
    routes = [r for l in cfg["static_resources"]["listeners"]
              for vh in l["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"] for r in vh["routes"]]
    # hunting only on :10000; the controls carry no offer and no retry on refusals
    assert sum("retry_policy" in r["route"] for r in routes) == 4
    path = tmp_path / "envoy.yaml"
    path.write_text(text)
    p = subprocess.run([envoy_binary(), "--mode", "validate", "-c", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def test_haproxy_config_is_valid(tmp_path):
    text = configs.haproxy_config_text()
    assert text.count("server-template web 1-16 backends:8080 resolvers docker") == 3
    assert "use-server" in text.split("frontend least")[0] and "use-server" not in text.split("frontend least")[1]
    # each control is the shipped backend without hunting: health checks and the
    # connect-failure retry kept, nothing of hunt/1
    for name in ("least", "random"):
        section = re.search(rf"^backend {name}\n(?:[ .].*\n|\n)*", text, re.M).group(0)
        for line in ("retries 1", "option redispatch 1", "retry-on conn-failure\n", "option httpchk GET /.hunt/health",
                     "default-server check", "server-template web"):
            assert line in section, f"backend {name} lacks `{line.strip()}`"
        assert "hunt-" not in section and "425" not in section and ".if" not in section
    # the image's paths -> this checkout's; HAProxy reads ${VAR} from its environment
    text = text.replace("/etc/haproxy/?.lua", str(ROOT / "haproxy-lua/?.lua"))
    text = text.replace("/etc/haproxy/huntlb.lua", str(ROOT / "haproxy-lua/huntlb.lua"))
    mapfile = tmp_path / "huntlb-up.map"
    mapfile.write_text("")
    text = text.replace("/etc/haproxy/huntlb-up.map", str(mapfile))
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(text)
    env = {**os.environ, **ENV}
    p = subprocess.run(["/usr/sbin/haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def test_env_names_every_knob_the_configs_use():
    env = dotenv()
    used = set(re.findall(r"\$\{(\w+)\}", configs.haproxy_config_text()))
    used |= set(re.findall(r"\$\{(\w+)\}", yaml.safe_dump(configs.envoy_config()))) - {"HEALTH_INTERVAL_S"}
    compose = (ROOT / "compose/compose.yaml").read_text()
    used |= {m for m in re.findall(r"\$\{(\w+)\}", compose)}
    defaulted = set(re.findall(r"\$\{(\w+):-", compose))
    assert used - defaulted <= set(env), f"not in compose/.env: {sorted(used - defaulted - set(env))}"


def test_compose_file_runs_on_compose_v2_and_1_29():
    doc = yaml.safe_load((ROOT / "compose/compose.yaml").read_text())
    assert "name" not in doc and "version" not in doc
    for name, svc in doc["services"].items():
        assert "container_name" not in svc, name          # --scale and -p need free names
        assert svc.get("init") is True, name               # else each stop waits 10 s
        assert svc["image"].startswith("huntlb/") and "build" in svc, name
    aliases = {n for n, s in doc["services"].items() if "backends" in s.get("networks", {}).get("default", {}).get("aliases", [])}
    assert aliases == {"backend", "backend-small"}



@pytest.mark.parametrize("which", ["v2", "v1"])
def test_compose_reads_the_file(which):
    """Each Compose installed here (v2: `docker compose`, v1: Debian's docker-compose
    1.29) reads the file with compose/.env, no variable unset; no daemon needed."""
    cmd = ["docker", "compose"] if which == "v2" else ["docker-compose"]
    if not shutil.which(cmd[0]) or subprocess.run(cmd + ["version"], capture_output=True).returncode:
        pytest.skip(f"no `{' '.join(cmd)}` here")
    p = subprocess.run(cmd + ["config", "--services"], cwd=ROOT / "compose", capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "not set" not in p.stderr, p.stderr[-2000:]
    doc = yaml.safe_load((ROOT / "compose/compose.yaml").read_text())
    assert sorted(p.stdout.split()) == sorted(doc["services"])

def test_grafana_dashboard_is_the_dashboards_panels():
    committed = (ROOT / "compose/grafana/huntlb.json").read_text()
    assert committed == configs.grafana_text(), "compose/grafana/huntlb.json is stale: run python3 compose/configs.py"
    spec = json.loads((ROOT / "compose/dashboard/panels.json").read_text())
    g = json.loads(committed)
    assert [p["title"] for p in g["panels"]] == [p["title"] for p in spec["panels"]]
    assert [t["expr"] for p in g["panels"] for t in p["targets"]] == [q["expr"] for p in spec["panels"] for q in p["queries"]]


def test_dashboard_loads_nothing_from_elsewhere():
    for f in (ROOT / "compose/dashboard").iterdir():
        text = f.read_text()
        assert not re.search(r"(src|href)=\"(https?:)?//", text), f.name
        assert "http://" not in text and "https://" not in text, f.name


def test_scaler_decisions():
    """compose/scaler.py's rule: out after 3 readings at or above 0.40, in after 12
    below 0.10, a pause of 4 readings after each change, within 3-8 backends."""
    import scaler  # compose/scaler.py

    rule = scaler.Rule()

    def run(readings, n):
        st, out = scaler.State(), []
        for r in readings:
            st, n = scaler.decide(rule, st, r, n)
            out.append(n)
        return out

    assert run([0.5, 0.5, 0.5], 3) == [3, 3, 4]
    assert run([0.5, 0.5, 0.3, 0.5, 0.5], 3) == [3, 3, 3, 3, 3]            # a dip resets the count
    assert run([0.5] * 3 + [0.9] * 4 + [0.9] * 3, 3) == [3, 3, 4, 4, 4, 4, 4, 4, 4, 5]   # the cooldown
    assert run([0.05] * 12, 4) == [4] * 11 + [3]
    assert run([0.05] * 12, 3) == [3] * 12                               # never below min
    assert run([0.9] * 3, 8) == [8] * 3                                  # never above max
    assert run([None, 0.5, 0.5, None, 0.5], 3) == [3] * 5                # no reading, no change
