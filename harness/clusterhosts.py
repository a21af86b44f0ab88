"""The emulated cluster's hosts (harness.cluster): a namespace with its own
address and resolver, a backend host (app and agent), a front host (Envoy or
HAProxy), and a fault (iptables rules in hosts, each with the run's comment,
deleted by exact spec when healed). What they need of the cluster that made
them (harness.cluster.Cluster) is `Owner`: this module never imports it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Protocol

from harness.net import app_stats, metrics, request, wait_http
from harness.netns import PREFIX, kill_and_wait, netns_pids
from harness.procs import Proc, Procs, binary
from harness.testbed import FLEET_PORT, heard_at, tier_opts

if TYPE_CHECKING:
    from harness import fronts


DOMAIN = "svc.cluster.local"
SERVICE = "backends"  # the headless service: one A record per published backend host
APP_PORT, AGENT_PORT, ADMIN_PORT = 9000, 8080, 9901  # a front's ports are harness.fronts.start_front's


class Owner(Protocol):
    """What a host and a fault need of their cluster: its run id, its processes,
    a call made from its client namespace, and its fault bookkeeping."""
    run: str
    procs: Procs
    faults: list
    _faults: Iterator[int]

    def call(self, fn, *args, **kw): ...


class Host:
    """One namespace on the bridge: its address, and the processes started in
    it. Passed as `procs` to start_envoy/start_haproxy, it starts them here."""

    def __init__(self, cluster: Owner, name: str, ip: str) -> None:
        self.cluster, self.name, self.ip = cluster, name, ip
        self.ns = f"{PREFIX}{cluster.run}-{name}"
        self.procs: list[Proc] = []
        self._started: dict[str, int] = {}  # name -> times started here (a restart's log is name-2.log)

    @property
    def log_dir(self) -> Path:
        return self.cluster.procs.log_dir

    def start(self, name: str, argv: list[str], env: dict | None = None) -> Proc:
        """A process in this host's namespace (`ip netns exec` execs it: the
        PID is the process's own), owned by the cluster's Procs."""
        n = self._started[name] = self._started.get(name, 0) + 1
        p = self.cluster.procs.start(name if n == 1 else f"{name}-{n}", ["ip", "netns", "exec", self.ns, *argv], env)
        self.procs.append(p)
        return p

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """A short command in this namespace (iptables, getent)."""
        r = subprocess.run(["ip", "netns", "exec", self.ns, *argv], capture_output=True, text=True, timeout=30)
        if check and r.returncode:
            raise RuntimeError(f"{self.name}: {' '.join(argv)}: {r.stderr.strip()}")
        return r

    def kill(self) -> None:
        """The host dies: SIGKILL to every process on it at once (each process
        group, then whatever else runs in its namespace), as a node lost with
        its tasks."""
        for p in self.procs:
            if p.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
        kill_and_wait(netns_pids(self.ns))
        for p in self.procs:
            p.reap(time.monotonic() + 3)

    def resolve(self, name: str) -> list[str]:
        """What this host's system resolver (glibc, its resolv.conf and search
        list) answers for `name`: its IPv4 addresses, sorted."""
        r = self.run("getent", "ahostsv4", name, check=False)
        return sorted({line.split()[0] for line in r.stdout.splitlines() if line.strip()})


class Backend(Host):
    """A backend host: the workload app and the agent on the host's address,
    the agent in the forwarding tier with `fleet_peers = backends:9700`. The
    attribute names are harness.testbed.Backend's."""

    def __init__(self, cluster: Owner, name: str, ip: str) -> None:
        super().__init__(cluster, name, ip)
        self.id = f"agent-{name}"
        self.app, self.agent, self.admin = f"{ip}:{APP_PORT}", f"{ip}:{AGENT_PORT}", f"{ip}:{ADMIN_PORT}"
        self.arrivals = cluster.procs.log_dir / f"arrivals-{name}.txt"
        self.app_proc: Proc | None = None
        self.agent_proc: Proc | None = None
        self.agent_opts: dict = {}

    @property
    def host(self) -> str:
        """The backend's address, under the loopback Backend's name."""
        return self.ip

    def start_app(self, **opts) -> Proc:
        argv = [binary("huntlb-workload"), "--listen", self.app, "--id", f"app-{self.name}", "--arrivals", str(self.arrivals)]
        for k, v in {"demand": "const:0", **opts}.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        self.app_proc = self.start(f"app-{self.name}", argv)
        self.cluster.call(wait_http, self.app, "/.workload/health", proc=self.app_proc)
        return self.app_proc

    def start_agent(self, **opts) -> Proc:
        """The agent (again, after a restart, with the same options)."""
        self.agent_opts = {**self.agent_opts, **opts}
        argv = [binary("huntlb-agent"), "--listen", self.agent, "--admin", self.admin, "--app", self.app, "--id", self.id]
        tier = tier_opts(self.ip, f"{SERVICE}:{FLEET_PORT}", self.cluster.procs.fleet_key())
        for k, v in {**tier, "policy": "dynamic:seen_margin=1", **self.agent_opts}.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        self.agent_proc = self.start(f"agent-{self.name}", argv, env={**os.environ, "RUST_LOG": "info"})
        self.cluster.call(wait_http, self.admin, "/metrics", proc=self.agent_proc)
        return self.agent_proc

    def metrics(self) -> dict[str, float]:
        return self.cluster.call(metrics, self.admin)

    def stats(self) -> dict:
        return self.cluster.call(app_stats, self.app)

    def paths(self) -> dict[str, int]:
        """What this app processed, path -> times: from the app itself while
        it runs (`/.workload/stats`), from its arrivals file (one line per
        request a worker took, written at once, so it survives a SIGKILL) once
        it is dead."""
        if self.app_proc is not None and self.app_proc.alive():
            return self.stats()["paths"]
        out: dict[str, int] = {}
        if self.arrivals.exists():
            for line in self.arrivals.read_text().splitlines():
                out[line] = out.get(line, 0) + 1
        return out

    def peers_heard(self) -> int:
        """The agent's view of the fleet (harness.testbed.heard_at)."""
        return self.cluster.call(heard_at, self.admin)


class Front(Host):
    """A front host: Envoy (front-tier.yaml, STRICT_DNS) or HAProxy
    (front-tier.cfg, server-template over DNS), finding the backends by the
    service's name through this host's resolv.conf. It is the place
    (harness.fronts.FrontPlace) harness.fronts.start_front starts the proxy
    on; `started` is the front that returned."""

    started: "fronts.Front"

    @property
    def label(self) -> str:
        return self.name

    def call(self, fn, *args, **kw):
        """A read of the front: from the client host, as every test's is."""
        return self.cluster.call(fn, *args, **kw)

    @property
    def kind(self) -> str:
        return self.started.kind

    @property
    def listen(self) -> str:
        return self.started.listen

    @property
    def admin(self) -> str | None:
        """Envoy's admin API (None for HAProxy: `stats`)."""
        return self.started.envoy_admin

    @property
    def stats(self) -> str | None:
        """HAProxy's runtime API (None for Envoy)."""
        return self.started.stats

    def up(self) -> set[str]:
        """The backends (agent ip:port) the proxy's health checks pass."""
        return self.started.up()

    def request(self, method: str, path: str, **kw):
        return self.cluster.call(request, self.listen, method, path, **kw)

    # what a bench reads of a front, as of harness.fronts.Front
    @property
    def proxy(self) -> str:
        return self.kind.partition("-")[0]

    @property
    def url(self) -> str:
        return f"http://{self.listen}/"

    @property
    def proc(self) -> Proc:
        return self.procs[-1]  # the proxy: the only process on a front host

    @property
    def pid(self) -> int:
        return self.proc.pid

    def health(self) -> dict[str, bool]:
        """The backends (agent ip:port) up, each True (as Front.health reads Envoy's)."""
        return {a: True for a in self.up()}

    def logged(self, path: str) -> list[str]:
        """The proxy's access log lines for `path` (a request's own path)."""
        return [line for p in self.procs for line in p.log().splitlines() if path in line]


class Fault:
    """Rules added for one fault, and the processes serving them (a delayer);
    `heal` deletes each rule by its exact spec (the comment names the run and
    the fault), then stops each process by PID. A context manager: healed on
    exit."""

    def __init__(self, cluster: Owner, what: str) -> None:
        self.cluster, self.what = cluster, what
        self.num = next(cluster._faults)
        self.tag = f"{PREFIX}{cluster.run}-{self.num}"
        self.rules: list[tuple[Host, list[str]]] = []
        self.procs: list[Proc] = []
        self.healed_at: float | None = None

    def add(self, host: Host, chain: str, match: list[str], target: tuple[str, ...] = ("DROP",)) -> None:
        spec = [chain, *match, "-m", "comment", "--comment", self.tag, "-j", *target]
        host.run("iptables", "-w", "-A", *spec)
        self.rules.append((host, spec))

    def heal(self) -> float:
        """Delete every rule, then stop the fault's processes (SIGTERM: a
        delayer lets what it holds go; SIGKILL after 3 s); returns the
        monotonic time the last rule went."""
        try:
            while self.rules:
                host, spec = self.rules.pop()
                host.run("iptables", "-w", "-D", *spec, check=False)
            self.healed_at = time.monotonic()
        finally:
            for p in self.procs:
                p.terminate()
            deadline = time.monotonic() + 3
            for p in self.procs:
                p.reap(deadline)
            if self in self.cluster.faults:
                self.cluster.faults.remove(self)
        return self.healed_at

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc) -> None:
        self.heal()
