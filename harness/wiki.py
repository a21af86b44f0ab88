"""Real MediaWiki replicas for the Wikipedia replay (issue 32, seed 002 § VI).

One code tree (Debian's `mediawiki`, 1.39 on PHP 8.2, /usr/share/mediawiki)
serves every replica; each replica has its own copy of one template wiki
(LocalSettings.php and a SQLite data directory, `MW_CONFIG_FILE` set by its
Apache), its own Apache (prefork, a fixed pool of workers, mod_php, mod_status)
on its own loopback address, optionally its own CPU limit (a cgroup), and a
`huntlb-agent` in front that reads its load from that Apache's scoreboard
(in shared memory, `apache_scoreboard`; or mod_status, `load="status"`).

* `build_template(pages=..., seed=...)`: install.php (SQLite), generated pages
  imported with importDump.php, every page viewed once through a template
  Apache so the parser cache (in the wiki's own SQLite, `CACHE_DB`) holds it.
  Cached under `.cache/wiki/` by its parameters: built once, reused.
* `start_replica(procs, addrs, template, ...)`: a copy, an Apache and an agent.

Everything is started through `Procs`, so it is stopped by PID (the Apache's
whole process group) when the test or bench ends, pass or fail; a replica's
cgroup is removed by the same cleanups.

Content is generated, not a Wikipedia dump (none is in the registries): see
`generate_pages` for how its render costs are spread.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from harness.net import request, wait_http
from harness.procs import ROOT, Addrs, Proc, Procs

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


# --- content -------------------------------------------------------------------

# Templates in the style of Wikipedia's, with ParserFunctions: an infobox with
# a branch per field, a citation template (the commonest template on Wikipedia,
# used once per reference), a navbox (a table of links), and a small
# arithmetic template. Render cost grows with how often they are used.
_CITE_FIELDS = ("author", "date", "title", "url", "journal", "publisher", "volume", "pages", "access-date")
_CITE_ARGS = "|".join(f"{f}={{{{{{{f}|}}}}}}" for f in _CITE_FIELDS)
TEMPLATES = {
    "Infobox": """<includeonly>{| class="infobox" style="float:right; width:22em"
|+ '''{{{name|{{PAGENAME}}}}}'''
{{#if:{{{image|}}}|{{!}} colspan="2" {{!}} [[File:{{{image}}}|200px]]}}
{{#for_fields}}
|}</includeonly>""",
    # Wikipedia's citation templates hand every field to a core template that
    # formats it and also emits COinS metadata (each field URL-encoded): a
    # reference costs dozens of parser-function calls, which is what makes long,
    # well-referenced pages the expensive ones to render.
    "Cite": ("<includeonly>{{Cite/core|" + _CITE_ARGS + "|mode=display}}"
             '<span class="Z3988" title="ctx_ver=Z39.88-2004{{Cite/core|' + _CITE_ARGS + '|mode=coins}}"></span></includeonly>'),
    "Cite/core": "<includeonly>" + "".join(
        "{{#ifeq:{{{mode}}}|coins|{{#if:{{{" + f + "|}}}|&rft." + f + "={{urlencode:{{{" + f + "}}}}}}}|{{#if:{{{" + f + "|}}}|"
        "{{#switch:" + f + "|author={{{author}}}.|date=({{#time:Y|{{{date}}}-01-01}}).|title=\"{{#if:{{{url|}}}|[{{{url}}} {{{title}}}]|{{{title}}}}}\""
        "|journal=''{{{journal}}}''|volume='''{{{volume}}}'''|pages=pp. {{{pages}}}|access-date=Retrieved {{#time:j F Y|{{{access-date}}}}}."
        "|#default={{{" + f + "}}}}} }}}}"
        for f in _CITE_FIELDS) + "</includeonly>",
    "Navbox": """<includeonly>{| class="navbox" style="width:100%"
! colspan="2" | {{{title}}}
|-
| {{{list1|}}}
|-
| {{{list2|}}}
|-
| {{{list3|}}}
|}</includeonly>""",
    "Convert": """<includeonly>{{{1}}} {{{2}}} ({{#expr:{{{1}}}*{{#switch:{{{2}}}|km=0.621371|m=3.28084|kg=2.20462|#default=1}} round 1}} {{#switch:{{{2}}}|km=mi|m=ft|kg=lb|#default={{{2}}}}})</includeonly>""",
}
INFOBOX_FIELDS = 24
TEMPLATES["Infobox"] = TEMPLATES["Infobox"].replace("{{#for_fields}}", "\n".join(
    f"{{{{#if:{{{{{{field{i}|}}}}}}|\n{{{{!}}}}-\n! Field {i}\n{{{{!}}}} {{{{{{field{i}}}}}}}}}}}" for i in range(1, INFOBOX_FIELDS + 1)))

WORDS = ("the of and in to a is was for on as by with from at that which an were his are be this it or had "
         "first also new after city river county state school war party government system village species "
         "population district university album film season team league music game series station church").split()


def _sentence(rng: random.Random, titles: list[str]) -> str:
    n = rng.randint(8, 24)
    out = []
    for _ in range(n):
        if titles and rng.random() < 0.06:
            out.append(f"[[{rng.choice(titles)}]]")
        else:
            out.append(rng.choice(WORDS))
    return " ".join(out).capitalize() + "."


def _cite(rng: random.Random, k: int) -> str:
    return ("<ref>{{Cite|author=Author " + str(k) + "|date=" + str(rng.randint(1950, 2024)) + "|title=Source number " + str(k)
            + "|url=http://example.org/" + str(rng.randrange(10**6)) + "|journal=Journal " + str(k % 17) + "|volume=" + str(k % 40)
            + "|pages=" + str(rng.randint(1, 300)) + "|access-date=2024-0" + str(1 + k % 9) + "-1" + str(k % 10) + "}}</ref>")


@dataclass
class Page:
    title: str
    text: str
    # what it was made of, for the docs and the trace generator
    refs: int = 0
    sections: int = 0


def generate_pages(n: int, seed: int = 1) -> list[Page]:
    """`n` articles whose prose length is lognormal (median about 4 KB,
    sigma 1.1, 300 B to 250 KB: Wikipedia's articles run from stubs to long
    featured articles, with a median of a few KB), and whose render costs
    follow from what they contain, as on Wikipedia: one citation template per
    reference (about one per 400 bytes of prose, each a nested template with
    COinS metadata), an infobox on 60% of pages (up to 24 fields, each a
    ParserFunctions branch), 0-3 navboxes, a table on 3% of paragraphs, unit
    conversions (#expr). With the templates the wikitext's median is about
    8.6 KB. What a page costs to render, from the cache and anew, is measured by
    bench/wiki_costs.py (docs/wiki.md gives the spread). Deterministic for a
    seed. Titles are `Article 00000` on (bench/wiki_trace.py's page_title)."""
    if n < 1:
        raise ValueError("generate_pages: n must be >= 1")
    rng = random.Random(seed)
    titles = [f"Article {i:05d}" for i in range(n)]
    pages = []
    for i, title in enumerate(titles):
        size = min(250_000, max(300, int(rng.lognormvariate(math.log(4000), 1.1))))
        parts, refs, sections = [], 0, 0
        if rng.random() < 0.6:
            fields = "|".join(f"field{j}={rng.choice(WORDS)} {rng.randint(1, 9999)}" for j in range(1, rng.randint(6, INFOBOX_FIELDS) + 1))
            parts.append("{{Infobox|name=" + title + "|" + fields + "}}")
        length = 0
        while length < size:
            if length and rng.random() < 0.08:
                sections += 1
                parts.append(f"\n== Section {sections} ==\n")
            para = " ".join(_sentence(rng, titles) for _ in range(rng.randint(2, 6)))
            if rng.random() < 0.1:
                para += " It is {{Convert|" + str(rng.randint(1, 900)) + "|" + rng.choice(["km", "m", "kg"]) + "}} long."
            length += len(para)
            while refs * 400 < length:
                refs += 1
                para += _cite(rng, refs)
            parts.append(para + "\n\n")
            if rng.random() < 0.03:
                rows = "\n".join(f"|-\n| {rng.choice(WORDS)} || {rng.randint(1, 10**6)} || {rng.choice(WORDS)}" for _ in range(rng.randint(5, 40)))
                parts.append('{| class="wikitable"\n! Name !! Value !! Note\n' + rows + "\n|}\n")
        if refs:
            parts.append("\n== References ==\n<references />\n")
        for k in range(rng.choice([0, 0, 1, 1, 2, 3])):
            lists = "|".join(f"list{j}=" + " · ".join(f"[[{rng.choice(titles)}]]" for _ in range(rng.randint(10, 40))) for j in (1, 2, 3))
            parts.append("{{Navbox|title=Topic " + str(k) + "|" + lists + "}}\n")
        parts.append(f"[[Category:Group {i % 50}]]\n")
        pages.append(Page(title, "".join(parts), refs, sections))
    return pages


def dump_xml(pages: list[Page]) -> str:
    """A MediaWiki XML export (schema 0.11) of the templates and `pages`, for importDump.php."""
    out = ['<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" xml:lang="en">']

    def page(title: str, ns: int, text: str) -> None:
        out.append(f"<page><title>{escape(title)}</title><ns>{ns}</ns><revision><timestamp>2024-01-01T00:00:00Z</timestamp>"
                   f"<contributor><username>Importer</username></contributor><model>wikitext</model><format>text/x-wiki</format>"
                   f'<text xml:space="preserve">{escape(text)}</text></revision></page>')

    for name, text in TEMPLATES.items():
        page(f"Template:{name}", 10, text)
    for p in pages:
        page(p.title, 0, p.text)
    out.append("</mediawiki>\n")
    return "\n".join(out)


def page_path(title: str) -> str:
    """The URL path of a page view, as in the paper's trace (`/wiki/index.php?title=...`)."""
    return f"{SCRIPT_PATH}/index.php?title={title.replace(' ', '_')}"


# --- the template wiki --------------------------------------------------------------

# Appended to install.php's LocalSettings.php. Every replica is a copy, so
# nothing here names a path: the data directory is beside the settings file.
EXTRA_SETTINGS = """
# --- huntlb (harness/wiki.py) ---
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


def shared_dir(procs: Procs, prefix: str = "huntlb-wiki-") -> Path:
    """A new folder under /tmp that Apache's children can read (as root they
    run as nobody, and a test's own tmp_path is 0700), removed by `procs`'
    cleanups after its processes are stopped."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    procs.cleanups.append(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


def _check_traversable(path: Path) -> None:
    """Apache's children (nobody, as root) must reach `path`: fail clearly if a parent is closed to others."""
    if os.geteuid() != 0:
        return
    for p in [path, *path.parents]:
        if p.exists() and not p.stat().st_mode & 0o001:
            raise PermissionError(f"{p} is closed to others (mode {p.stat().st_mode & 0o777:o}): Apache's children, "
                                  f"running as nobody, could not read the wiki under {path}; use harness.wiki.shared_dir()")


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
        _check_traversable(work)
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


# --- Apache ----------------------------------------------------------------------

APACHE_CONF = """\
# One replica's Apache (harness/wiki.py): prefork with a fixed pool, as seed
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
    _check_traversable(wiki_dir)
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


# --- CPU limits --------------------------------------------------------------------------

CGROUP_ROOT = Path("/sys/fs/cgroup")


class CpuLimit:
    """A CPU limit of `cores` for one replica: cgroup v2 `cpu.max` where the
    unified hierarchy has the cpu controller, else cgroup v1's
    `cpu.cfs_quota_us`/`cpu.cfs_period_us` (what this project's machines
    have: a hybrid layout whose v2 tree holds no cpu controller). `period_us`
    is short (20 ms) because a render that needs several periods of a small
    quota is stretched by whole periods (issue 32's feasibility check: 100 ms
    periods at 0.15 core made a 25-33 ms render take 196 ms)."""

    def __init__(self, name: str, cores: float, period_us: int = 20_000, root: Path = CGROUP_ROOT):
        if not (cores > 0):
            raise ValueError(f"CpuLimit: cores must be > 0, got {cores}")
        self.cores, self.period_us = cores, period_us
        quota = max(1000, int(cores * period_us))
        v2 = root / "cgroup.controllers"
        if v2.exists() and "cpu" in v2.read_text().split():
            self.kind, self.dir = "v2", root / name
            self.dir.mkdir(exist_ok=True)
            (self.dir / "cpu.max").write_text(f"{quota} {period_us}\n")
        elif (root / "cpu" / "cpu.cfs_quota_us").exists():
            self.kind, self.dir = "v1", root / "cpu" / name
            self.dir.mkdir(exist_ok=True)
            (self.dir / "cpu.cfs_period_us").write_text(f"{period_us}\n")
            (self.dir / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        else:
            raise RuntimeError(f"no cgroup cpu controller at {root} (neither v2 cpu.max nor v1 cpu.cfs_quota_us)")
        self.procs_file = self.dir / "cgroup.procs"

    @staticmethod
    def available(root: Path = CGROUP_ROOT) -> str | None:
        """None if a CpuLimit can be made here, else why not."""
        v2 = root / "cgroup.controllers"
        if v2.exists() and "cpu" in v2.read_text().split():
            return None if os.access(root, os.W_OK) else f"{root} (cgroup v2) is not writable"
        v1 = root / "cpu"
        if (v1 / "cpu.cfs_quota_us").exists():
            return None if os.access(v1, os.W_OK) else f"{v1} (cgroup v1) is not writable"
        return f"no cgroup cpu controller under {root}"

    def usage_s(self) -> float:
        """CPU time used by the group so far, in seconds."""
        if self.kind == "v2":
            for line in (self.dir / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec"):
                    return int(line.split()[1]) / 1e6
            return 0.0
        acct = CGROUP_ROOT / "cpuacct" / self.dir.name / "cpuacct.usage"
        if acct.exists():
            return int(acct.read_text()) / 1e9
        # v1 without a cpuacct group of the same name: throttling stats only
        return float("nan")

    def throttled(self) -> tuple[int, float]:
        """(periods throttled, seconds throttled) so far."""
        stat = dict(line.split() for line in (self.dir / "cpu.stat").read_text().splitlines() if len(line.split()) == 2)
        if self.kind == "v2":
            return int(stat.get("nr_throttled", 0)), int(stat.get("throttled_usec", 0)) / 1e6
        return int(stat.get("nr_throttled", 0)), int(stat.get("throttled_time", 0)) / 1e9

    def remove(self) -> None:
        """rmdir the group once its processes are gone (bounded: 50 tries, 5 s)."""
        for _ in range(50):
            try:
                self.dir.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


# --- a replica ------------------------------------------------------------------------------

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
