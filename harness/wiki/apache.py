"""One Apache per replica: prefork, a fixed pool of workers, mod_php and
mod_status, on its own loopback address, stopped by process group."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.net import request, wait_http
from harness.procs import Proc, Procs
from harness.wiki.install import APACHE, APACHE_MODULES, MEDIAWIKI, SCRIPT_PATH, check_traversable
from harness.wiki.cpulimit import CpuLimit


APACHE_CONF = """\
# One replica's Apache (harness/wiki/apache.py): prefork with a fixed pool, as seed
# 002's servers were (32 workers there), mod_php, mod_status for the agent.
ServerRoot {dir}
ServerName {host}
Listen {listen}
PidFile {run}/httpd.pid
ErrorLog {dir}/error.log
LogLevel warn
Mutex file:{run} default
DefaultRuntimeDir {run}
# the scoreboard in named shared memory the agent maps (apache_scoreboard), not
# anonymous memory: Debian's APR makes it /dev/shm/ShM.<hash of this path>
ScoreBoardFile {run}/scoreboard
{user}
LoadModule mpm_prefork_module {modules}/mod_mpm_prefork.so
LoadModule authz_core_module {modules}/mod_authz_core.so
LoadModule authz_host_module {modules}/mod_authz_host.so
LoadModule status_module {modules}/mod_status.so
LoadModule alias_module {modules}/mod_alias.so
LoadModule mime_module {modules}/mod_mime.so
LoadModule dir_module {modules}/mod_dir.so
LoadModule env_module {modules}/mod_env.so
LoadModule php_module {modules}/libphp8.2.so
# a fixed pool: every worker started at once, none stopped or added
StartServers {workers}
MinSpareServers {workers}
MaxSpareServers {workers}
ServerLimit {workers}
MaxRequestWorkers {workers}
MaxConnectionsPerChild 0
ListenBacklog {backlog}
# an idle keep-alive connection would hold a prefork worker
KeepAlive Off
ExtendedStatus On
TypesConfig /etc/mime.types
DocumentRoot {dir}/htdocs
DirectoryIndex index.php
Alias {script_path} {mediawiki}
SetEnv MW_CONFIG_FILE {dir}/LocalSettings.php
<Directory />
    Require all denied
</Directory>
<Directory {mediawiki}>
    Require all granted
</Directory>
<Directory {dir}/htdocs>
    Require all granted
</Directory>
<FilesMatch "\\.php$">
    SetHandler application/x-httpd-php
</FilesMatch>
<Location /server-status>
    SetHandler server-status
    Require ip 127.0.0.0/8
</Location>
"""


@dataclass
class Apache:
    host: str
    addr: str
    dir: Path
    workers: int
    proc: Proc
    cgroup: "CpuLimit | None" = None

    def error_log(self) -> str:
        p = self.dir / "error.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def status_url(self) -> str:
        return f"http://{self.addr}/server-status?auto"

    @property
    def scoreboard(self) -> Path:
        """Its ScoreBoardFile: the name of its scoreboard in shared memory (no file is made there)."""
        return self.dir / "run" / "scoreboard"

    def busy_workers(self) -> int:
        """BusyWorkers as mod_status reports it (the status request itself included)."""
        _, _, body = request(self.addr, "GET", "/server-status?auto", timeout=10)
        for line in body.decode(errors="replace").splitlines():
            if line.startswith("BusyWorkers:"):
                return int(line.split(":")[1])
        raise RuntimeError(f"no BusyWorkers in {self.addr}/server-status?auto: {body[:300]!r}")


def _user_lines() -> str:
    # As root, Apache's children run as nobody (the replica's files are
    # chowned to it); as anyone else they run as that user, who owns them.
    return "User nobody\nGroup nogroup" if os.geteuid() == 0 else ""


# Tests only (hold=True): a PHP page that holds its worker for ?ms=N
# milliseconds (at most 10 s), so a test knows how many workers are busy.
HOLD_PHP = """<?php
$ms = max(0, min(10000, intval($_GET['ms'] ?? 1000)));
usleep($ms * 1000);
header('Content-Type: text/plain');
echo "held $ms ms\\n";
"""


# Where Debian's APR keeps named shared memory (POSIX shm_open): the scoreboards.
SHM = Path("/dev/shm")


def start_apache(procs: Procs, host: str, wiki_dir: Path, workers: int = 8, port: int = 8081, backlog: int = 128,
                 cpu: "CpuLimit | None" = None, name: str = "replica", hold: bool = False) -> Apache:
    """An Apache for the wiki in `wiki_dir` on host:port, in the foreground
    under `procs` (stopped by PID with its process group), inside `cpu`'s
    cgroup if given (the master joins it before exec, so every child is in it).
    hold: serve /hold.php?ms=N (tests)."""
    if workers < 1:
        raise ValueError("start_apache: workers must be >= 1")
    check_traversable(wiki_dir)
    run = wiki_dir / "run"
    run.mkdir(exist_ok=True)
    (wiki_dir / "htdocs").mkdir(exist_ok=True)
    if hold:
        (wiki_dir / "htdocs" / "hold.php").write_text(HOLD_PHP)
    listen = f"{host}:{port}"
    conf = wiki_dir / "httpd.conf"
    conf.write_text(APACHE_CONF.format(dir=wiki_dir, run=run, host=host, listen=listen, user=_user_lines(), modules=APACHE_MODULES,
                                       workers=workers, backlog=backlog, script_path=SCRIPT_PATH, mediawiki=MEDIAWIKI))
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "nobody:nogroup", str(wiki_dir / "data")], check=True)
        os.chmod(wiki_dir, 0o755)
    argv = [str(APACHE), "-f", str(conf), "-DFOREGROUND"]
    if cpu is not None:
        # join the cgroup, then become Apache: the master and all it forks are limited
        argv = ["/bin/sh", "-c", f'echo $$ > "{cpu.procs_file}" && exec "$@"', "sh", *argv]
    before = set(SHM.glob("ShM.*"))
    p = procs.start(f"apache-{name}-{host}", argv, env={"PATH": "/usr/sbin:/usr/bin:/bin", "LANG": "C"})
    wait_http(listen, "/server-status?auto", proc=p, want=200, timeout=20)
    # Its scoreboard's shared memory object: an Apache stopped by SIGKILL (a
    # teardown's last resort) leaves it behind, so it goes once Apache has.
    made = set(SHM.glob("ShM.*")) - before
    procs.cleanups.append(lambda: [f.unlink(missing_ok=True) for f in made])
    return Apache(host, listen, wiki_dir, workers, p, cpu)


