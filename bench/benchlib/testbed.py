"""The testbed of the Poisson experiments (seed 002, Section V) through the
real proxies, as every scenario that runs them uses it (srlb.py, pairs.py,
fleet_faults.py, fleet_liar.py, the demo): 12 workload apps (32 workers, 2
emulated cores, backlog 128, exponential demand scaled from the paper's
100 ms to 20 ms so a sweep fits on a 2-core machine), each behind a huntlb
agent, the fronts of each named strategy over them, and one measured run:
open-loop Poisson arrivals with shared seeds, so paired runs meet the same
arrivals and job sizes."""

from __future__ import annotations

import os
from pathlib import Path

from benchlib.fleet import FORWARD_OPTS, FORWARDING, HUNT_POLICIES, STRATEGIES, Fleet, Sampler, drive, summary
from benchlib.fronts import MEASURED
from benchlib.reports import RESULTS, flag, read_data
from benchlib.runs import Run
from benchlib.sidecars import KINDS as SIDECARS, start_sidecars
from benchlib.stats import cdf
from benchlib.tools import proc_cpu_exact, proc_cpu_seconds
from harness import Addrs, Front, HaproxyRoot, Procs, start_front, wait_all_up

SERVERS, WORKERS, CORES, BACKLOG, MEAN_MS = 12, 32, 2.0, 128, 20.0
PROBE_QUERIES = 20000  # the paper's run length
# Latency counts from the intended send time, so a late send is in the result;
# a run is invalid when its p99 send lateness exceeds a quarter of the mean demand.
MAX_LATENESS_US = int(MEAN_MS * 1000 / 4)
REPEATS = 2  # an invalid run is repeated at most this many times


def last_lambda0(out: Path = RESULTS) -> float:
    """λ0 as the last sweep measured it (its probe, in its data)."""
    return read_data("srlb-poisson", out)["probe"]["lambda0"]


def fronts_cpu_seconds(fronts) -> float:
    """CPU time the running fronts have used (utime + stime)."""
    return sum(proc_cpu_seconds(f.pid) for f in fronts if f.proc.alive())


def common_seed(rate: float, rep: int, instances: int) -> int:
    """The generator's seed, the same for every strategy at one rate, repetition
    and number of fronts: paired runs meet the same arrivals and the same job
    sizes (common random numbers), so their ratio is the balancers' difference
    and not two draws of a 10-s run's busy periods."""
    return 1 + rep * 1_000_003 + instances * 10_007 + round(rate * 10)


def seconds_for(rate: float, max_s: float) -> float:
    return max(4.0, min(max_s, PROBE_QUERIES / rate))


class Bench:
    def __init__(self, work: Path, proxies: list[str], quick: bool, servers: int = SERVERS, mean_ms: float = MEAN_MS,
                 demand: str = "exp", agent_opts: dict | None = None):
        """servers, mean_ms: a bigger fleet with jobs as much longer keeps the
        capacity, so the same rates (and λ0) hold. demand: the jobs' sizes,
        `exp` or `lognormal:SIGMA` (heavy-tailed), of mean mean_ms."""
        self.work, self.proxies, self.quick = work, proxies, quick
        self.servers, self.mean_ms = servers, mean_ms
        kind, _, sigma = demand.partition(":")
        if kind == "exp" and not sigma:
            self.demand = f"exp:{mean_ms:g}"
        elif kind == "lognormal" and sigma:
            self.demand = f"lognormal:{mean_ms:g}:{float(sigma):g}"
        else:
            raise ValueError(f"demand `{demand}`: expected exp or lognormal:SIGMA")
        self.procs, self.addrs = Procs(work), Addrs()
        self.hr = HaproxyRoot("2.6") if "haproxy" in proxies else None
        try:
            self.fleet = Fleet(self.procs, self.addrs, [CORES] * servers, WORKERS, BACKLOG, mean_ms,
                               agent_opts=agent_opts or {}).start()
        except BaseException:
            # an agent that refused its options: the apps started before it
            # stop here (the caller has no Bench to close; they ran on, idle)
            self.close()
            raise
        self.fronts: dict[tuple[str, str, int], Front] = {}  # (proxy, strategy, instance) -> Front
        self.sidecars: dict[str, list] = {}  # kind (sidecars.KINDS) -> one per backend, started at first use
        self.seq = 0

    def close(self):
        self.procs.stop_all()
        if self.hr:
            self.hr.cleanup()

    @staticmethod
    def sidecar_kind(name: str) -> str | None:
        """`leastconn+sc`: leastconn's front over a plain proxy beside each
        backend (benchlib/sidecars.py) instead of the agents: the kind, or None."""
        kind = name.rpartition("+")[2] if "+" in name else None
        if kind is not None and kind not in SIDECARS:
            raise ValueError(f"`{name}`: +{kind} is no sidecar kind (expected one of {', '.join('+' + k for k in SIDECARS)})")
        return kind

    def hop_pids(self, name: str) -> list[int]:
        """The processes of the per-backend hop strategy `name` goes through: its sidecars, or the agents."""
        kind = self.sidecar_kind(name)
        return [s.proc.pid for s in self.sidecars[kind]] if kind else [b.agent_proc.pid for b in self.fleet.backends]

    def front(self, proxy: str, strategy: str, instance: int = 0):
        key = (proxy, strategy, instance)
        if key not in self.fronts:
            strategy, _, kind = strategy.partition("+")
            hunting, lb, *rest = STRATEGIES[proxy][strategy]
            # (hunting, lb[, example[, kw]]): a strategy with an example and no kw gets none
            example, kw = (rest + [None, {}][len(rest):])[:2]
            name = f"{strategy.replace('(', '').replace(')', '').replace('/', '-')}{'-' + kind if kind else ''}-{instance}"
            if kind:
                if hunting:
                    raise ValueError(f"`{strategy}+{kind}`: a sidecar passes every request on; only a plain strategy goes over one")
                if kind not in self.sidecars:
                    if self.hr is None:  # HAProxy sidecars beside Envoy fronts
                        self.hr = HaproxyRoot("2.6")
                    self.sidecars[kind] = start_sidecars(self.procs, self.hr, self.fleet.backends, kind)
                self.fronts[key] = start_front(proxy, self.procs, self.addrs, self.sidecars[kind], hunting, lb=lb, hr=self.hr,
                                               name=f"{proxy}-{name}", served_by=False, server_opts="weight 100",
                                               example=example, **MEASURED, **kw)
            else:
                self.fronts[key] = self.fleet.front(proxy, hunting, lb, self.hr, example=example, name=name, **kw)
        return self.fronts[key]

    def policy_for(self, name: str) -> tuple[str, str]:
        """(front strategy, agent policy) of a named strategy."""
        base, _, over = name.partition("/")
        if base in HUNT_POLICIES:
            return ("hunt/" + over if over else "hunt"), HUNT_POLICIES[base]
        return name, "always"

    def run(self, proxy: str, name: str, rate: float, seconds: float, *, rho: float, rep: int, instances: int = 1,
            sample: bool = False, keep_cdf: bool = True, seed: int | None = None) -> Run:
        """One measured run. A run the generator flags invalid is discarded and
        repeated (up to REPEATS times): it says nothing about the balancer.
        keep_cdf: keep its latency CDF (the CDF plots draw repetition 0).
        seed: the generator's, instead of common_seed's (a run paired with
        runs through another number of fronts)."""
        for attempt in range(1, REPEATS + 2):
            res = self._run_once(proxy, name, rate, seconds, instances, sample, rho, rep, seed)
            res.attempts = attempt
            if res.valid:
                break
        if not keep_cdf:
            res.cdf = None
        return res

    def _ready(self, proxy: str, name: str, instances: int) -> tuple[list[Front], bool]:
        """The agents as strategy `name` has them and its fronts up: (fronts, whether the agents form a tier)."""
        strategy, policy = self.policy_for(name)
        forward = name.partition("/")[0] in FORWARDING
        # Only offers meet the policy. A hunting run starts from fresh agents (SR_dyn
        # from c0), as a separate experiment would, and as the simulator does.
        if strategy.startswith("hunt"):
            base = name.partition("/")[0]
            self.fleet.set_policy(policy, forward=forward, sample=FORWARDING.get(base, 0), opts=FORWARD_OPTS.get(base))
        else:
            self.fleet.relay_plain()
        fronts = [self.front(proxy, strategy, i) for i in range(instances)]
        for f in fronts:
            wait_all_up(f, self.servers)
        return fronts, forward

    def idle_cpu(self, proxy: str, name: str, seconds: float, instances: int = 1) -> tuple[list[float], float]:
        """Strategy `name` ready and no request sent for `seconds`: each agent's
        CPU (cores), and the fronts' (summed), over that time: the fixed part
        (beats, timers, health checks) a fleet pays whatever its load. Read to
        the nanosecond (`proc_cpu_exact`), with the other strategies' fronts
        stopped (SIGSTOP) meanwhile: their health checks are not this
        strategy's cost (read with them, each strategy carried the checks of
        every one read before it)."""
        import signal
        import time
        fronts, _ = self._ready(proxy, name, instances)
        others = [f for f in self.fronts.values() if all(f is not g for g in fronts) and f.proc.alive()]
        for f in others:
            os.kill(f.pid, signal.SIGSTOP)
        try:
            time.sleep(2.0)  # past the start's handshakes and first health checks
            pids = self.hop_pids(name)
            exact = lambda ps: sum(proc_cpu_exact(p) for p in ps)  # noqa: E731
            fpids = [f.pid for f in fronts]
            a0, f0, t0 = [proc_cpu_exact(p) for p in pids], exact(fpids), time.monotonic()
            time.sleep(seconds)
            dt = time.monotonic() - t0
            return [(proc_cpu_exact(p) - c) / dt for p, c in zip(pids, a0)], (exact(fpids) - f0) / dt
        finally:
            for f in others:
                os.kill(f.pid, signal.SIGCONT)

    def _run_once(self, proxy: str, name: str, rate: float, seconds: float, instances: int, sample: bool,
                  rho: float, rep: int, seed: int | None = None) -> Run:
        strategy, _ = self.policy_for(name)
        fronts, forward = self._ready(proxy, name, instances)
        before = self.fleet.stats()
        refused0, forwarded0, datagrams0 = self.fleet.refused(), self.fleet.forwarded(), self.fleet.datagrams()
        self.seq += 1
        out = self.work / f"run-{self.seq}.json"
        # the per-backend hop's CPU: the agents, or the strategy's sidecars
        hops = self.hop_pids(name)
        cpu0 = sum(proc_cpu_seconds(p) for p in hops)
        used = set(id(f) for f in fronts)
        idle = [f for f in self.fronts.values() if id(f) not in used]
        fcpu0, icpu0 = fronts_cpu_seconds(fronts), fronts_cpu_seconds(idle)
        with Sampler(self.fleet, 0.2 if sample else 0.5) as s:
            report = drive([f.url for f in fronts], rate, seconds, out, seed=seed if seed is not None else common_seed(rate, rep, instances),
                           max_lateness_us=int(self.mean_ms * 1000 / 4), work=self.demand)
        agents_cpu = (sum(proc_cpu_seconds(p) for p in hops) - cpu0) / seconds
        fronts_cpu = (fronts_cpu_seconds(fronts) - fcpu0) / seconds
        idle_fronts_cpu = (fronts_cpu_seconds(idle) - icpu0) / seconds
        datagrams = (self.fleet.datagrams() - datagrams0) / seconds if forward else None
        after = self.fleet.stats()
        # an app whose counters could not be read: the run says nothing of its load (flagged, repeated)
        unread = [i for i, (a, b) in enumerate(zip(after, before)) if a is None or b is None]
        zero = {"backlog_rejected": 0, "busy_integral_s": 0.0}
        after, before = ([zero if i in unread else x for i, x in enumerate(xs)] for xs in (after, before))
        refused = self.fleet.refused() - refused0
        # With a forwarding tier, an offer the first agent did not keep went to a peer.
        refused += self.fleet.forwarded() - forwarded0
        res = Run(**summary(report), proxy=proxy, policy=name, rate=rate, seconds=seconds, instances=instances, refused=refused,
                  acceptance=(1 - refused / max(report["completed"], 1)) if strategy.startswith("hunt") else None,
                  backlog_rejected=sum(a["backlog_rejected"] - b["backlog_rejected"] for a, b in zip(after, before)),
                  load_per_server=[(a["busy_integral_s"] - b["busy_integral_s"]) / seconds for a, b in zip(after, before)],
                  fairness=s.fairness(), cdf=cdf(report), samples=[(t, busy) for t, busy, _ in s.rows] if sample else None,
                  rho=rho, rep=rep, agents_cpu=agents_cpu, datagrams=datagrams,
                  fronts_cpu=fronts_cpu, idle_fronts_cpu=idle_fronts_cpu)
        if unread and res.valid:
            res.valid, res.invalid_reason = False, f"the counters of app(s) {unread} could not be read"
        invalid = "" if res.valid else f"  INVALID: {res.invalid_reason}"
        acc = f" acc {res.acceptance:.2f}" if res.acceptance is not None else ""
        print(f"  {proxy:7s} {name:13s} x{instances} rate {rate:7.1f}: mean {res.mean_ms:7.1f} ms p99 {res.p99_ms:8.1f} ms"
              f" errors {flag(res.errors)}{acc} agents {agents_cpu:.2f} fronts {fronts_cpu:.2f} cores"
              f"{f' {datagrams:.0f} datagrams/s' if datagrams is not None else ''}{invalid}", flush=True)
        return res

    def probe_lambda0(self, steps: list[float]) -> dict:
        """The paper's bootstrap: the smallest rate at which an RR run drops requests
        (through Envoy when there is one: its RANDOM is uniform)."""
        proxy = "envoy" if "envoy" in self.proxies else self.proxies[0]
        tried = []
        for k in steps:
            rate = k * self.fleet.capacity
            r = self.run(proxy, "RR", rate, seconds_for(rate, 60.0), rho=rate / self.fleet.capacity, rep=0)
            tried.append({"rate": rate, "dropped": r.backlog_rejected + r.errors})
            if tried[-1]["dropped"] > 0:
                return {"lambda0": rate, "nominal": self.fleet.capacity, "tried": tried, "via": proxy}
        return {"lambda0": tried[-1]["rate"], "nominal": self.fleet.capacity, "tried": tried, "via": proxy,
                "note": "no drop up to the last step"}
