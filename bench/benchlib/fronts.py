"""Fronts for the benchmarks: one function starts Envoy or HAProxy from the
committed example config over any backends (a fleet of agents, or static
responders), returned once the proxy sees every backend up. Also: pinning a
process to a CPU, and the test bed of the overhead runs (static backends on CPU 1).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from harness import (Addrs, HaproxyRoot, Proc, Procs, envoy_bind_source, envoy_host_health, front_config, haproxy_bind_source,
                     haproxy_front_text, haproxy_server_states, start_envoy, start_haproxy, wait_tcp, wait_until)

# Static backends in the overhead runs: enough for a pick to mean something.
BACKENDS = 3


@dataclass
class Front:
    """One running proxy: where to send requests, and what it thinks of its backends."""

    proxy: str  # envoy | haproxy
    url: str
    health: Callable[[], dict[str, bool]]  # backend address (Envoy) or server name (HAProxy) -> up?
    proc: Proc
    admin: str | None = None  # HAProxy: its runtime API (host:port)

    @property
    def pid(self) -> int:
        return self.proc.pid


def start_front(procs: Procs, addrs: Addrs, proxy: str, backends: list, hunting: bool, *, lb: str | None = None,
                hr: HaproxyRoot | None = None, name: str = "front", served_by: bool = True, threads: int | None = None,
                server_opts: str = "", edit: Callable[[str], str] | None = None, every_ms: int | None = None,
                argv_prefix: list[str] | None = None, example: str | None = None, source: bool = False) -> Front:
    """A front of `proxy` over `backends` (anything with an .agent address), from
    the committed example config; hunting=False is the same config without its
    hunting parts. lb: the balancer (Envoy lb_policy, HAProxy balance; None keeps
    the config's). served_by: let `hunt-served-by` through (the loadgen counts
    per-backend requests by it). edit: rewrites the config (HAProxy: its text;
    Envoy: its dict). HAProxy only: threads (nbthread), server_opts (each
    server line), every_ms (the module's background task period) and
    argv_prefix (e.g. valgrind). Envoy runs one worker. source: its connections
    to the backends leave from its own address, as plain fronts over agents
    with `fleet_pass_plain` need on one host (hunting=False with a tier
    example is then such a front: no hunting line)."""
    host = addrs.host()
    listen = f"{host}:10000"
    if proxy == "envoy":
        admin = f"{host}:9902"
        cfg = front_config(listen, admin, [b.agent for b in backends], lb_policy=lb, hunting=hunting,
                           keep_served_by=served_by, example=example or "front.yaml")
        if source:
            envoy_bind_source(cfg, host)
        p = start_envoy(procs, name, edit(cfg) if edit else cfg, concurrency=1)
        health = lambda: {k: v == "healthy" for k, v in envoy_host_health(admin).items()}  # noqa: E731
    else:
        stats = f"{host}:9999"
        # lb "random-offer": the paper's random first candidate and random(1)
        # final (harness.haproxy.random_offer); otherwise the shipped offer to
        # HAProxy's own least-loaded server.
        kw = {"offer": "random"} if lb == "random-offer" else {"balance": lb} if lb else {}
        if example:
            kw["example"] = example
        text = haproxy_front_text(hr, listen, stats, backends, hunting=hunting, keep_served_by=served_by,
                                  server_opts=server_opts, **kw)
        if threads:
            text = text.replace("defaults\n", f"    nbthread {threads}\ndefaults\n", 1)
        if edit:
            text = edit(text)
        if every_ms:
            text = text.replace(" map=", f" every_ms={every_ms} map=")
        if source:
            text = haproxy_bind_source(text, host)
        if argv_prefix:
            cfg = hr.dir / f"{name}.cfg"
            cfg.write_text(text)
            p = procs.start(name, argv_prefix + hr.argv(cfg))
        else:
            p = start_haproxy(procs, hr, name, text)
        wait_tcp(stats, p, timeout=60)
        health = lambda: {k: v.startswith("UP") for k, v in haproxy_server_states(stats).items()}  # noqa: E731
    f = Front(proxy, f"http://{listen}/", health, p, admin=stats if proxy == "haproxy" else None)
    if backends:  # none: a config whose servers the caller fills (server-template slots)
        wait_all_up(f, len(backends), timeout=60)
    if proxy == "haproxy":
        time.sleep(0.5)  # one refresh of the module's map of servers up
    return f


def wait_all_up(front: Front, n: int, timeout: float = 20) -> None:
    def all_up() -> bool:
        try:
            h = front.health()
        except OSError:
            return False
        return len(h) >= n and all(h.values())  # a config may name more servers than backends
    wait_until(all_up, timeout=timeout, what=f"{front.proxy} sees all {n} backends up")


def slow_checks(proxy: str, then=None):
    """A config edit: health checks every 10 s instead of 0.5 s, in every
    variant alike. With 128 servers the fronts not being measured checked
    their servers on the measured front's core (4 fronts x 256 checks a
    second), which is noise, not what a request costs."""
    def edit(cfg):
        if proxy == "haproxy":
            cfg = cfg.replace("check inter 500", "check inter 10s")
            return then(cfg) if then else cfg
        for hc in cfg["static_resources"]["clusters"][0].get("health_checks", []):
            hc["interval"] = hc["no_traffic_interval"] = "10s"
        return then(cfg) if then else cfg
    return edit


def changes(name: str, how):
    """A config edit `how`, failing loudly if it leaves the config as it was (a
    line renamed in front.cfg would otherwise make a variant silently measure
    the full front)."""
    def edit(text: str) -> str:
        out = how(text)
        if out == text:
            raise RuntimeError(f"variant {name!r} does not change the front's config")
        return out
    return edit


def pin(pid: int, cpu: int) -> None:
    """Every thread of `pid` onto one CPU."""
    subprocess.run(["taskset", "-a", "-pc", str(cpu), str(pid)], check=True, capture_output=True)


def static_backends(procs: Procs, hr: HaproxyRoot, addrs: Addrs, n: int = BACKENDS, name: str = "static-backends") -> list:
    """One HAProxy answering 200 on n addresses, pinned to CPU 1: backends
    without agents (they ignore hunt headers, so every offer is accepted)."""
    hosts = [addrs.host() for _ in range(n)]
    binds = "\n".join(f"    bind {h}:8080" for h in hosts)
    text = f"""global
    nbthread 1
defaults
    mode http
    timeout client 60s
    timeout http-keep-alive 60s
frontend static
{binds}
    http-request return status 200 content-type text/plain string "ok\\n"
"""
    p = start_haproxy(procs, hr, name, text)
    wait_tcp(f"{hosts[0]}:8080", p)
    pin(p.pid, 1)
    return [SimpleNamespace(agent=f"{h}:8080") for h in hosts]


@dataclass
class Bed:
    """The overhead runs' test bed: processes, addresses, an HAProxy root, and
    BACKENDS static backends on CPU 1 (the proxy measured goes on CPU 0)."""

    work: Path
    procs: Procs
    addrs: Addrs
    hr: HaproxyRoot
    backends: list

    def front(self, proxy: str, hunting: bool, name: str, backends: list | None = None, **kw) -> Front:
        """A front with one worker and no hunt-served-by, over the static
        backends unless others are given; kw as start_front's."""
        return start_front(self.procs, self.addrs, proxy, self.backends if backends is None else backends, hunting,
                           hr=self.hr, name=name, served_by=False, threads=1, **kw)


@contextmanager
def overhead_bed(prefix: str):
    """A Bed in a fresh work directory; every process stopped at the end."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    procs, addrs = Procs(work), Addrs()
    hr = HaproxyRoot("2.6")
    try:
        yield Bed(work, procs, addrs, hr, static_backends(procs, hr, addrs))
    finally:
        procs.stop_all()
        hr.cleanup()
