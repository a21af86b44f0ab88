"""A fleet of workload apps with agents, the strategies that balance over them,
and one open-loop drive: what the SRLB, ELB and throughput scenarios share.

Everything runs the committed example configs through the `harness` package (the
integration tests' launcher), on loopback, and is stopped by PID at the end.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchlib.fronts import MEASURED
from harness.envoy import FULL_SCAN, FULL_SCAN_NAMED
from benchlib.stats import jain
from harness import Addrs, Backend, Front, HaproxyRoot, Procs, binary, start_front
from harness.testbed import FleetSpec, Loopback, Place, Testbed

# How each named balancing strategy is set up: (proxy, hunting?, lb setting).
# RR is the paper's baseline: random, no hunting. SR_* hunt with that agent policy,
# the second candidate drawn at random as in the paper. HAProxy's plain `random`
# means random(2), two draws and the less loaded (its manual: "The default value
# is 2"), so the paper's RR and random second candidate are random(1) there.
# HAProxy's random draws from a consistent-hash ring with 16 points per unit of
# weight: at weight 1, 12 servers get visibly uneven shares (a 20000-query RR run
# dropped requests at 0.95 of capacity), so every bench server gets weight 100.
# `hunt/LR` offers to Envoy's own LEAST_REQUEST pick (two random hosts, the one
# with fewer active requests) and reselects the final the same way;
# `hunt/full` to the least loaded of all (FULL_SCAN), naming itself (hunt-front)
# so seen_margin policies count what it holds there (the shipped front.yaml).
# `hunt/own` is each proxy's shipped front (hunting over its own least-loaded
# pick), under one name for reports that span both proxies. `hunt/pass` is the
# front over a tier (front-tier.yaml, front-tier.cfg: the proxy's own least
# plus hunt-pass and hunt-front, no retry on a refusal); a third element names
# the example config a strategy's front is written from. `hunt/pass2`: that
# front over Envoy's default LEAST_REQUEST (two random hosts, O(1)), not FULL_SCAN;
# `hunt/passr`: HAProxy's over random(2), whose ties are not in step across fronts
# (leastconn breaks ties in each front's own round-robin order, the same in all).
# `hunt/plain`: the tier front with no hunting line at all, each front's
# connections leaving from its own address (start_front's kw, the fourth
# element), over agents with fleet_pass_plain (FWDp).
STRATEGIES = {
    "envoy": {"RR": (False, "RANDOM"), "hunt": (True, "RANDOM"), "hunt/LR": (True, "LEAST_REQUEST"),
              "LEAST_REQUEST": (False, "LEAST_REQUEST"), "LR/full": (False, FULL_SCAN),
              "hunt/full": (True, FULL_SCAN_NAMED), "hunt/own": (True, FULL_SCAN_NAMED),
              "hunt/pass": (True, FULL_SCAN_NAMED, "front-tier.yaml"),
              "hunt/pass2": (True, "LEAST_REQUEST", "front-tier.yaml"),
              "hunt/plain": (False, FULL_SCAN, "front-tier.yaml", {"source": True})},
    "haproxy": {"RR": (False, "random(1)"), "hunt": (True, "random-offer"), "leastconn": (False, "leastconn"),
                "random(2)": (False, "random(2)"), "hunt/least": (True, None), "hunt/own": (True, None),
                "hunt/pass": (True, None, "front-tier.cfg"), "hunt/passr": (True, "random(2)", "front-tier.cfg"),
                "hunt/plain": (False, None, "front-tier.cfg", {"source": True})},
}

# The acceptance policy each hunting strategy asks of the agents. A name with a
# suffix hunts over that pick instead of a random one: `SR_dyn/LR` is SR_dyn
# offered to Envoy's LEAST_REQUEST pick (strategy `hunt/LR`). The SR_slack
# labels keep the policy key's old name (`slack`, now `seen_margin`): they name
# runs in the committed data.
HUNT_POLICIES = {"SR_4": "static:4", "SR_8": "static:8", "SR_16": "static:16", "SR_dyn": "dynamic",
                 "SR_slack": "dynamic:seen_margin=1", "SR_slack2": "dynamic:seen_margin=2",
                 "SR_gate": "dynamic:c0=0,c_max=0,seen_margin=1",
                 "FWD": "dynamic:seen_margin=1", "FWDall": "dynamic:seen_margin=1", "FWDm1": "dynamic:seen_margin=1",
                 "FWD4": "dynamic:seen_margin=1", "FWDp": "dynamic:seen_margin=1",
                 "FWDnone": "dynamic:seen_margin=1"}
# Strategies whose agents form a forwarding tier (agent `fleet_listen`, every
# agent a member): an offer not the least of what its agent hears goes on to
# the least peer heard; the policy decides only while no peer is heard. The
# value is each agent's `fleet_sample`, the peers it hears: FWD as shipped (None:
# the agent's default, not given), FWDall every member (the tier before sampling).
FORWARDING = {"FWD": None, "FWDall": 0, "FWDm1": None, "FWD4": 4, "FWDp": None, "FWDnone": None}
# Agent settings a forwarding strategy changes from the defaults: FWDm1 keeps an
# offer while its backend holds at most one more than the least peer (a forward
# only for a gap of two), fewer forwards for a coarser balance. FWD4: each agent
# hears a sample of 4 (about half the datagrams of the default 8). FWDp: the
# agents pass on the plain fronts' tries (`FWDp/plain`), fronts told apart by
# their source address. FWDnone: the tier's messages without its forwards (a
# margin no count reaches), to tell what each costs (bench/pairs.py's CPU).
FORWARD_OPTS = {"FWDm1": {"forward_peer_margin": 1}, "FWDp": {"fleet_pass_plain": "true"},
                "FWDnone": {"forward_peer_margin": 100000}}


def baselines(proxy: str) -> list[str]:
    """The proxy's own balancers, without hunting (the comparisons every report makes)."""
    return [s for s in STRATEGIES[proxy] if s != "RR" and not s.startswith("hunt")]


@dataclass
class Fleet:
    """n workload apps, each behind an agent on a host of its own: on
    loopback, each its own 127.x.y.z, unless `place` says otherwise
    (harness.cluster.EmulatedHosts: the emulated cluster's hosts). Started,
    waited for and restarted by harness.testbed."""

    procs: Procs
    addrs: Addrs
    cores: list[float]
    workers: int = 32
    backlog: int = 128
    mean_ms: float = 10.0
    policy: str = "always"
    forward: bool = False
    # with forward: each agent's fleet_sample (0: every member; None: the agent's default)
    sample: int | None = None
    backends: list[Backend] = field(default_factory=list)
    # settings every agent of this fleet gets, whatever the strategy (e.g. threads)
    agent_opts: dict = field(default_factory=dict)
    place: Place | None = None

    def start(self) -> "Fleet":
        self.place = self.place or Loopback(self.procs, self.addrs)
        self.bed = Testbed(self._spec(self.policy, False, None, {}), self.place).start()
        self.backends = self.bed.backends
        return self

    def _app(self, i: int, seed: int) -> dict:
        return {"workers": self.workers, "cores": self.cores[i], "backlog": self.backlog, "demand": f"exp:{self.mean_ms}",
                "seed": seed}

    def _spec(self, policy: str, forward: bool, sample: int | None, opts: dict) -> FleetSpec:
        """`{cores}` in the policy becomes each backend's own cores, rounded up
        (a capacity-aware fleet: `dynamic:c_min={cores}`); sample and opts
        count where the agents form a tier."""
        tier = forward or self.place.always_tier
        agent = {"workers": self.workers, "drain_grace_ms": 0, **self.agent_opts,
                 **({"fleet_sample": sample} if tier and sample is not None else {}), **(opts if tier else {})}
        return FleetSpec([self._app(i, 1000 + i) for i in range(len(self.cores))], policy=policy, agent=agent,
                         each=[{"policy": policy.format(cores=math.ceil(k))} for k in self.cores], tier=forward)

    @property
    def capacity(self) -> float:
        """Requests/s the apps can serve: sum of cores / mean demand."""
        return sum(self.cores) / (self.mean_ms / 1000)

    def set_policy(self, policy: str, forward: bool = False, sample: int | None = None, opts: dict | None = None) -> None:
        """Restart every agent in place with this acceptance policy (fresh state).
        `{cores}` in it becomes each backend's own cores. forward: the agents
        form a forwarding tier, each hearing `sample` peers (0: every other;
        all of them when the fleet is smaller; None: the agent's default),
        returned once each hears them. On a place whose agents are always a
        tier (the emulated cluster), forward=False leaves it on: nothing is
        passed on under a baseline, the tier only sends its heartbeats.
        opts: more agent settings (FORWARD_OPTS)."""
        self.policy, self.forward, self.sample = policy, forward, sample
        new = self._spec(policy, forward, sample, opts or {})
        self.bed.restart_agents(policy=new.policy, agent=new.agent, each=new.each, tier=new.tier)

    def relay_plain(self) -> None:
        """Agents that only relay (a baseline's: the proxy's own pick): fresh
        ones, restarted if a strategy left them in a tier. Else a baseline
        run after a tier's would pay the tier's beats (some 1,000 datagrams a
        second at 12 agents: measured 176 against 143 us of CPU a request
        relaying) or, after FWDp, pass the plain front's tries on. (Where the
        tier is always on, the emulated cluster, it stays, with the strategy's
        options gone.)"""
        if self.forward:
            self.set_policy("always")

    def kill(self, i: int) -> None:
        """SIGKILL backend i's agent and app: a host that dies, with no drain."""
        b = self.backends[i]
        for p in (b.agent_proc, b.app_proc):
            p.signal(signal.SIGKILL)

    def revive(self, i: int) -> None:
        self.place.start_app(self.backends[i], self._app(i, 2000 + i))
        self.bed.start_agent(i)

    def _alive(self) -> list:
        return [b for b in self.backends if b.agent_proc.alive()]

    def agents_cpu_seconds(self) -> float:
        """CPU time the running agents have used (utime + stime)."""
        from benchlib.tools import proc_cpu_seconds
        return sum(proc_cpu_seconds(b.agent_proc.pid) for b in self._alive())

    def stats(self) -> list[dict | None]:
        """Each app's counters (None for a dead app, or one whose counters
        could not be read in three tries: a read that timed out once on a
        busy host ended a whole bench with a TypeError)."""
        out = []
        for b in self.backends:
            got = None
            for attempt in range(3):
                if not b.app_proc.alive():
                    break
                try:
                    got = b.stats()
                    break
                except OSError:
                    time.sleep(0.2 * (attempt + 1))
            out.append(got)
        return out

    def _sum(self, key: str) -> float:
        return sum(b.metrics().get(key, 0) for b in self._alive())

    def refused(self) -> float:
        return self._sum('huntlb_offers_total{decision="refuse"}')

    def datagrams(self) -> float:
        """Reports the agents sent to their peers (the tier's cost; 0 without a tier)."""
        return self._sum("huntlb_fleet_reports_sent_total")

    def forwarded(self) -> float:
        """Offers the agents forwarded to a peer that answered (0 without a tier)."""
        return self._sum('huntlb_forwards_total{outcome="sent"}')

    def front(self, proxy: str, hunting: bool, lb: str, hr: HaproxyRoot | None = None, name: str = "front", **kw) -> Front:
        """A front over the fleet (kw as harness.start_front's). Every HAProxy
        server gets weight 100: see STRATEGIES."""
        return start_front(proxy, self.procs, self.addrs, self.backends, hunting, lb=lb, hr=hr, name=f"{proxy}-{name}",
                           server_opts="weight 100", **MEASURED, **kw)


def drive(urls: list[str], rate: float, seconds: float, out: Path, seed: int = 1, max_lateness_us: int = 2000,
          work: str | None = None, requests: Path | None = None) -> dict:
    """One open-loop Poisson run (huntlb-loadgen); returns its JSON report. A run
    whose p99 send lateness exceeds max_lateness_us is marked invalid. work: a
    demand spec (`exp:20`) the generator draws each job's size from, by `seed`,
    instead of each app drawing its own: runs with one seed meet the same jobs.
    requests: also write each request's index, send offset, latency (us) and
    status there (the generator's --requests), for a look inside a run."""
    argv = [binary("huntlb-loadgen"), "--rate", f"{rate:.2f}", "--duration", f"{seconds}", "--arrival", "poisson",
            "--max-inflight", "8192", "--seed", str(seed), "--json", str(out), "--max-lateness-us", str(max_lateness_us)]
    if work:
        argv += ["--work", work]
    if requests:
        argv += ["--requests", str(requests)]
    for u in urls:
        argv += ["--target", u]
    subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 180)
    return json.loads(out.read_text())


class Sampler:
    """Polls each app's busy workers and served count every `every` seconds."""

    def __init__(self, fleet: Fleet, every: float = 0.2):
        self.fleet, self.every = fleet, every
        self.rows: list[tuple[float, list[int | None], list[int | None]]] = []  # (t, busy, served)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Sampler":
        self.t0 = time.monotonic()
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(timeout=10)

    def _run(self) -> None:
        deadline = time.monotonic() + 3600  # bounded, whatever happens
        while not self._stop.is_set() and time.monotonic() < deadline:
            s = self.fleet.stats()
            self.rows.append((time.monotonic() - self.t0, [x and x["busy"] for x in s], [x and x["served"] for x in s]))
            self._stop.wait(self.every)

    def fairness(self) -> float | None:
        """Jain's index of busy workers, averaged over samples where any were busy."""
        vals = [jain([b or 0 for b in busy]) for _, busy, _ in self.rows]
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None


def summary(rep: dict, must_keep_up: bool = True) -> dict:
    """The numbers a scenario keeps from one loadgen report (times in ms).

    must_keep_up: a run that answered under 90% of what it sent before its
    schedule ended is invalid: the machine (generator, proxy, agents and apps
    share two cores) could not keep up, a backlog grew, and its latencies
    measure the queue, not the balancer. Runs once left unexplained were
    these: Envoy SR_4 at rho 0.88 served 798/s of 1109/s offered (78% of offers
    refused, so ~1.8 tries per request, on a machine others loaded) and showed
    a 1.5 s mean. Counted by the end of the schedule, not by the wall time of
    the whole run: a heavy-tailed demand leaves a few long jobs to drain after
    the last send, which made `achieved_rate` (over the wall time) 800/s of
    1108/s with every request answered and nothing queued (heavy-tailed runs
    of the many-fronts bench).
    Reports from before the generator counted `completed_by_end` keep the old
    rule."""
    pct = dict((p, v) for p, v in rep["latency"]["percentiles"])
    non2xx = sum(n for s, n in rep["status"].items() if not 200 <= int(s) < 300)
    offered = rep["scheduled"] / rep["duration_s"] if rep.get("duration_s") else 0.0
    valid, reason = rep["valid"], rep["invalid_reason"]
    if must_keep_up and valid and offered:
        by_end = rep.get("completed_by_end")
        if by_end is not None and by_end < 0.9 * rep["scheduled"]:
            valid, reason = False, (f"answered {by_end} of {rep['scheduled']} requests before the schedule ended "
                                    f"({rep['scheduled'] - by_end} still in flight or failed): the machine could not keep up")
        elif by_end is None and rep["achieved_rate"] < 0.9 * offered:
            valid, reason = False, f"answered {rep['achieved_rate']:.0f}/s of {offered:.0f}/s sent: the machine could not keep up"
    return {"completed": rep["completed"], "errors": rep["errors"] + non2xx, "achieved_rate": rep["achieved_rate"],
            "mean_ms": rep["latency"]["mean_us"] / 1e3, "p50_ms": pct[50.0] / 1e3, "p90_ms": pct[90.0] / 1e3,
            "p99_ms": pct[99.0] / 1e3, "served_by": rep["served_by"], "valid": valid,
            "invalid_reason": reason, "lateness_p99_us": dict(rep["send_lateness"]["percentiles"])[99.0]}
