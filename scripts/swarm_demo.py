#!/usr/bin/env python3
"""The compose demo's fleet as a Docker Swarm stack on three nodes, under load,
through the events an orchestrator brings: backends scaled 3 -> 5 -> 3, a
rolling update of the agents, a node killed. Hunting fronts and the proxies'
own least-request fronts take the same open-loop load at the same time, so
every event meets both; the clients' errors are counted per phase.

  make demo-swarm                  (docs/demo.md, "Across nodes: Docker Swarm")
  scripts/swarm_demo.py --no-build (images already built by compose/build.sh)

What it creates, all labelled huntlb.swarm-demo and removed at exit by id
(normal end, an exception, SIGINT/SIGTERM/SIGHUP; a run killed with SIGKILL
leaves them to the next run, which removes them first):
  * a bridge network of its own, and on it three nodes: containers of
    huntlb/swarm-node (compose/swarm/node/: Debian's docker.io), each with a
    volume for its /var/lib/docker;
  * inside the nodes: a swarm (node 1 manager, nodes 2 and 3 workers), the
    project's images (docker save | docker load), the stack
    compose/swarm/stack.yaml (backends: agent + emulated app, replicated 3;
    one Envoy and one HAProxy front per node, ports published on the node);
  * on this machine: huntlb-loadgen processes, sending to the nodes' addresses.
Load: open-loop Poisson, RATE req/s to each of four strategies (Envoy and
HAProxy, hunting and least-request), the same seed and job sizes for all four,
in windows of WINDOW_S seconds started on schedule (a window does not wait for
the last one's stragglers), each window over the nodes whose fronts accept a
connection when it starts: an outside balancer that drops a dead node, the
same for every strategy. A request is counted in the phase it was sent in.
Nothing is re-sent.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the harness package, run from anywhere
from harness.net import wait_until  # noqa: E402
SWARM_DIR = ROOT / "compose" / "swarm"
# the wall clock less the monotonic one: the load generators report their
# start on the wall clock, the phases are marked on the monotonic
WALL_MINUS_MONOTONIC = time.time() - time.monotonic()
LABEL = "huntlb.swarm-demo"
STACK = "huntlb"
NODE_IMAGE = "huntlb/swarm-node:dev"
IMAGES = ["huntlb/app:dev", "huntlb/envoy:dev", "huntlb/haproxy:dev"]
# strategy -> the port its fronts publish on every node (stack.yaml)
STRATEGIES = {"envoy-hunting": 10000, "envoy-least": 10001, "haproxy-hunting": 11000, "haproxy-least": 11001}
HUNTING = ["envoy-hunting", "haproxy-hunting"]
# every capability but SYS_RESOURCE (--privileged fails on this kernel), no
# seccomp/AppArmor/masked paths, every device, a cgroup namespace of its own
NODE_FLAGS = ["--init", "--cgroupns", "private", "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
              "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
              "--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm"]


def log(msg: str) -> None:
    print(f"swarm-demo {time.strftime('%H:%M:%S')}: {msg}", file=sys.stderr, flush=True)


def run(argv: list[str], timeout: float = 300, check: bool = True, input: bytes | None = None) -> str:
    p = subprocess.run(argv, capture_output=True, timeout=timeout, input=input)
    if check and p.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.decode(errors='replace')[-2000:]}")
    return p.stdout.decode(errors="replace")


# ---------------------------------------------------------------- what we create

def leftovers() -> dict[str, list[str]]:
    """Ids of everything labelled as this demo's (this run's or a killed run's)."""
    q = ["--filter", f"label={LABEL}", "-q"]
    return {"containers": run(["docker", "ps", "-a", *q]).split(),
            "volumes": run(["docker", "volume", "ls", *q]).split(),
            "networks": run(["docker", "network", "ls", *q]).split()}


def remove_all(ids: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Remove by id, containers first (their volumes and network are then free);
    returns what is still there."""
    ids = ids or leftovers()
    if ids["containers"]:
        run(["docker", "rm", "-f", "-v", *ids["containers"]], check=False, timeout=120)
    if ids["volumes"]:
        run(["docker", "volume", "rm", "-f", *ids["volumes"]], check=False)
    if ids["networks"]:
        run(["docker", "network", "rm", *ids["networks"]], check=False)
    return leftovers()


class Cleanup:
    """Runs once: at the end of main, at exit, or on a signal."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.dockerd: str = ""
        self.done = False
        self.lock = threading.Lock()
        self.spawn = threading.Lock()

    def __call__(self) -> None:
        with self.lock, self.spawn:
            if self.done:
                return
            self.done = True
        with self.spawn:  # no generator starts after this: the load's thread checks `done` under the same lock
            procs = list(self.procs)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        left = remove_all()
        if any(left.values()):
            log(f"LEFT BEHIND after cleanup: {left}")
        else:
            log("cleaned up: no container, volume or network of this demo left")
        if self.dockerd:
            run([str(ROOT / "scripts/docker-setup.sh"), "stop", self.dockerd], check=False, timeout=60)
            log(f"stopped the dockerd this run started (PID {self.dockerd})")


cleanup = Cleanup()


def on_signal(signum, _frame):
    raise SystemExit(f"swarm-demo: signal {signum}, cleaning up")


# ---------------------------------------------------------------- the nodes

@dataclass
class Node:
    name: str
    cid: str
    ip: str = ""

    def docker(self, *args: str, timeout: float = 300, check: bool = True, input: bytes | None = None) -> str:
        return run(["docker", "exec", "-i", self.cid, "docker", *args], timeout=timeout, check=check, input=input)


def start_nodes(n: int, run_id: str) -> tuple[list[Node], str]:
    net = run(["docker", "network", "create", "--driver", "bridge", "--label", LABEL, f"huntlb-swarm-{run_id}"]).strip()
    nodes = []
    for i in range(1, n + 1):
        name = f"huntlb-swarm-{run_id}-n{i}"
        vol = run(["docker", "volume", "create", "--label", LABEL, f"{name}-docker"]).strip()
        cid = run(["docker", "run", "-d", "--name", name, "--hostname", f"node{i}", "--label", LABEL,
                   "--network", net, *NODE_FLAGS, "-v", f"{vol}:/var/lib/docker", NODE_IMAGE]).strip()
        nodes.append(Node(f"node{i}", cid[:12]))
    for nd in nodes:
        nd.ip = run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", nd.cid]).strip()
        t0 = time.monotonic()
        while nd.docker("info", "-f", "{{.ServerVersion}}", check=False, timeout=30).strip() == "":
            if time.monotonic() - t0 > 60:
                raise RuntimeError(f"{nd.name}: dockerd did not answer in 60 s: {run(['docker', 'logs', nd.cid], check=False)[-2000:]}")
            time.sleep(0.5)
    return nodes, net


def load_images(nodes: list[Node]) -> None:
    with tempfile.TemporaryDirectory(prefix="huntlb-swarm-") as d:
        tar = Path(d) / "images.tar"
        run(["docker", "save", "-o", str(tar), *IMAGES], timeout=300)
        errs = []

        def load(nd: Node):
            try:
                with open(tar, "rb") as f:
                    p = subprocess.run(["docker", "exec", "-i", nd.cid, "docker", "load", "-q"], stdin=f,
                                       capture_output=True, timeout=600)
                if p.returncode:
                    errs.append(f"{nd.name}: {p.stderr.decode()[-500:]}")
            except Exception as e:  # noqa: BLE001 - reported below
                errs.append(f"{nd.name}: {e}")
        threads = [threading.Thread(target=load, args=(nd,)) for nd in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errs:
            raise RuntimeError("docker load: " + "; ".join(errs))


def form_swarm(nodes: list[Node]) -> None:
    mgr = nodes[0]
    mgr.docker("swarm", "init", "--advertise-addr", mgr.ip)
    token = mgr.docker("swarm", "join-token", "-q", "worker").strip()
    for nd in nodes[1:]:
        nd.docker("swarm", "join", "--advertise-addr", nd.ip, "--token", token, f"{mgr.ip}:2377")
    ready = mgr.docker("node", "ls", "--format", "{{.Hostname}} {{.Status}}").split("\n")
    assert sum(1 for line in ready if line.endswith(" Ready")) == len(nodes), ready


def deploy(mgr: Node, encrypted: bool) -> None:
    key = (ROOT / "compose" / ".fleet.key")
    assert key.is_file(), "no compose/.fleet.key: compose/build.sh makes it"
    text = (SWARM_DIR / "stack.yaml").read_text()
    if encrypted:  # the overlay's VXLAN traffic in IPsec between nodes
        assert "    # driver_opts: {encrypted: \"\"}" in text
        text = text.replace("    # driver_opts: {encrypted: \"\"}", "    driver_opts: {encrypted: \"\"}")
    run(["docker", "exec", mgr.cid, "mkdir", "-p", "/stack"])
    run(["docker", "exec", "-i", mgr.cid, "sh", "-c", "cat > /stack/stack.yaml"], input=text.encode())
    run(["docker", "cp", str(key), f"{mgr.cid}:/stack/fleet.key"])
    run(["docker", "exec", "-w", "/stack", mgr.cid, "docker", "stack", "deploy", "-c", "stack.yaml", STACK])


def running_tasks(mgr: Node, service: str) -> list[tuple[str, str]]:
    """(task name, node) of the service's tasks running now."""
    out = mgr.docker("service", "ps", f"{STACK}_{service}", "--filter", "desired-state=running",
                     "--format", "{{.Name}} {{.Node}} {{.CurrentState}}", check=False)
    return [(line.split()[0], line.split()[1]) for line in out.splitlines() if " Running " in line]


def answers(ip: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


def front_ok(ip: str, port: int) -> bool:
    import urllib.request
    try:
        return urllib.request.urlopen(f"http://{ip}:{port}/", timeout=2).status == 200
    except OSError:
        return False


def inflight(nd: Node) -> int:
    """Requests in the node's agents now (huntlb_inflight, summed)."""
    n = 0
    for cid in nd.docker("ps", "-q", "--filter", f"name={STACK}_backends").split():
        text = nd.docker("exec", cid, "python3", "-c", "import urllib.request as u; "
                         "print(u.urlopen('http://127.0.0.1:9901/metrics', timeout=2).read().decode())", check=False, timeout=10)
        n += sum(int(float(line.split()[1])) for line in text.splitlines() if line.startswith("huntlb_inflight "))
    return n


# ---------------------------------------------------------------- the load

@dataclass
class Window:
    seed: int
    t0: float                           # monotonic, when its generators started
    targets: list[str]                  # node addresses, in the generator's order
    records: dict[str, list[tuple[int, int, int, int]]] = field(default_factory=dict)  # strategy -> (index, offset_us, latency_us, status)
    reports: dict[str, dict] = field(default_factory=dict)


class Load:
    """Windows of WINDOW_S seconds, one generator per strategy each, started on
    schedule until stop(); every window's generators share a seed."""

    def __init__(self, loadgen: str, nodes: list[Node], rate: float, window_s: float, demand: str, work: Path):
        self.loadgen, self.nodes, self.rate, self.window_s, self.demand, self.work = loadgen, nodes, rate, window_s, demand, work
        self.windows: list[Window] = []
        self.stopping = threading.Event()
        self.collectors: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self.t_start = time.monotonic()
        self.thread.start()

    def _loop(self) -> None:
        seed = 0
        while not self.stopping.is_set():
            seed += 1
            t_next = self.t_start + seed * self.window_s
            live = [nd.ip for nd in self.nodes if answers(nd.ip, STRATEGIES["envoy-hunting"]) and answers(nd.ip, STRATEGIES["haproxy-hunting"])]
            if live:
                w = Window(seed, time.monotonic(), live)
                procs = {}
                for s, port in STRATEGIES.items():
                    argv = [self.loadgen, "--rate", str(self.rate), "--duration", str(self.window_s), "--arrival", "poisson",
                            "--seed", str(seed), "--timeout-ms", "10000", "--max-lateness-us", "20000",
                            "--json", str(self.work / f"{seed}-{s}.json"), "--requests", str(self.work / f"{seed}-{s}.req")]
                    if self.demand:
                        argv += ["--work", self.demand]
                    for ip in live:
                        argv += ["--target", f"http://{ip}:{port}/"]
                    with cleanup.spawn:
                        if cleanup.done:
                            return
                        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                        cleanup.procs.append(p)
                    procs[s] = p
                self.windows.append(w)
                t = threading.Thread(target=self._collect, args=(w, procs))
                t.start()
                self.collectors.append(t)
            self.stopping.wait(max(0.0, t_next - time.monotonic()))

    def _collect(self, w: Window, procs: dict[str, subprocess.Popen]) -> None:
        for s, p in procs.items():
            _, err = p.communicate()
            try:
                w.reports[s] = json.loads((self.work / f"{w.seed}-{s}.json").read_text())
                w.records[s] = [tuple(map(int, line.split())) for line in (self.work / f"{w.seed}-{s}.req").read_text().splitlines()]
            except (OSError, ValueError) as e:
                log(f"window {w.seed} {s}: no report ({e}; exit {p.returncode}: {err.decode()[-300:]})")

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        for t in self.collectors:
            t.join()


# ---------------------------------------------------------------- the run

@dataclass
class Phase:
    name: str
    start: float
    end: float = 0.0
    note: str = ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-build", action="store_true", help="use the images as they are (compose/build.sh not run)")
    ap.add_argument("--rate", type=float, default=40.0, help="req/s to each of the 4 strategies (default 40: 160 in all)")
    ap.add_argument("--window", type=float, default=5.0, help="seconds per load window")
    ap.add_argument("--steady", type=float, default=20.0, help="seconds of load before the first event, and between events")
    ap.add_argument("--after-kill", type=float, default=45.0, help="seconds of load after the node is killed")
    ap.add_argument("--results", default=str(ROOT / "docs" / "results" / "swarm.md"), help="where the table goes ('' for nowhere)")
    ap.add_argument("--encrypted-overlay", action="store_true", help="the stack's overlay network encrypted (IPsec between nodes)")
    ap.add_argument("--runs", type=int, default=1, help="runs, each on new nodes (default 1)")
    ap.add_argument("--clean", action="store_true", help="only remove what a killed run left, then exit")
    args = ap.parse_args()

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    wall0 = time.monotonic()
    timings: dict[str, float] = {}

    started = run([str(ROOT / "scripts/docker-setup.sh"), "start"], timeout=120).strip()
    cleanup.dockerd = started
    atexit.register(cleanup)
    left = leftovers()
    if any(left.values()):
        log(f"removing what an earlier run left: {left}")
        left = remove_all(left)
        assert not any(left.values()), f"could not remove {left}"
    if args.clean:
        return 0

    t = time.monotonic()
    if not args.no_build:
        run([str(ROOT / "compose" / "build.sh")], timeout=1800)
    run(["docker", "build", "-q", "-t", NODE_IMAGE, "-f", str(SWARM_DIR / "node" / "Dockerfile"), str(SWARM_DIR)], timeout=900)
    timings["images built"] = time.monotonic() - t
    loadgen = os.environ.get("HUNTLB_LOADGEN") or str(ROOT / "target" / "release" / "huntlb-loadgen")
    assert os.access(loadgen, os.X_OK), f"no {loadgen}: make release"

    runs = []
    try:
        for i in range(args.runs):
            if i:
                t = time.monotonic()
                left = remove_all()   # the last run's nodes, swarm and network: every run starts from none
                assert not any(left.values()), f"could not remove {left}"
                log(f"run {i + 1} of {args.runs} (the last run's nodes removed in {time.monotonic() - t:.1f} s)")
            # the first run's durations include building the images
            runs.append(exercise(args, dict(timings) if i == 0 else {}, loadgen, f"{os.getpid()}r{i + 1}"))
        report = render(args, runs, time.monotonic() - wall0)
        print(report)
        if args.results:
            Path(args.results).write_text(report)
            log(f"wrote {args.results}")
        return 0 if all(rolling_clean(r["table"]) for r in runs) else 1
    finally:
        t = time.monotonic()
        cleanup()
        log(f"teardown {time.monotonic() - t:.1f} s; wall time {time.monotonic() - wall0:.0f} s")


def rolling_clean(table: list[dict]) -> bool:
    rolling = [r for r in table if r["phase"].startswith("rolling")]
    return bool(rolling) and all(r["errors"][s] == 0 and r["dead_front"][s] == 0 for r in rolling for s in STRATEGIES)


def exercise(args, timings: dict[str, float], loadgen: str, run_id: str) -> dict:
    t = time.monotonic()
    nodes, _net = start_nodes(3, run_id)
    timings["3 nodes up"] = time.monotonic() - t
    log(f"nodes {', '.join(f'{n.name} {n.ip}' for n in nodes)} ({timings['3 nodes up']:.1f} s)")
    t = time.monotonic()
    load_images(nodes)
    timings["images loaded"] = time.monotonic() - t
    t = time.monotonic()
    form_swarm(nodes)
    mgr = nodes[0]
    deploy(mgr, args.encrypted_overlay)
    wait_until(lambda: len(running_tasks(mgr, "backends")) == 3 and len(running_tasks(mgr, "envoy")) == 3
               and len(running_tasks(mgr, "haproxy")) == 3, 120, what="3 backends and a front of each proxy on every node")
    where = running_tasks(mgr, "backends")
    # every front, on every node, answers three times in a row: found the backends, passed health checks
    streak = {(nd.ip, p): 0 for nd in nodes for p in STRATEGIES.values()}

    def fronts_ready():
        for k in streak:
            streak[k] = streak[k] + 1 if front_ok(*k) else 0
        return min(streak.values()) >= 3
    wait_until(fronts_ready, 120, what="every front on every node serving", every=0.2)
    timings["swarm formed, stack up"] = time.monotonic() - t
    log(f"stack up ({timings['swarm formed, stack up']:.1f} s): backends on {sorted(n for _, n in where)}")

    demand = "exp:20"
    timings_note: list[str] = []
    with tempfile.TemporaryDirectory(prefix="huntlb-swarm-load-") as work:
        load = Load(loadgen, nodes, args.rate, args.window, demand, Path(work))
        phases: list[Phase] = []
        load.start()
        T0 = load.t_start

        def phase(name: str, note: str = "") -> Phase:
            now = time.monotonic()
            if phases:
                phases[-1].end = now
            phases.append(Phase(name, now, note=note))
            log(f"phase {name} at {now - T0:.1f} s {note}")
            return phases[-1]

        def svc_scale(n: int):
            mgr.docker("service", "scale", "--detach", f"{STACK}_backends={n}")

        phase("steady (3 backends)")
        time.sleep(max(0.0, args.steady - 3))
        # what the nodes cost under this load (docker stats samples for about 2 s)
        stats = run(["docker", "stats", "--no-stream", "--format", "{{.Name}}: CPU {{.CPUPerc}}, memory {{.MemUsage}}",
                     *[nd.cid for nd in nodes]], timeout=60).strip().splitlines()
        timings_note.append("nodes under the steady load: " + "; ".join(x.split("-")[-1] for x in stats))
        time.sleep(max(0.0, args.steady - (time.monotonic() - phases[-1].start)))
        p = phase("scale 3 -> 5")
        svc_scale(5)
        wait_until(lambda: len(running_tasks(mgr, "backends")) == 5, 60, what="5 backends running")
        p.note = f"5 running after {time.monotonic() - p.start:.1f} s"
        time.sleep(max(0.0, args.steady - (time.monotonic() - p.start)))
        p = phase("scale 5 -> 3")
        svc_scale(3)
        wait_until(lambda: len(running_tasks(mgr, "backends")) == 3, 60, what="3 backends running")
        p.note = f"3 running after {time.monotonic() - p.start:.1f} s (the 2 removed drain 5 s before they exit)"
        time.sleep(max(0.0, args.steady + 5 - (time.monotonic() - p.start)))
        p = phase("rolling update of the agents")
        roll_wall = time.time()   # for the logs' --since, should the update cost an error
        mgr.docker("service", "update", "--force", "--detach", f"{STACK}_backends")

        def updated():
            state = mgr.docker("service", "inspect", "-f", "{{if .UpdateStatus}}{{.UpdateStatus.State}}{{end}}",
                               f"{STACK}_backends").strip()
            if state in ("paused", "rollback_started", "rollback_completed"):
                raise RuntimeError(f"the rolling update ended {state}")
            return state == "completed"
        wait_until(updated, 300, what="the rolling update to complete", every=1.0)
        p.note = f"completed after {time.monotonic() - p.start:.1f} s (parallelism 1, start-first, 5 s delay)"
        # the last replaced agent is still draining (5 s) when Swarm says completed
        time.sleep(args.steady)
        # a worker (the manager stays up), the one with the most backends now:
        # after a start-first roll they need not be one a node
        tasks = running_tasks(mgr, "backends")
        victim = max(nodes[1:], key=lambda nd: sum(1 for _, where in tasks if where == nd.name))
        on_victim = [n for n, where in tasks if where == victim.name]
        inside = inflight(victim)
        p = phase(f"{victim.name} killed")
        killed_at = time.monotonic()   # a request ending from here on may be the kill's
        run(["docker", "kill", victim.cid])

        def rescheduled():
            tasks = running_tasks(mgr, "backends")
            return len(tasks) == 3 and all(nd != victim.name for _, nd in tasks)
        p.note = (f"{len(on_victim)} of the 3 backends and an Envoy and a HAProxy front on it, "
                  f"{inside} request(s) in its agents just before")
        try:
            wait_until(rescheduled, args.after_kill, what=f"{victim.name}'s backends running elsewhere", every=1.0)
            if on_victim:
                p.note += f"; Swarm ran its backends elsewhere after {time.monotonic() - killed_at:.1f} s"
        except TimeoutError:
            p.note += f"; its backends NOT run elsewhere within {args.after_kill:.0f} s"
        time.sleep(max(0.0, args.after_kill - (time.monotonic() - killed_at)))
        phases[-1].end = time.monotonic()
        load.stop()
        timings["load"] = time.monotonic() - T0
        table = tabulate(load, phases, T0, victim.ip, killed_at)
    if not rolling_clean(table):
        # what the fronts logged (HAProxy: each failed request, with its
        # termination flags) and the agents said since the update began,
        # before the nodes go
        for svc in ("haproxy", "envoy", "backends"):
            out = run(["docker", "exec", mgr.cid, "sh", "-c",
                       f"docker service logs --raw --timestamps --since {int(roll_wall) - 1} {STACK}_{svc} 2>&1 | sort | head -400"],
                      check=False, timeout=60)
            log(f"the rolling update had client errors; {svc}'s last log lines:\n{out}")
    return {"table": table, "phases": phases, "timings": timings, "notes": timings_note,
            "when": time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}


def tabulate(load: Load, phases: list[Phase], T0: float, dead_ip: str, killed_at: float) -> list[dict]:
    """Per phase and strategy: requests, client errors (transport or non-2xx),
    and apart, those sent to the killed node's fronts that ended after it was
    killed (the outside balancer's share, the same for every strategy). A request counts in
    the phase it ended in (answered, or failed): one in flight when a node died
    is the kill's, not the phase it was sent in."""
    rows = []
    for ph in phases:
        row = {"phase": ph.name, "seconds": ph.end - ph.start, "note": ph.note,
               "sent": dict.fromkeys(STRATEGIES, 0), "errors": dict.fromkeys(STRATEGIES, 0),
               "dead_sent": dict.fromkeys(STRATEGIES, 0), "dead_front": dict.fromkeys(STRATEGIES, 0), "invalid": 0}
        rows.append(row)
    for w in load.windows:
        for s in STRATEGIES:
            rep = w.reports.get(s)
            if rep is None:
                continue
            # the generator's own start (it begins a moment after w.t0, more
            # on a busy machine: a request failing at the kill, placed from
            # w.t0, fell before it, into the rolling update's row)
            start = rep["start_unix_s"] - WALL_MINUS_MONOTONIC if rep.get("start_unix_s") else w.t0
            for i, off, lat, status in w.records.get(s, []):
                t = start + (off + lat) / 1e6
                ph = next((r for r, p in zip(rows, phases) if p.start <= t < p.end), rows[-1] if t >= phases[-1].start else rows[0])
                dead = w.targets[i % len(w.targets)] == dead_ip and t >= killed_at
                ph["dead_sent" if dead else "sent"][s] += 1
                if not 200 <= status < 300:
                    ph["dead_front" if dead else "errors"][s] += 1
            if not rep.get("valid", True):
                rows[-1]["invalid"] += 1
                log(f"window {w.seed} {s}: invalid ({rep.get('invalid_reason')})")
            if rep.get("errors") or any(not 200 <= int(k) < 300 for k in rep.get("status", {})):
                line = (f"window {w.seed} ({w.t0 - T0:.0f}-{w.t0 - T0 + load.window_s:.0f} s, over {len(w.targets)} nodes) {s}: "
                        f"status {rep['status']}, transport errors {rep['error_kinds']}")
                log(line)
                rows[0].setdefault("windows", []).append(line)
    return rows


def source() -> str:
    """What the images and the load generator were built from (no commit
    hash: a results page says what was measured, git says when)."""
    dirty = run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], check=False).strip()
    return "images and load generator as `make demo-swarm` built them" + (
        " (from a checkout with uncommitted changes)" if dirty else " (the code as committed)")


def render(args, runs: list[dict], wall: float) -> str:
    cols = list(STRATEGIES)
    out = ["# The fleet as a Docker Swarm stack on three nodes", "",
           "Written by `scripts/swarm_demo.py` (`make demo-swarm`; docs/demo.md, \"Across nodes: Docker Swarm\"), "
           f"`{' '.join(['scripts/swarm_demo.py'] + sys.argv[1:])}`.", "",
           f"Machine: {os.cpu_count()} cores, Linux {platform.release()}, {run(['docker', 'version', '-f', 'Docker {{.Server.Version}}']).strip()}; "
           f"nodes: huntlb/swarm-node (Debian's docker.io) containers on one bridge, 1 manager and 2 workers; "
           f"overlay {'encrypted (IPsec)' if args.encrypted_overlay else 'not encrypted'}; {source()}.", "",
           f"Load: open-loop Poisson, {args.rate:g} req/s to each of the 4 strategies at once ({4 * args.rate:g} req/s in all), "
           f"the same arrivals and job sizes (exp 20 ms) for each, in {args.window:g} s windows over the nodes whose fronts accept "
           "connections; 3 backends of 100 req/s each (8 workers, 2 emulated cores). A client error: a transport error, "
           "a 10 s timeout or a non-2xx answer; nothing is re-sent. Hunting: the shipped fronts over the agents' forwarding "
           "tier; least: the proxy's own least-request (Envoy LEAST_REQUEST with FULL_SCAN, HAProxy leastconn) over the "
           "same agents, no hunting lines; all four at once over the same backends.", "",
           "Client errors / requests, per phase; a request counts in the phase it ended in (answered or failed), so one "
           "in flight when a node died is the kill's. Requests the outside balancer had sent to the killed node's own "
           "fronts (the same requests for every strategy: one seed, one order of targets) are on a row of their own.", ""]
    if len(runs) > 1:
        out += ["## Every run: the rolling update and the kill", "",
                "| run | event | " + " | ".join(cols) + " |", "|--:|---|" + "--:|" * len(cols)]
        for k, r in enumerate(runs, 1):
            for row in r["table"]:
                if row["phase"].startswith("rolling") or "killed" in row["phase"]:
                    out.append(f"| {k} | {row['phase']} | " + " | ".join(f"{row['errors'][s]} / {row['sent'][s]}" for s in cols) + " |")
                    if any(row["dead_sent"].values()):
                        out.append(f"| {k} | ... sent to its own fronts | " + " | ".join(
                            f"{row['dead_front'][s]} / {row['dead_sent'][s]}" for s in cols) + " |")
        out.append("")
    for k, r in enumerate(runs, 1):
        table, phases = r["table"], r["phases"]
        out += [f"## Run {k} of {len(runs)} ({r['when']})" if len(runs) > 1 else f"## The run ({r['when']})", "",
                "| phase | s | " + " | ".join(cols) + " |", "|---|--:|" + "--:|" * len(cols)]
        for row in table:
            cells = [f"{row['errors'][s]} / {row['sent'][s]}" for s in cols]
            out.append(f"| {row['phase']} | {row['seconds']:.0f} | " + " | ".join(f"**{c}**" if not c.startswith("0 /") else c for c in cells) + " |")
            if any(row["dead_sent"].values()):
                out.append(f"| {row['phase']}: sent to the killed node's own fronts | | "
                           + " | ".join(f"{row['dead_front'][s]} / {row['dead_sent'][s]}" for s in cols) + " |")
        out += ["", "Events:", ""]
        out += [f"* {p.name}: {p.note}" if p.note else f"* {p.name}" for p in phases]
        if table[0].get("windows"):
            out += ["", "Every load window with a client error (as the generator reported it):", ""]
            out += [f"* {w}" for w in table[0]["windows"]]
        invalid = sum(row["invalid"] for row in table)
        if invalid:
            out += ["", f"**{invalid} generator windows could not keep their schedule** (p99 send lateness over 20 ms): "
                    "their counts are in the table, flagged here."]
        out += ["", "Durations (s): " + ", ".join(f"{k2} {v:.1f}" for k2, v in r["timings"].items()) + ".", ""]
        out += [f"{n}." for n in r["notes"]] + ([""] if r["notes"] else [])
    out += [f"Whole run: {wall:.0f} s (teardown, a few seconds, after this was written).", ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
