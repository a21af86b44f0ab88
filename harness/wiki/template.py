"""The template wiki: installed, imported and warmed once per parameters,
cached under `.cache/wiki/`; every replica copies it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.net import request
from harness.procs import Addrs, Procs
from harness.wiki.install import CACHE, MEDIAWIKI, PHP, SCRIPT_PATH, TEMPLATE_VERSION, check_traversable, mediawiki_missing
from harness.wiki.content import dump_xml, generate_pages, page_path
from harness.wiki.apache import start_apache


# Appended to install.php's LocalSettings.php. Every replica is a copy, so
# nothing here names a path: the data directory is beside the settings file.
EXTRA_SETTINGS = """
# --- huntlb (harness/wiki/template.py) ---
# each replica is a copy of this directory: its SQLite files are beside this file
$wgSQLiteDataDir = __DIR__ . "/data";
$wgObjectCaches[CACHE_DB]['server']['dbDirectory'] = $wgSQLiteDataDir;
$wgLocalisationCacheConf['storeServer']['dbDirectory'] = $wgSQLiteDataDir;
$wgJobTypeConf['default']['server']['dbDirectory'] = $wgSQLiteDataDir;
# The parser cache in the replica's own SQLite (copied with it, warm from the
# start, as the paper's memcached was in steady state); APCu (per Apache) for
# the rest, as memcached was. A copy keeps this file's mtime, which is also
# the parser cache's epoch ($wgInvalidateCacheOnLocalSettingsChange).
$wgParserCacheType = CACHE_DB;
$wgMainCacheType = CACHE_ACCEL;
$wgParserCacheExpireTime = 86400 * 365;
# Jobs run by nobody: none at request time (they would make page times depend
# on which request drew a job), and no writes a copy would not have.
$wgJobRunRate = 0;
$wgEnableUploads = false;
$wgUseImageMagick = false;
$wgShowExceptionDetails = true;
wfLoadExtension( 'ParserFunctions' );
wfLoadExtension( 'Cite' );
$wgPFEnableStringFunctions = false;
"""


@dataclass
class Template:
    """A built template wiki: copy `dir` to make a replica."""
    dir: Path
    pages: list[str]
    meta: dict = field(default_factory=dict)

    @property
    def settings(self) -> Path:
        return self.dir / "LocalSettings.php"


def _run(argv: list[str], what: str, timeout: float, env: dict | None = None) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=MEDIAWIKI)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def build_template(pages: int = 2000, seed: int = 1, cache: Path = CACHE, procs: Procs | None = None,
                   addrs: Addrs | None = None, warm: bool = True) -> Template:
    """The template wiki with `pages` generated articles, built once into
    `cache` (keyed by its parameters) and reused. Its parser cache is warmed
    by viewing every page once through a template Apache (`procs`/`addrs`
    start and stop it; without them, no warming). Raises with the reason if
    MediaWiki is missing."""
    missing = mediawiki_missing()
    if missing:
        raise RuntimeError(missing)
    key = hashlib.sha256(json.dumps([TEMPLATE_VERSION, pages, seed, warm]).encode()).hexdigest()[:12]
    final = cache / f"template-{pages}p-s{seed}-{key}"
    if (final / "meta.json").exists():
        meta = json.loads((final / "meta.json").read_text())
        return Template(final, meta["pages"], meta)
    work = cache / f"{final.name}.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "data").mkdir(parents=True)
    for d in (cache, work):
        d.chmod(0o755)
    if warm:
        check_traversable(work)
    t0 = time.monotonic()
    generated = generate_pages(pages, seed)
    env = {**os.environ, "MW_CONFIG_FILE": str(work / "LocalSettings.php")}
    _run([str(PHP), "maintenance/install.php", "--dbtype=sqlite", f"--dbpath={work / 'data'}", "--dbname=wiki",
          f"--confpath={work}", "--server=http://localhost", f"--scriptpath={SCRIPT_PATH}", "--pass=huntlb-replica-admin",
          "--skins=Vector", "--quiet", "HuntWiki", "Admin"], "install.php", 120, env)
    with open(work / "LocalSettings.php", "a") as f:
        f.write(EXTRA_SETTINGS)
    # The parser cache's epoch is this file's mtime, and an entry saved in the
    # epoch's own second counts as stale (CacheTime::expired: `<=`): a small
    # template renders within that second. Date the file a minute back.
    back = time.time() - 60
    os.utime(work / "LocalSettings.php", (back, back))
    (work / "dump.xml").write_text(dump_xml(generated))
    t1 = time.monotonic()
    _run([str(PHP), "maintenance/importDump.php", "--no-updates", "--quiet", str(work / "dump.xml")], "importDump.php", 1800, env)
    (work / "dump.xml").unlink()
    t2 = time.monotonic()
    meta = {"pages": [p.title for p in generated], "seed": seed, "version": TEMPLATE_VERSION,
            "bytes": [len(p.text) for p in generated], "refs": [p.refs for p in generated],
            "install_s": round(t1 - t0, 2), "import_s": round(t2 - t1, 2)}
    if warm:
        if procs is None or addrs is None:
            raise ValueError("build_template(warm=True) needs procs and addrs to start the template's Apache")
        tmpl = Template(work, meta["pages"], meta)
        meta["render_ms"] = _warm(procs, addrs, tmpl)
        meta["warm_s"] = round(time.monotonic() - t2, 2)
    (work / "meta.json").write_text(json.dumps(meta))
    # the replicas' epoch: LocalSettings.php's mtime, kept by every copy
    shutil.rmtree(final, ignore_errors=True)
    work.rename(final)
    return Template(final, meta["pages"], meta)


def _warm(procs: Procs, addrs: Addrs, tmpl: Template) -> list[float]:
    """View every page once (a parser cache miss each: the render), with the
    template's own Apache on the template's own files, 2 workers (2 cores).
    Returns each page's render time in ms, in page order."""
    import concurrent.futures as cf
    host = addrs.host()
    apache = start_apache(procs, host, tmpl.dir, workers=2, name="template")
    try:
        def view(title: str) -> float:
            t = time.monotonic()
            status, _, body = request(apache.addr, "GET", page_path(title), timeout=120)
            if status != 200 or b"mw-parser-output" not in body:
                raise RuntimeError(f"warming {title}: status {status}\n{body[:500]!r}\n{apache.error_log()[-2000:]}")
            return (time.monotonic() - t) * 1000
        with cf.ThreadPoolExecutor(2) as ex:
            ms = [round(x, 1) for x in ex.map(view, tmpl.pages)]
        # Two workers saving into one SQLite at once: a save that meets the
        # other's lock is dropped (MediaWiki saves the parser cache after the
        # response, and gives up quietly). View what is missing again, one at
        # a time: bounded passes, then fail naming the pages.
        for _ in range(3):
            missing = uncached_pages(tmpl)
            if not missing:
                return ms
            for title in missing:
                view(title)
        raise RuntimeError(f"{len(missing)} pages still not in the parser cache after warming: {missing[:5]}")
    finally:
        apache.proc.stop()


def uncached_pages(tmpl: Template) -> list[str]:
    """The template's articles with no parser cache entry (canonical options) in its SQLite."""
    import sqlite3
    with sqlite3.connect(f"file:{tmpl.dir / 'data' / 'wiki.sqlite'}?mode=ro", uri=True) as db:
        ids = {pid: t.replace("_", " ") for pid, t in db.execute("SELECT page_id, page_title FROM page WHERE page_namespace = 0")}
    with sqlite3.connect(f"file:{tmpl.dir / 'data' / 'wikicache.sqlite'}?mode=ro", uri=True) as db:
        cached = {int(k.split(":")[3].split("-")[0]) for (k,) in db.execute(
            "SELECT keyname FROM objectcache WHERE keyname LIKE '%:pcache:idhash:%-0!canonical'")}
    want = set(tmpl.pages)
    return sorted(t for pid, t in ids.items() if pid not in cached and t in want)


