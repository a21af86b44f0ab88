"""Fronts for the benchmarks: how they run one (MEASURED, the options of
harness.fronts.start_front, the one way to start Envoy or HAProxy from the
committed example config over any backends), config edits the variants
share, pinning a process to a CPU, and the test bed of the overhead runs
(static backends on CPU 1).
"""

from __future__ import annotations

import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from harness import Addrs, Front, HaproxyRoot, Procs, start_front, start_haproxy, wait_tcp

# Static backends in the overhead runs: enough for a pick to mean something.
BACKENDS = 3


# How the benchmarks run a front (harness.fronts.start_front's options), as
# they always have: one Envoy worker (the proxy measured on one core),
# HAProxy's runtime API on a loopback port, no warm-up GET (ready once the
# health checks pass), and a minute for those (up to 128 servers).
MEASURED = {"concurrency": 1, "runtime": "tcp", "warm": False, "timeout": 60}


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
        return start_front(proxy, self.procs, self.addrs, self.backends if backends is None else backends, hunting,
                           hr=self.hr, name=name, served_by=False, threads=1, **MEASURED, **kw)


@contextmanager
def overhead_bed(prefix: str, haproxy: str = "2.6", backends: int = BACKENDS):
    """A Bed in a fresh work directory, its HAProxy root of version `haproxy`,
    `backends` static backends; every process stopped at the end."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    procs, addrs = Procs(work), Addrs()
    hr = HaproxyRoot(haproxy)
    try:
        yield Bed(work, procs, addrs, hr, static_backends(procs, hr, addrs, backends))
    finally:
        procs.stop_all()
        hr.cleanup()
