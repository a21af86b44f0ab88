"""A replica: a copy of the template, its Apache and the agent in front."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.procs import Addrs, Proc, Procs
from harness.wiki.install import shared_dir
from harness.wiki.template import Template
from harness.wiki.apache import Apache, start_apache
from harness.wiki.cpulimit import CpuLimit


@dataclass
class Replica:
    host: str
    dir: Path
    apache: Apache
    agent: str
    admin: str
    agent_proc: Proc
    cpu: CpuLimit | None

    @property
    def id(self) -> str:
        return f"agent-{self.host}"


def copy_template(template: Template, dest: Path) -> Path:
    """A replica's own copy of the template: every file with its mtime (copy2),
    so LocalSettings.php's mtime, the parser cache's epoch, is the template's
    and its warm parser cache stays valid."""
    if dest.exists():
        raise FileExistsError(f"{dest} exists: a replica needs a directory of its own")
    shutil.copytree(template.dir, dest, copy_function=shutil.copy2,
                    ignore=shutil.ignore_patterns("run", "httpd.conf", "error.log", "htdocs", "meta.json"))
    if (dest / "LocalSettings.php").stat().st_mtime != template.settings.stat().st_mtime:
        raise RuntimeError(f"{dest}/LocalSettings.php lost the template's mtime: the parser cache would look stale")
    return dest


REPLICA_LOADS = ("scoreboard", "status")


def agent_load(apache: Apache, load: str = "scoreboard", apache_poll_ms: int = 5) -> dict:
    """The agent keys that read `apache`'s busy workers: from its scoreboard in
    shared memory (`scoreboard`, exact at any load), or from mod_status
    (`status`, which needs a free worker: late on a saturated replica)."""
    if load == "scoreboard":
        return {"load": "apache", "apache_scoreboard": str(apache.scoreboard), "apache_poll_ms": apache_poll_ms}
    if load == "status":
        return {"load": "apache", "apache_status_url": apache.status_url(), "apache_poll_ms": apache_poll_ms}
    raise ValueError(f"load must be one of {REPLICA_LOADS}, got {load!r}")


def start_replica(procs: Procs, addrs: Addrs, template: Template, workers: int = 8, cores: float | None = None,
                  policy: str = "static:4", apache_poll_ms: int = 5, agent_opts: dict | None = None,
                  root: Path | None = None, cpu_period_us: int = 20_000, hold: bool = False,
                  load: str = "scoreboard") -> Replica:
    """One replica on its own 127.x.y.z: a copy of `template`, its Apache
    (`workers` prefork workers; `cores` of CPU if given, via a cgroup), and a
    `huntlb-agent` on :8080 in front reading that Apache's busy workers every
    `apache_poll_ms`: from its scoreboard in shared memory (`load="scoreboard"`,
    the default) or from mod_status (`load="status"`); see `agent_load`. The
    copy goes under `root` (default: a new `shared_dir`)."""
    if load not in REPLICA_LOADS:
        raise ValueError(f"start_replica: load must be one of {REPLICA_LOADS}, got {load!r}")
    host = addrs.host()
    root = root or shared_dir(procs)
    d = copy_template(template, Path(root) / f"replica-{host}")
    cpu = None
    if cores is not None:
        cpu = CpuLimit(f"huntlb-wiki-{os.getpid()}-{host}", cores, cpu_period_us)
        procs.cleanups.append(cpu.remove)
    apache = start_apache(procs, host, d, workers=workers, cpu=cpu, hold=hold)
    # the agent's n is the pool's size (with the scoreboard it may not exceed its slots)
    opts = {"policy": policy, "workers": workers, **agent_load(apache, load, apache_poll_ms), **(agent_opts or {})}
    proc, agent, admin = procs.agent(host, apache.addr, **opts)
    return Replica(host, d, apache, agent, admin, proc, cpu)
