"""The committed hunting fronts, started over a list of backends and returned
once every backend passed its health checks."""

from __future__ import annotations

from harness.envoy import bind_source as envoy_bind_source, envoy_host_health, envoy_stats, front_config, start_envoy, wait_envoy_hosts_healthy
from harness.haproxy import HaproxyRoot, bind_source as haproxy_bind_source, haproxy_front_text, haproxy_server_states, start_haproxy, wait_runtime
from harness.net import request, wait_until
from harness.procs import Addrs, Procs

FRONTS = ["envoy", "haproxy-2.6", "haproxy-3.0"]


class Front:
    """A running front: where it listens, and what it thinks of its backends,
    read from the proxy itself (Envoy's admin API, HAProxy's runtime API)."""

    def __init__(self, kind, listen, backends, envoy_admin=None, stats=None, hr=None):
        self.kind, self.listen, self.envoy_admin, self.stats, self.hr = kind, listen, envoy_admin, stats, hr
        self.backends = [b.agent for b in backends]  # HAProxy's server webN is backends[N-1]

    def up(self) -> set[str]:
        """The backends (agent addresses) the proxy's health checks pass."""
        if self.envoy_admin:
            return {a for a, flags in envoy_host_health(self.envoy_admin).items() if flags == "healthy"}
        return {self.backends[int(n[3:]) - 1] for n, st in haproxy_server_states(self.stats).items() if st == "UP"}

    def offered(self) -> set[str]:
        """The backends a request may be offered to first: both fronts offer to
        their own least-loaded pick among the backends their checks pass
        (HAProxy's pick rules test srv_is_up, which is the UP state)."""
        return self.up()

    def leftover_refusals(self) -> float:
        """Refusals that reached the client because Envoy could not re-send
        them: its retry limit spent (limit_exceeded) or its retry circuit
        breaker full (overflow). HAProxy's front turns these into 503s."""
        if not self.envoy_admin:
            return 0
        s = envoy_stats(self.envoy_admin)
        return sum(s.get(f"cluster.backends.upstream_rq_retry_{k}", 0) for k in ("limit_exceeded", "overflow"))


TIER_EXAMPLES = {"envoy": "front-tier.yaml", "haproxy": "front-tier.cfg"}


def start_front(kind: str, procs: Procs, addrs: Addrs, backends: list, hunting: bool = True, warm: bool = True,
                example: str | None = None, pass_plain: bool = False, source: bool = False) -> Front:
    """The committed hunting front of `kind` (one of FRONTS) over `backends`,
    returned once every backend passed its health checks and it serves.
    hunting=False: the same shipped config as the plain proxy (the baseline).
    warm=False: no plain GET to see it serve (apps that answer none, gRPC).
    example: another shipped front (front-tier.yaml for Envoy, front-tier.cfg for HAProxy).
    source: its connections to the backends leave from its own address (each
    front on loopback its own IP, as agents with `fleet_pass_plain` need).
    pass_plain: the plain front over agents with `fleet_pass_plain`: the tier
    front with every hunting line removed, its source bound."""
    if pass_plain:
        example, hunting, source = TIER_EXAMPLES[kind.split("-")[0]], False, True
    host = addrs.host()
    listen = f"{host}:10000"
    if kind == "envoy":
        admin = f"{host}:9902"
        cfg = front_config(listen, admin, [b.agent for b in backends], hunting=hunting, example=example or "front.yaml")
        start_envoy(procs, f"envoy-{host}", envoy_bind_source(cfg, host) if source else cfg)
        wait_envoy_hosts_healthy(admin, len(backends))
        # The admin API reports health from the main thread; a worker learns of it
        # a moment later, and until then a final can only return to the host
        # that refused it. One served request per worker thread is a fair sign.
        if warm:
            wait_until(lambda: all(request(listen, "GET", "/warmup")[0] == 200 for _ in range(2)), what="front serving")
        return Front(kind, listen, backends, envoy_admin=admin)
    hr = HaproxyRoot(kind.split("-")[1])
    procs.cleanups.append(hr.cleanup)
    stats = str(hr.dir / f"{host}.sock")  # the shipped unix socket, in this instance's folder
    text = haproxy_front_text(hr, listen, stats, backends, hunting=hunting, **({"example": example} if example else {}))
    wait_runtime(stats, start_haproxy(procs, hr, f"haproxy-{host}", haproxy_bind_source(text, host) if source else text))
    wait_until(lambda: all(s == "UP" for s in haproxy_server_states(stats).values()), timeout=15, what="servers UP")
    if warm:
        wait_until(lambda: request(listen, "GET", "/warmup")[0] == 200, what="front serving")
    return Front(kind, listen, backends, stats=stats, hr=hr)
