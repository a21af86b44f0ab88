"""The `docker compose up` demo, for real: both proxies' six strategies, each over
four fronts (replicas of the proxy), over Docker-DNS backends, scaled 3 -> 5 -> 3 and one backend killed under open-loop load, the
scaler acting on a load step, then `compose down` with nothing left running.

Needs Docker (scripts/docker-setup.sh install), so `make test` skips it; `.ci/run`
runs it with HUNTLB_COMPOSE_TEST=1. It starts dockerd if none answers and stops
that dockerd at the end; images stay cached. Every number it asserts is what the
clients (the stack's own huntlb-loadgen, compose/drive.py) saw.

Compose: `docker compose` (v2) if it answers, else Debian's `docker-compose`
(1.29); HUNTLB_COMPOSE=v2 or v1 picks one (for build.sh and the scaler too), and
the test logs which version ran. `scripts/docker-setup.sh compose-v2` builds v2.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from docker_state import as_root, differences, machine_state
from harness.net import wait_until

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_DIR = ROOT / "compose"
FRONTS = ["envoy-hunting", "envoy-least", "envoy-random", "haproxy-hunting", "haproxy-least", "haproxy-random"]
HUNTING = ["envoy-hunting", "haproxy-hunting"]
FRONTS_PER_STRATEGY = 4  # compose.yaml: scale of the envoy and haproxy services
WINDOW_S = 3  # loadgen window: counters move every 3 s


def wait(cond, timeout: float, what: str, every: float = 0.5):
    return wait_until(cond, timeout=timeout, every=every, what=what)


pytestmark = pytest.mark.skipif(os.environ.get("HUNTLB_COMPOSE_TEST") != "1",
                                reason="the compose demo needs Docker: HUNTLB_COMPOSE_TEST=1 (.ci/run sets it)")


def log(msg: str) -> None:
    print(f"compose-check: {msg}", file=sys.stderr, flush=True)


def run(argv, timeout=600, env=None, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def compose_cmd() -> list[str]:
    """The Compose to test: HUNTLB_COMPOSE=v2|v1, else v2 if `docker compose` answers."""
    want = os.environ.get("HUNTLB_COMPOSE", "")
    assert want in ("", "v1", "v2"), f"HUNTLB_COMPOSE={want}: v1 or v2"
    v2 = run(["docker", "compose", "version"], check=False).returncode == 0
    if want == "v2":
        assert v2, "HUNTLB_COMPOSE=v2, but `docker compose` does not answer: scripts/docker-setup.sh compose-v2"
    elif want == "v1":
        assert shutil.which("docker-compose"), "HUNTLB_COMPOSE=v1, but no docker-compose: scripts/docker-setup.sh install"
    return ["docker", "compose"] if want == "v2" or (not want and v2) else ["docker-compose"]


def compose_version(cmd: list[str]) -> str:
    return "v2" if cmd[:2] == ["docker", "compose"] else "v1"


class Stack:
    def __init__(self, project: str):
        self.project = project
        self.ports = {k: free_port() for k in ("DASHBOARD_PORT", "LOADGEN_PORT")}
        self.env = {**os.environ, **{k: str(v) for k, v in self.ports.items()}, "BIND": "127.0.0.1",
                    "LOAD_WINDOW_S": str(WINDOW_S)}
        self.cmd = compose_cmd() + ["-f", str(COMPOSE_DIR / "compose.yaml"), "-p", project]
        self.env["HUNTLB_COMPOSE"] = compose_version(self.cmd)  # the scaler uses the same one

    def compose(self, *args, timeout=300) -> str:
        return run(self.cmd + list(args), timeout=timeout, env=self.env).stdout

    def ids(self, service="backend") -> list[str]:
        ids = self.compose("ps", "-q", service).split()
        if not ids:
            return []
        states = run(["docker", "inspect", "-f", "{{.Id}} {{.State.Running}}", *ids]).stdout.split("\n")
        return [l.split()[0][:12] for l in states if l.endswith(" true")]

    def metrics(self) -> dict[str, float]:
        return scrape(self.ports["LOADGEN_PORT"])

    def prometheus(self, query: str) -> float | None:
        url = f"http://127.0.0.1:{self.ports['DASHBOARD_PORT']}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        res = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
        return float(res[0]["value"][1]) if res else None

    def rate(self, factor: float) -> None:
        """The load generator's rate x factor from its next window on."""
        url = f"http://127.0.0.1:{self.ports['LOADGEN_PORT']}/rate?factor={factor}"
        urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=5).read()

    def windows(self) -> int:
        return int(self.metrics().get("huntlb_demo_windows_total", 0))

    def after_windows(self, n: int) -> dict[str, float]:
        """Counters once n more windows have finished (the one in progress counts as the first)."""
        w0 = self.windows()
        wait(lambda: self.windows() >= w0 + n, timeout=n * WINDOW_S + 60, what=f"{n} load windows")
        return self.metrics()


def counts(m: dict[str, float], kind: str) -> dict[str, float]:
    return {f: m.get(f'huntlb_demo_{kind}_total{{front="{f}"}}', 0.0) for f in FRONTS}


def served(m: dict[str, float], front: str) -> dict[str, float]:
    pre = f'huntlb_demo_served_total{{front="{front}",backend="'
    return {k[len(pre):-2]: v for k, v in m.items() if k.startswith(pre)}


def delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a.get(k, 0) for k in b}


@pytest.fixture(scope="module")
def dockerd():
    assert shutil.which("docker") and shutil.which("dockerd"), "no Docker: run scripts/docker-setup.sh install"
    # the machine as dockerd found it (rules, forwarding, interfaces; root needed to read the rules)
    before = machine_state() if as_root() is not None else None
    started = run([str(ROOT / "scripts/docker-setup.sh"), "start"], timeout=120).stdout.strip()
    log(f"dockerd {'started, PID ' + started if started else 'was already running'}")
    try:
        yield
    finally:
        if started:
            run([str(ROOT / "scripts/docker-setup.sh"), "stop", started], timeout=60, check=False)
    if started and before is not None:
        # and as it was left: what that dockerd changed undone (tests/test_docker_setup.py)
        assert differences(before, machine_state()) == {}, "scripts/docker-setup.sh stop left the machine changed"


def test_compose_demo(dockerd):
    cmd = compose_cmd()
    version = run(cmd + ["version"]).stdout.splitlines()[0]
    log(f"compose: `{' '.join(cmd)}`, {version}")
    timings = {}
    t0 = time.monotonic()
    run([str(COMPOSE_DIR / "build.sh")], timeout=1500, env={**os.environ, "HUNTLB_COMPOSE": compose_version(cmd)})
    timings["build"] = time.monotonic() - t0
    stack = Stack(f"huntlbtest{os.getpid()}")
    try:
        _exercise(stack, timings)
    finally:
        # what every container said, kept for a failed run (drive.py names each client error's status)
        logs = ROOT / ".cache" / "compose-check.log"
        logs.parent.mkdir(exist_ok=True)
        logs.write_text(run(stack.cmd + ["logs", "--no-color"], env=stack.env, check=False, timeout=120).stdout)
        log(f"container logs: {logs}")
        t = time.monotonic()
        stack.compose("down", "-v", "--remove-orphans", "-t", "10", timeout=180)
        timings["down"] = time.monotonic() - t
        left = run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={stack.project}"]).stdout.split()
        nets = run(["docker", "network", "ls", "-q", "--filter", f"label=com.docker.compose.project={stack.project}"]).stdout.split()
        log(f"timings (s, {version}): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()) + f"; total {time.monotonic() - t0:.1f}")
        assert not left and not nets, f"left behind: containers {left}, networks {nets}"


def _exercise(stack: Stack, timings: dict) -> None:
    t = time.monotonic()
    stack.compose("up", "-d")
    # traffic through every front, each served by every backend
    def first_window():
        try:
            return stack.windows() >= 1
        except OSError:  # the published port accepts (and closes) before the load generator listens
            return False
    wait(first_window, timeout=90, what="the first load window")
    m = stack.after_windows(2)
    timings["up"] = time.monotonic() - t
    backends = stack.ids("backend") + stack.ids("backend-small")
    assert len(backends) == 4
    for f in FRONTS:
        by = served(m, f)
        # the load generator found the proxy's 4 replicas by DNS and spread over them
        fronts = m.get(f'huntlb_demo_fronts{{front="{f}"}}')
        assert fronts == FRONTS_PER_STRATEGY, f"{f} spread over {fronts} fronts"
        assert counts(m, "requests")[f] > 0, f"no traffic through {f}"
        assert set(by) == set(backends), f"{f} served by {sorted(by)}, backends {sorted(backends)}"
    assert all(v == 0 for v in counts(m, "errors").values()), f"client errors before any scaling: {counts(m, 'errors')}"
    log(f"up: every strategy spread over {FRONTS_PER_STRATEGY} fronts and served by all {len(backends)} backends, 0 client errors")

    # 3 -> 5 with load flowing: the new backends serve within seconds, on every front
    before = stack.metrics()
    t = time.monotonic()
    stack.compose("up", "-d", "--no-recreate", "--no-deps", "--scale", "backend=5", "backend")
    new = set(stack.ids("backend")) - set(backends)
    assert len(new) == 2, f"scale to 5 gave {stack.ids('backend')}"

    def new_serve():
        m = stack.metrics()
        return all(served(m, f).get(b, 0) > served(before, f).get(b, 0) for f in FRONTS for b in new)
    wait(new_serve, timeout=40, what="the 2 new backends serving on every front")
    timings["new backends serving"] = time.monotonic() - t
    up = stack.after_windows(1)
    errors = delta(counts(before, "errors"), counts(up, "errors"))
    log(f"scale 3 -> 5: the new backends served on all six fronts after {timings['new backends serving']:.1f} s "
        f"(counters move every {WINDOW_S} s); client errors {errors}")
    # Envoy sends nothing to a new host before its first health check passes;
    # HAProxy (2.6, 3.0) would use a server Docker's DNS has just named at once,
    # before the container listens, so the module holds it in maintenance until
    # one health probe answers (gate_new): 0 on every front.
    assert all(v == 0 for v in errors.values()), f"client errors while 2 backends were added: {errors}"
    before = up

    # The forwarding tier (FORWARD=on): every agent, the new ones too, hears
    # the other five by the name `backends`, and offers are forwarded.
    wait(lambda: stack.prometheus("min(huntlb_fleet_peers)") == 5 and stack.prometheus("max(huntlb_fleet_peers)") == 5,
         timeout=30, what="every agent hearing its 5 peers")
    forwarded = stack.prometheus('sum(huntlb_forwards_total{outcome="sent"})')
    assert forwarded and forwarded > 0, f"no offer forwarded: {forwarded}"
    log(f"forwarding tier: every agent hears its 5 peers; {forwarded:.0f} offers forwarded so far")

    # 5 -> 3 with load flowing: the removed ones drain, nobody sees an error
    t = time.monotonic()
    stack.compose("up", "-d", "--no-recreate", "--no-deps", "--scale", "backend=3", "backend", timeout=180)
    timings["scale in"] = time.monotonic() - t
    assert len(stack.ids("backend")) == 3
    after = stack.after_windows(2)
    errors = delta(counts(before, "errors"), counts(after, "errors"))
    requests = delta(counts(before, "requests"), counts(after, "requests"))
    log(f"scale 5 -> 3: {int(sum(requests.values()))} requests, client errors {errors}")
    assert all(v == 0 for v in errors.values()), f"client errors while scaling in: {errors}"
    assert all(v > 0 for v in requests.values())

    # kill one backend (SIGKILL): the hunting fronts lose only what was inside it.
    # "Inside": the most requests the agent held at once over the last 10 s (Prometheus
    # scrapes it every 2 s) or just before the kill, whichever is more.
    victim = stack.ids("backend")[0]
    ip = run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", victim]).stdout.strip()
    inside = run(["docker", "exec", victim, "python3", "-c",
                  "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9901/metrics').read().decode())"]).stdout
    now = float(re.search(r"^huntlb_inflight (\S+)", inside, re.M).group(1))
    recent = stack.prometheus(f'max_over_time(huntlb_inflight{{instance="{ip}:9901"}}[10s])')
    inflight = max(now, recent or 0.0)
    before = stack.metrics()
    run(["docker", "kill", victim])
    after = stack.after_windows(3)
    errors = delta(counts(before, "errors"), counts(after, "errors"))
    log(f"kill {victim}: {now:.0f} requests in flight there just before, at most {recent} over the last 10 s; "
        f"client errors {errors}")
    for f in HUNTING:
        assert errors[f] <= inflight, f"{f}: {errors[f]} client errors, at most {inflight:.0f} were inside the killed backend"
    # no errors once the proxies noticed: the last window is clean on every front
    last = stack.after_windows(2)
    assert delta(counts(after, "errors"), counts(last, "errors")) == {f: 0 for f in FRONTS}

    # back to 3 (compose starts the killed one again), then a load step: the scaler adds a backend
    # A light baseline first (half the rate, over the signal's 20 s window), so the
    # step, not what came before, is what the scaler answers.
    stack.compose("up", "-d", "--no-recreate", "--no-deps", "--scale", "backend=3", "backend")
    stack.rate(0.5)
    stack.after_windows(8)
    baseline = stack.prometheus("huntlb:finals_busy:ratio")
    log(f"baseline at half the rate: scaling signal {baseline}")
    assert baseline is not None and baseline < 0.4, f"the signal is {baseline} before the step"
    stack.rate(1.6)
    t = time.monotonic()
    ids0 = set(stack.ids("backend"))
    p = run([sys.executable, str(COMPOSE_DIR / "scaler.py"), "-p", stack.project, "--every", "3",
             "--prometheus", f"http://127.0.0.1:{stack.ports['DASHBOARD_PORT']}", "--max-seconds", "120", "--max-changes", "1"],
            timeout=200, env=stack.env)
    timings["scaler acted"] = time.monotonic() - t
    log("scaler under a step from 0.5x to 1.6x the rate:\n" + p.stdout.strip())
    assert re.search(r"3 backends -> 4", p.stdout), "the scaler did not add a backend under the load step"
    fresh = set(stack.ids("backend")) - ids0
    assert len(fresh) == 1, f"backends before {sorted(ids0)}, after {stack.ids('backend')}"
    b = fresh.pop()
    wait(lambda: all(served(stack.metrics(), f).get(b, 0) > 0 for f in HUNTING), timeout=30,
         what="the scaler's backend serving")
    log(f"scaler: a 4th backend after {timings['scaler acted']:.0f} s of the step, serving on both hunting fronts")
