"""Real MediaWiki replicas for the Wikipedia replay (seed 002 § VI).

One code tree (Debian's `mediawiki`, 1.39 on PHP 8.2) serves every replica;
each has its own copy of one template wiki (SQLite), its own Apache (prefork,
mod_php, mod_status) on its own loopback address, optionally its own CPU
limit (a cgroup), and a `huntlb-agent` in front reading that Apache's
scoreboard. One module per job: `install` (what is needed, where), `content`
(the generated pages), `template` (built once, cached), `apache`, `cpulimit`,
`replica` (a copy, an Apache and an agent). Everything starts through
`Procs`, so it stops by PID, pass or fail.
"""

from harness.wiki.apache import SHM, start_apache
from harness.wiki.content import generate_pages, page_path
from harness.wiki.cpulimit import CpuLimit
from harness.wiki.install import SCRIPT_PATH, mediawiki_missing, shared_dir
from harness.wiki.replica import agent_load, start_replica
from harness.wiki.template import build_template

__all__ = ["SCRIPT_PATH", "SHM", "CpuLimit", "agent_load", "build_template", "generate_pages", "mediawiki_missing",
           "page_path", "shared_dir", "start_apache", "start_replica"]
