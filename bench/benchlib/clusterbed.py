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

from pathlib import Path

from benchlib.fleet import Fleet
from benchlib.testbed import BACKLOG, CORES, MEAN_MS, SERVERS, WORKERS, Bench
from harness.cluster import Cluster, EmulatedHosts
from harness.clusterhosts import Front
from harness.netns import inside
from harness.testbed import FLEET_PORT

# What each proxy runs here: (hunting, tier front) per strategy.
# `hunt/plain` (FWDp/plain): the plain front, each its own host, over agents that pass its tries on.
CLUSTER_STRATEGIES = {"envoy": {"LR/full": False, "hunt/pass": True, "hunt/plain": False},
                      "haproxy": {"leastconn": False, "hunt/pass": True, "hunt/plain": False}}
HAPROXY = "haproxy-2.6"


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
            # the cluster's agents as harness.cluster's backend hosts run them (its policy)
            self.fleet = Fleet(self.cluster.procs, None, [CORES] * servers, WORKERS, BACKLOG, mean_ms, policy="dynamic:seen_margin=1",
                               place=EmulatedHosts(self.cluster)).start()
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
            self.fronts[key] = f
        return self.fronts[key]

    def run(self, *args, **kw):
        """One measured run, from the client host: this thread, the threads it
        starts (the sampler) and the generator it runs are in its namespace."""
        with inside(self.cluster.client.ns):
            return super().run(*args, **kw)
