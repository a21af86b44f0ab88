"""The Wikipedia replay's testbed: MediaWiki replicas (harness.wiki), an
agent beside each, and the fronts of each strategy over them; one replay of
a trace through it, with what the replicas and agents did. Stopped by close()."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import random
import statistics
import subprocess
import time
from pathlib import Path

from benchlib import wikitrace
from benchlib.fleet import FORWARDING, HUNT_POLICIES, STRATEGIES
from benchlib.fronts import MEASURED
from harness import Addrs, HaproxyRoot, Procs, binary, metrics, request, start_front, wait_all_up
from harness import wiki
from harness.testbed import FleetSpec, Loopback, Testbed

# How often each agent reads its Apache's busy workers (a scoreboard read costs microseconds).
POLL_MS = 5
TIMEOUT_MS = 30_000


class Bed:
    """The replicas, their agents and the fronts over them, stopped by close()."""

    def __init__(self, work: Path, proxies: set[str], t: dict):
        self.work, self.t = work, t
        self.procs, self.addrs = Procs(work), Addrs()
        self.hr = HaproxyRoot("2.6") if "haproxy" in proxies else None
        self.fronts: dict[tuple, object] = {}
        self.policy = None
        try:
            t0 = time.monotonic()
            self.template = wiki.build_template(t["pages"], seed=1, procs=self.procs, addrs=self.addrs)
            root = wiki.shared_dir(self.procs)
            self.replicas = [wiki.start_replica(self.procs, self.addrs, self.template, workers=t["workers"], cores=t["cores"],
                                                policy="always", root=root, agent_opts=self._agent_base(), load=t["load"],
                                                apache_poll_ms=POLL_MS)
                             for _ in range(t["replicas"])]
            print(f"{len(self.replicas)} replicas up in {time.monotonic() - t0:.0f} s", flush=True)
            # their agents, restarted per strategy by the one testbed (each reading its own Apache)
            spec = FleetSpec([{}] * len(self.replicas), policy="always", agent=self._agent_base(), tier=False,
                             each=lambda r: wiki.agent_load(r.apache, t["load"], POLL_MS))
            self.agents = Testbed(spec, ReplicaAgents(self.procs), backends=self.replicas)
        except BaseException:
            self.close()
            raise

    def _agent_base(self) -> dict:
        return {"workers": self.t["workers"], "drain_grace_ms": 0}

    def close(self) -> None:
        self.procs.stop_all()
        if self.hr:
            self.hr.cleanup()

    def warm(self) -> int:
        """Every worker of every replica renders pages, straight at Apache
        (W at once per replica, `warm_per_worker` rounds): a fresh prefork
        child compiles MediaWiki on its first request. Returns the failures."""
        rng = random.Random(7)
        jobs = []
        for r in self.replicas:
            for _ in range(self.t["workers"] * self.t["warm_per_worker"]):
                i = rng.randrange(self.t["pages"])
                jobs.append((r.apache.addr, wikitrace.view_path(i) if rng.random() < 0.8 else wikitrace.render_path(i)))
        bad = 0
        with cf.ThreadPoolExecutor(self.t["workers"] * len(self.replicas)) as ex:
            for status in ex.map(lambda j: _get(*j), jobs):
                bad += status != 200
        return bad

    def set_agents(self, policy: str, forward: bool) -> None:
        """Every agent restarted with this policy (fresh state), forming a tier
        when `forward` (each hearing the agent's default sample, as FORWARDING's FWD)."""
        if self.policy == (policy, forward):
            return
        self.agents.restart_agents(policy=policy, tier=forward)
        self.policy = (policy, forward)

    def front(self, proxy: str, strategy: str, i: int):
        k = (proxy, strategy, i)
        if k not in self.fronts:
            hunting, lb = STRATEGIES[proxy][strategy]
            self.fronts[k] = start_front(proxy, self.procs, self.addrs, self.replicas, hunting, lb=lb, hr=self.hr, **MEASURED,
                                         name=f"{proxy}-{strategy.replace('(', '').replace(')', '').replace('/', '-')}-{i}",
                                         server_opts="weight 100")
        return self.fronts[k]

    def cpu_used(self) -> list[float]:
        """Each replica's CPU seconds so far: its Apache master's and children's
        utime + stime (the pool is fixed, so children live the whole run; this
        machine's v1 cgroups keep no usage in the cpu hierarchy)."""
        return [apache_cpu_s(r.apache.proc.pid) for r in self.replicas]

    def idle_cores(self, seconds: float = 5.0) -> float:
        """The mean replica's CPU use with no requests (its agent's load reads), in cores."""
        u0 = self.cpu_used()
        time.sleep(seconds)
        return statistics.fmean(b - a for a, b in zip(u0, self.cpu_used())) / seconds

    def agents(self, name: str) -> float:
        return sum(metrics(r.admin).get(name, 0) for r in self.replicas)

    def replay(self, proxy: str, name: str, fronts: int, trace: Path, out: Path) -> dict:
        """One replay of `trace` through `fronts` fronts of `name`; the loadgen's
        report with each request's outcome read back from its --requests file."""
        base, _, over = name.partition("/")
        if base in HUNT_POLICIES:
            strategy = "hunt/" + over if over else "hunt"
            self.set_agents(HUNT_POLICIES[base], base in FORWARDING)
        else:
            strategy = name
            self.set_agents("always", False)
        fs = [self.front(proxy, strategy, i) for i in range(fronts)]
        for f in fs:
            wait_all_up(f, len(self.replicas))
        refused0 = self.agents('huntlb_offers_total{decision="refuse"}')
        forwarded0 = self.agents('huntlb_forwards_total{outcome="sent"}')
        argv = [binary("huntlb-loadgen"), "--trace", str(trace), "--requests", str(out.with_suffix(".requests")),
                "--json", str(out), "--max-inflight", "8192", "--timeout-ms", str(TIMEOUT_MS), "--max-lateness-us", "20000"]
        for f in fs:
            argv += ["--target", f.url]
        cpu0, t0 = self.cpu_used(), time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, timeout=self.t["day_seconds"] + 300)
        cpu = [(b - a) / (time.monotonic() - t0) for a, b in zip(cpu0, self.cpu_used())]
        if not out.exists():
            raise RuntimeError(f"huntlb-loadgen wrote no report (exit {p.returncode}): {p.stderr[-2000:]}")
        rep = json.loads(out.read_text())
        rep["refused"] = self.agents('huntlb_offers_total{decision="refuse"}') - refused0
        rep["forwarded"] = self.agents('huntlb_forwards_total{outcome="sent"}') - forwarded0
        rep["replica_cores"] = [round(c, 3) for c in cpu]
        return rep


class ReplicaAgents(Loopback):
    """harness.testbed's Place over running MediaWiki replicas (harness.wiki
    starts them, an agent each): each agent restarted in front of its Apache."""

    def __init__(self, procs: Procs) -> None:
        super().__init__(procs, None)

    def backend(self, app_opts: dict):
        raise ValueError("the replicas are harness.wiki's to start")

    def start_app(self, r, app_opts: dict) -> None:
        raise ValueError("the replicas are harness.wiki's to start")

    def start_agent(self, r, agent_opts: dict) -> None:
        r.agent_proc, _, _ = self.procs.agent(r.host, r.apache.addr, **agent_opts)


def apache_cpu_s(master: int) -> float:
    """CPU seconds of an Apache master and its living children (and the
    children it reaped), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            f = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(d) == master:
            total += sum(int(x) for x in f[11:15])  # utime stime cutime cstime
        elif int(f[1]) == master:
            total += int(f[11]) + int(f[12])
    return total / ticks


def _get(addr: str, path: str) -> int:
    try:
        return request(addr, "GET", path, timeout=60)[0]
    except OSError:
        return 0

