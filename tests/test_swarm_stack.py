"""The Swarm stack (compose/swarm/stack.yaml) and its demo (scripts/swarm_demo.py)
checked without Docker: what the stack must say for the events the demo puts it
through, that the script's ports and names are the stack's, that Docker's own
client renders the file (when it has `docker stack config`), and that the
script counts each request in its phase and against the right node. The
demo itself (three nodes, load, a node killed) is `make demo-swarm`, not here.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SWARM = ROOT / "compose" / "swarm"


def stack() -> dict:
    return yaml.safe_load((SWARM / "stack.yaml").read_text())


def demo():
    spec = importlib.util.spec_from_file_location("swarm_demo", ROOT / "scripts" / "swarm_demo.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_every_service_is_dnsrr_and_publishes_in_host_mode():
    # no VIP, no ingress mesh: both need IPVS, which this kernel cannot give
    for name, svc in stack()["services"].items():
        assert svc["deploy"]["endpoint_mode"] == "dnsrr", name
        for p in svc.get("ports", []):
            assert p["mode"] == "host", (name, p)


def test_the_backends_drain_and_roll_without_shrinking():
    b = stack()["services"]["backends"]
    env = b["environment"]
    up = b["deploy"]["update_config"]
    assert up["order"] == "start-first" and up["parallelism"] == 1
    # SIGTERM reaches the agent (tini), and Swarm waits longer than its drain (30 s timeout)
    assert b["init"] is True
    grace = int(re.fullmatch(r"(\d+)s", b["stop_grace_period"]).group(1))
    assert grace > 30 and grace * 1000 > int(env["DRAIN_GRACE_MS"])
    # the agent closes its connections only once every front has taken it out:
    # its health checks failed (interval x fall) and DNS dropped it (1 s)
    px = stack()["services"]["haproxy"]["environment"]
    assert int(env["DRAIN_GRACE_MS"]) > int(px["HEALTH_INTERVAL_MS"]) * int(px["HEALTH_FALL"]) + 1000
    # the fleet: peers by the tasks' DNS name, the key a secret only its owner reads (the agent refuses 0444)
    assert env["FORWARD"] == "on" and env["FLEET_PEERS"] == "tasks.backends:9700"
    (secret,) = b["secrets"]
    assert env["FLEET_KEY_FILE"] == f"/run/secrets/{secret['source']}" and secret["mode"] == 0o400
    # backend.sh reads what the stack sets
    script = (ROOT / "compose" / "images" / "app" / "backend.sh").read_text()
    assert "${FLEET_PEERS:-" in script and "${FLEET_KEY_FILE:-" in script


def test_the_script_sends_where_the_stack_publishes():
    s = stack()["services"]
    published = {(name, p["target"]): p["published"] for name in ("envoy", "haproxy") for p in s[name]["ports"]}
    d = demo()
    # :10000 hunting, :10001 least-request inside each proxy (compose/configs.py)
    want = {"envoy-hunting": published[("envoy", 10000)], "envoy-least": published[("envoy", 10001)],
            "haproxy-hunting": published[("haproxy", 10000)], "haproxy-least": published[("haproxy", 10001)]}
    assert d.STRATEGIES == want
    assert all(s[name]["deploy"]["mode"] == "global" for name in ("envoy", "haproxy"))
    assert set(d.IMAGES) == {svc["image"] for svc in s.values()}


def test_docker_renders_the_stack(tmp_path):
    docker = shutil.which("docker")
    # Debian's 20.10 answers `docker stack config --help` with the help of `docker stack`, and 0
    if not docker or "docker stack config" not in subprocess.run([docker, "stack", "config", "--help"],
                                                                 capture_output=True, text=True).stdout:
        pytest.skip("this docker client has no `docker stack config` (Debian's 20.10 has not)")
    for f in ("stack.yaml",):
        shutil.copy(SWARM / f, tmp_path / f)
    (tmp_path / "fleet.key").write_text("00" * 32 + "\n")
    p = subprocess.run([docker, "stack", "config", "-c", "stack.yaml"], cwd=tmp_path, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin:/usr/local/bin", "DOCKER_HOST": "unix:///nonexistent"})
    assert p.returncode == 0, p.stderr
    rendered = yaml.safe_load(p.stdout)
    assert rendered["services"]["backends"]["deploy"]["update_config"]["order"] == "start-first"


def test_the_node_scripts_parse():
    subprocess.run(["sh", "-n", str(SWARM / "node" / "dockerd.sh")], check=True)


def test_requests_count_in_their_phase_and_at_their_node():
    d = demo()
    load = d.Load.__new__(d.Load)
    load.window_s = 5.0
    # two windows over two nodes, then one over the survivor; offsets in us
    w1 = d.Window(1, 100.0, ["10.0.0.1", "10.0.0.2"])
    w2 = d.Window(2, 105.0, ["10.0.0.1", "10.0.0.2"])
    w3 = d.Window(3, 110.0, ["10.0.0.1"])
    for w, recs in ((w1, [(0, 1_000_000, 200), (1, 4_000_000, 200)]),
                    (w2, [(0, 1_000_000, 200), (1, 2_000_000, 0), (2, 3_000_000, 503)]),
                    (w3, [(0, 500_000, 200)])):
        for s in d.STRATEGIES:
            w.records[s] = [(i, off, 1000, st) for i, off, st in recs]
            w.reports[s] = {"valid": True, "errors": 0, "status": {}, "error_kinds": {}}
    load.windows = [w1, w2, w3]
    phases = [d.Phase("steady", 100.0, 105.5), d.Phase("killed", 105.5, 111.0)]
    rows = d.tabulate(load, phases, 100.0, "10.0.0.2", 105.5)
    for s in d.STRATEGIES:
        # before the kill, what went to the node is the survivors' like any other request
        assert rows[0]["sent"][s] == 2 and rows[0]["errors"][s] == 0 and rows[0]["dead_sent"][s] == 0
        # index 1 went to the second target (the dead node), index 2 to the first: its 503 is the survivors'
        assert rows[1]["sent"][s] == 3 and rows[1]["errors"][s] == 1
        assert rows[1]["dead_sent"][s] == 1 and rows[1]["dead_front"][s] == 1


def test_a_request_counts_in_the_phase_it_ended_in():
    d = demo()
    load = d.Load.__new__(d.Load)
    load.window_s = 5.0
    w = d.Window(1, 100.0, ["10.0.0.1"])
    for s in d.STRATEGIES:
        # sent at 101 s, in the first phase, failed after a 10 s timeout: the second phase's
        w.records[s] = [(0, 1_000_000, 10_000_000, 0)]
        w.reports[s] = {"valid": True, "errors": 1, "status": {}, "error_kinds": {"timeout": 1}}
    load.windows = [w]
    rows = d.tabulate(load, [d.Phase("update", 100.0, 105.0), d.Phase("killed", 105.0, 120.0)], 100.0, "10.0.0.9", 105.0)
    assert all(rows[0]["sent"][s] == 0 and rows[1]["errors"][s] == 1 for s in d.STRATEGIES)
