"""The vs-least testbed (benchlib/testbed.py) on the emulated cluster
(harness/cluster.py, docs/cluster.md) instead of one loopback: each app and its
agent on a host of its own, each front on its own host finding the backends by
DNS (Envoy STRICT_DNS, HAProxy server-template), the agents their peers by
the service's name, and the load generator, the samplers and every read on
the client host. The apps, agents, jobs and arrivals are the testbed's, so a
run here pairs with the same run on loopback.

Strategies: the tier front (`FWD/pass`, front-tier.yaml / front-tier.cfg over
the agents' tier), the proxy's own least-loaded pick through the same
front with its hunting lines removed (`LR/full`, `leastconn`), and that plain
front over agents that pass its tries on (`FWDp/plain`, the chart's default). The agents
always form the tier here (their `fleet_peers` is the service's name): under a
baseline nothing is passed on, and the tier only sends its heartbeats.
fleet_loss: each datagram arriving at a backend's fleet port is dropped with
this probability, for the whole bench.
"""

from __future__ import annotations

import math
from pathlib import Path

from benchlib.fronts import Front
from benchlib.testbed import BACKLOG, CORES, MEAN_MS, SERVERS, WORKERS, Bench
from harness.cluster import FLEET_PORT, Cluster
from harness.netns import inside
from harness import agent_default
from harness.net import wait_until

# What each proxy runs here: (hunting, tier front) per strategy.
# `hunt/plain` (FWDp/plain): the plain front, each its own host, over agents that pass its tries on.
CLUSTER_STRATEGIES = {"envoy": {"LR/full": False, "hunt/pass": True, "hunt/plain": False},
                      "haproxy": {"leastconn": False, "hunt/pass": True, "hunt/plain": False}}
HAPROXY = "haproxy-2.6"


class ClusterFleet:
    """benchlib.fleet.Fleet's interface, as Bench uses it, over the cluster's
    backend hosts."""

    def __init__(self, cluster: Cluster, cores: list[float], workers: int, backlog: int, mean_ms: float) -> None:
        self.c, self.cores, self.workers, self.mean_ms = cluster, cores, workers, mean_ms
        self.opts: dict = {}
        for i, k in enumerate(cores):
            cluster.backend(app_opts={"workers": workers, "cores": k, "backlog": backlog, "demand": f"exp:{mean_ms}",
                                      "seed": 1000 + i}, workers=workers, drain_grace_ms=0)
        self.backends = cluster.backends()
        self._wait_heard(agent_default("fleet_sample"))

    @property
    def capacity(self) -> float:
        return sum(self.cores) / (self.mean_ms / 1000)

    def set_policy(self, policy: str, forward: bool = False, sample: int | None = None, opts: dict | None = None) -> None:
        """Every agent restarted in place with this policy (fresh state), as on
        loopback; the tier stays on (see the module's docs)."""
        self.opts = opts or {}
        for b in self.backends:
            b.agent_proc.stop()
        for i, b in enumerate(self.backends):
            kw = {"policy": policy.format(cores=math.ceil(self.cores[i])), **(opts or {})}
            if sample is not None:
                kw["fleet_sample"] = sample
            b.start_agent(**kw)
        self._wait_heard(agent_default("fleet_sample") if sample is None else sample)

    def relay_plain(self) -> None:
        """As loopback's Fleet.relay_plain: the tier stays (see the module's
        docs), plain fronts' tries relayed. The hosts keep an agent's options
        across restarts, so the key is turned off, not left out."""
        if self.opts.get("fleet_pass_plain") not in (None, "false"):
            self.set_policy("dynamic:seen_margin=1", opts={"fleet_pass_plain": "false"})

    def _wait_heard(self, sample: int) -> None:
        """Until every agent hears its sample (0: every other member)."""
        n = len(self.backends)
        heard = n - 1 if not sample else min(sample, n - 1)
        wait_until(lambda: all(b.peers_heard() >= heard for b in self.backends), timeout=15 + n // 4,
                   what=f"every agent hearing {heard} peers")

    def stats(self) -> list[dict | None]:
        out = []
        for b in self.backends:
            try:
                out.append(b.stats() if b.app_proc.alive() else None)
            except OSError:
                out.append(None)
        return out

    def _sum(self, key: str) -> float:
        return sum(b.metrics().get(key, 0) for b in self.backends if b.agent_proc.alive())

    def refused(self) -> float:
        return self._sum('huntlb_offers_total{decision="refuse"}')

    def datagrams(self) -> float:
        return self._sum("huntlb_fleet_reports_sent_total")

    def forwarded(self) -> float:
        return self._sum('huntlb_forwards_total{outcome="sent"}')

    def agents_cpu_seconds(self) -> float:
        from benchlib.tools import proc_cpu_seconds
        return sum(proc_cpu_seconds(b.agent_proc.pid) for b in self.backends if b.agent_proc.alive())


class ClusterBench(Bench):
    """Bench on the emulated cluster: its runs (`run`) are loopback's, from
    the client host."""

    def __init__(self, work: Path, proxies: list[str], servers: int = SERVERS, mean_ms: float = MEAN_MS,
                 demand: str = "exp", fleet_loss: float = 0.0) -> None:
        if demand != "exp":
            raise ValueError("the cluster bench runs exponential jobs only")
        self.work, self.proxies, self.quick = work, proxies, False
        self.servers, self.mean_ms, self.demand = servers, mean_ms, f"exp:{mean_ms:g}"
        self.cluster = Cluster(work / "cluster")
        self.hr = None
        self.fronts: dict[tuple[str, str, int], Front] = {}
        self.seq = 0
        try:
            self.cluster.start()
            self.fleet = ClusterFleet(self.cluster, [CORES] * servers, WORKERS, BACKLOG, mean_ms)
            if fleet_loss:
                self.cluster.loss(self.fleet.backends, fleet_loss, FLEET_PORT)
        except BaseException:
            self.cluster.stop()
            raise

    def close(self) -> None:
        self.cluster.stop()

    def front(self, proxy: str, strategy: str, instance: int = 0) -> Front:
        key = (proxy, strategy, instance)
        if key not in self.fronts:
            if strategy not in CLUSTER_STRATEGIES[proxy]:
                raise ValueError(f"{proxy} {strategy}: the cluster bench runs {', '.join(CLUSTER_STRATEGIES[proxy])}")
            kind = HAPROXY if proxy == "haproxy" else "envoy"
            f = self.cluster.front(kind, name=f"{strategy.replace('/', '-')}-{instance}", expect=self.servers,
                                   hunting=CLUSTER_STRATEGIES[proxy][strategy], slots=max(8, self.servers + 4))
            self.fronts[key] = Front(proxy, f"http://{f.listen}/", lambda f=f: {a: True for a in f.up()}, f.procs[-1])
        return self.fronts[key]

    def run(self, *args, **kw):
        """One measured run, from the client host: this thread, the threads it
        starts (the sampler) and the generator it runs are in its namespace."""
        with inside(self.cluster.client.ns):
            return super().run(*args, **kw)
