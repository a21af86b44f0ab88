"""The committed hunting fronts, started over a list of backends and returned
once every backend passed its health checks: one way for the tests, the
benchmarks (benchlib), the demo and the emulated cluster (whose fronts run on
hosts of their own and find their backends by DNS: `where`, `expect`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Protocol

from harness.envoy import bind_source as envoy_bind_source, envoy_host_health, envoy_stats, front_config, start_envoy, wait_envoy_hosts_healthy
from harness.haproxy import (HaproxyRoot, bind_source as haproxy_bind_source, haproxy_front_text, haproxy_server_states, haproxy_servers,
                             start_haproxy, wait_runtime)
from harness.net import request, wait_http, wait_until
from harness.procs import Addrs, Proc, Procs

FRONTS = ["envoy", "haproxy-2.6", "haproxy-3.0"]


class Front:
    """A running front: where it listens (`listen`, `url`), its process, and
    what it thinks of its backends, read from the proxy itself (Envoy's admin
    API, HAProxy's runtime API: `stats`, also `admin`)."""

    def __init__(self, kind, listen, backends, envoy_admin=None, stats=None, hr=None, proc: Proc | None = None,
                 call: Callable | None = None):
        self.kind, self.listen, self.envoy_admin, self.stats, self.hr = kind, listen, envoy_admin, stats, hr
        self.proxy = kind.partition("-")[0]  # envoy | haproxy
        self.url, self.proc, self.admin = f"http://{listen}/", proc, stats
        self.backends = [b.agent for b in backends]  # HAProxy's server webN is backends[N-1]
        self.call = call or _here  # a read of the proxy, made from where it can be reached (FrontPlace.call)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def health(self) -> dict[str, bool]:
        """Backend address (Envoy) or server name (HAProxy) -> up?"""
        if self.envoy_admin:
            return {k: v == "healthy" for k, v in self.call(envoy_host_health, self.envoy_admin).items()}
        return {k: v.startswith("UP") for k, v in self.call(haproxy_server_states, self.stats).items()}

    def up(self) -> set[str]:
        """The backends (agent addresses) the proxy's health checks pass."""
        if self.envoy_admin:
            return {a for a, flags in self.call(envoy_host_health, self.envoy_admin).items() if flags == "healthy"}
        if not self.backends:  # server-template slots, filled by DNS: each by the address it was given
            return {r["addr"] for r in self.call(haproxy_servers, self.stats) if r["status"] == "UP"}
        return {self.backends[int(n[3:]) - 1] for n, st in self.call(haproxy_server_states, self.stats).items() if st == "UP"}

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
        s = self.call(envoy_stats, self.envoy_admin)
        return sum(s.get(f"cluster.backends.upstream_rq_retry_{k}", 0) for k in ("limit_exceeded", "overflow"))


TIER_EXAMPLES = {"envoy": "front-tier.yaml", "haproxy": "front-tier.cfg"}


def _here(fn, *args, **kw):
    return fn(*args, **kw)


class FrontPlace(Protocol):
    """Where a front runs: its address, a label naming its process and files,
    how a process starts there (it is passed as `procs` to start_envoy and
    start_haproxy), and how a read of the front is made (its admin API, its
    listener) from where that address can be reached. `OnLoopback` is this
    machine; harness.clusterhosts.Front a host of the emulated cluster."""
    ip: str
    label: str
    log_dir: Path

    def start(self, name: str, argv: list[str], env: dict | None = None) -> Proc: ...

    def call(self, fn, *args, **kw): ...


class OnLoopback:
    """A front on this machine, on its own 127.x.y.z (from `addrs`), its
    processes `procs`'s, read directly."""

    def __init__(self, procs: Procs, addrs: Addrs) -> None:
        self.procs, self.ip = procs, addrs.host()
        self.label, self.log_dir = self.ip, procs.log_dir

    def start(self, name: str, argv: list[str], env: dict | None = None) -> Proc:
        return self.procs.start(name, argv, env)

    call = staticmethod(_here)


def start_front(kind: str, procs: Procs, addrs: Addrs | None, backends: list, hunting: bool = True, warm: bool = True,
                example: str | None = None, pass_plain: bool = False, source: bool = False, *, lb: str | None = None,
                hr: HaproxyRoot | None = None, name: str | None = None, served_by: bool = True, concurrency: int = 2,
                threads: int | None = None, server_opts: str = "", runtime: str = "unix",
                edit: Callable | None = None, every_ms: int | None = None, argv_prefix: list[str] | None = None,
                timeout: float = 15, where: FrontPlace | None = None, expect: set[str] | int | None = None) -> Front:
    """The committed hunting front of `kind` (one of FRONTS, or "haproxy"
    with `hr`) over `backends` (anything with an .agent address), returned
    once every backend passed its health checks (and, warm, it serves).
    hunting=False: the same shipped config as the plain proxy (the baseline).
    warm=False: no plain GET to see it serve (apps that answer none, gRPC).
    example: another shipped front (front-tier.yaml for Envoy, front-tier.cfg for HAProxy).
    source: its connections to the backends leave from its own address (each
    front on loopback its own IP, as agents with `fleet_pass_plain` need).
    pass_plain: the plain front over agents with `fleet_pass_plain`: the tier
    front with every hunting line removed, its source bound.
    lb: the balancer (Envoy lb_policy, HAProxy balance, or "random-offer":
    the paper's random first candidate; None keeps the config's).
    served_by: let `hunt-served-by` through (the loadgen counts per-backend
    requests by it). edit: rewrites the config (HAProxy: its text; Envoy: its
    dict). concurrency: Envoy's workers. HAProxy only: hr (the root to run
    from; else one of its own, from kind's version), threads (nbthread),
    server_opts (each server line), runtime ("unix": the runtime API on a
    socket in the instance's folder; "tcp": on the front's host, port 9999),
    every_ms (the module's background task period), argv_prefix (e.g.
    valgrind). timeout: for the health checks to pass.
    where: the place it runs (None: its own 127.x.y.z from `addrs`, its
    processes `procs`'s). expect: for a front that finds its backends itself
    (no `backends`, an `edit` that points it at a DNS name): returned once its
    checks pass for exactly these agent addresses, or for this many."""
    if pass_plain:
        example, hunting, source = TIER_EXAMPLES[kind.split("-")[0]], False, True
    where = where or OnLoopback(procs, addrs)
    host = where.ip
    listen = f"{host}:10000"
    if kind == "envoy":
        admin = f"{host}:9902"
        cfg = front_config(listen, admin, [b.agent for b in backends], lb_policy=lb, hunting=hunting, keep_served_by=served_by,
                           example=example or "front.yaml")
        if source:
            envoy_bind_source(cfg, host)
        p = start_envoy(where, name or f"envoy-{where.label}", edit(cfg) if edit else cfg, concurrency=concurrency, wait=False)
        where.call(wait_http, admin, "/ready", proc=p, want=200, timeout=20)
        f = Front(kind, listen, backends, envoy_admin=admin, proc=p, call=where.call)
        if backends:
            where.call(wait_envoy_hosts_healthy, admin, len(backends), timeout=timeout)
    else:
        if not kind.startswith("haproxy"):
            raise ValueError(f"front kind {kind!r}: envoy, haproxy-2.6, haproxy-3.0 (or haproxy with hr)")
        if hr is None:
            if kind == "haproxy":
                raise ValueError("front kind 'haproxy': give hr (a HaproxyRoot), or name the version (haproxy-2.6, haproxy-3.0)")
            hr = HaproxyRoot(kind.split("-")[1])
            procs.cleanups.append(hr.cleanup)
        # the runtime API: the shipped unix socket, in this instance's folder, or a loopback port
        stats = str(hr.dir / f"{where.label}.sock") if runtime == "unix" else f"{host}:9999"
        kw = {"offer": "random"} if lb == "random-offer" else {"balance": lb} if lb else {}
        text = haproxy_front_text(hr, listen, stats, backends, hunting=hunting, keep_served_by=served_by, server_opts=server_opts,
                                  **kw, **({"example": example} if example else {}))
        if threads:
            text = text.replace("defaults\n", f"    nbthread {threads}\ndefaults\n", 1)
        if edit:
            text = edit(text)
        if every_ms:
            text = text.replace(" map=", f" every_ms={every_ms} map=")
        if source:
            text = haproxy_bind_source(text, host)
        name = name or f"haproxy-{where.label}"
        if argv_prefix:
            path = hr.dir / f"{name}.cfg"
            path.write_text(text)
            p = where.start(name, argv_prefix + hr.argv(path))
        else:
            p = start_haproxy(where, hr, name, text)
        where.call(wait_runtime, stats, p, timeout=max(15, timeout))
        f = Front(kind, listen, backends, stats=stats, hr=hr, proc=p, call=where.call)
        if backends:  # none: a config whose servers the caller fills (server-template slots)
            wait_until(lambda: all(s == "UP" for s in where.call(haproxy_server_states, stats).values()), timeout=timeout,
                       what="servers UP")
    if expect is not None:
        wait_until(lambda: f.up() == expect if isinstance(expect, set) else len(f.up()) == expect, timeout=timeout,
                   what=f"{kind} at {host} passing its checks for {expect if isinstance(expect, int) else len(expect)} backends")
    # Envoy's admin API reports health from the main thread; a worker learns of it
    # a moment later, and until then a final can only return to the host
    # that refused it. One served request per worker thread is a fair sign.
    tries = 2 if f.envoy_admin else 1
    if warm:
        wait_until(lambda: all(where.call(request, listen, "GET", "/warmup")[0] == 200 for _ in range(tries)),
                   what=f"front at {host} serving")
    elif not f.envoy_admin:
        time.sleep(0.5)  # one refresh of the module's map of servers up (no request to show it)
    return f


def wait_all_up(front, n: int, timeout: float = 20) -> None:
    """Until the front's health checks pass for at least n backends (a config
    may name more servers than backends) and fail for none."""
    def all_up() -> bool:
        try:
            h = front.health()
        except OSError:
            return False
        return len(h) >= n and all(h.values())
    wait_until(all_up, timeout=timeout, what=f"{front.proxy} sees all {n} backends up")
