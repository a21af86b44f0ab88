"""What the replicas need installed, and where Debian puts it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.procs import ROOT, Procs


MEDIAWIKI = Path(os.environ.get("HUNTLB_MEDIAWIKI", "/usr/share/mediawiki"))
APACHE = Path("/usr/sbin/apache2")
APACHE_MODULES = Path("/usr/lib/apache2/modules")
PHP = Path("/usr/bin/php")
CACHE = ROOT / ".cache" / "wiki"
# Where a wiki's pages are, as on Wikipedia in seed 002's trace (the paper
# tells wiki pages from static files by `/wiki/index.php` in the URL).
SCRIPT_PATH = "/wiki"
# Bump when the template's content or settings change: a new cache key.
TEMPLATE_VERSION = 2


def mediawiki_missing() -> str | None:
    """Why the replicas cannot run here, or None."""
    for what, path in (("mediawiki", MEDIAWIKI / "index.php"), ("apache2", APACHE), ("php8.2-cli", PHP),
                       ("libapache2-mod-php8.2", APACHE_MODULES / "libphp8.2.so")):
        if not path.exists():
            return f"{what} is not installed ({path} missing): run `make setup`"
    return None


def shared_dir(procs: Procs, prefix: str = "huntlb-wiki-") -> Path:
    """A new folder under /tmp that Apache's children can read (as root they
    run as nobody, and a test's own tmp_path is 0700), removed by `procs`'
    cleanups after its processes are stopped."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    procs.cleanups.append(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


def check_traversable(path: Path) -> None:
    """Apache's children (nobody, as root) must reach `path`: fail clearly if a parent is closed to others."""
    if os.geteuid() != 0:
        return
    for p in [path, *path.parents]:
        if p.exists() and not p.stat().st_mode & 0o001:
            raise PermissionError(f"{p} is closed to others (mode {p.stat().st_mode & 0o777:o}): Apache's children, "
                                  f"running as nobody, could not read the wiki under {path}; use harness.wiki.shared_dir()")
