"""The Wikipedia replay's real replica (docs/wiki.md), smoke-tested: MediaWiki 1.39
under its own prefork Apache, copied from a template wiki, serving a real
rendered page through `huntlb-agent`, whose load is read from that Apache's
scoreboard. `make setup` installs MediaWiki (38 s on a new machine), so a
missing MediaWiki fails here, as a missing Apache fails test_apache.py.

The template (12 generated pages) is built into a folder of the test's own,
not the bench's cache: about 5 s, the whole test under 20 s."""

import os
import re
import signal
import threading
import time

import pytest
from harness import Procs, metrics, request, wait_until
from harness import wiki

OFFER = {"hunt-offer": "1", "hunt-target": "1"}


@pytest.fixture
def template(procs, addrs):
    missing = wiki.mediawiki_missing()
    if missing:
        pytest.fail(missing)
    return wiki.build_template(pages=12, seed=7, cache=wiki.shared_dir(procs), procs=procs, addrs=addrs)


def parser_cache_saved(template, title: str) -> str:
    """When the template saved `title`'s parser cache entry (UTC, YYYYmmddHHMMSS),
    from its SQLite: the entry expires $wgParserCacheExpireTime (365 days) later."""
    import datetime
    import sqlite3
    with sqlite3.connect(f"file:{template.dir / 'data' / 'wiki.sqlite'}?mode=ro", uri=True) as db:
        (pid,) = db.execute("SELECT page_id FROM page WHERE page_namespace = 0 AND page_title = ?", (title.replace(" ", "_"),)).fetchone()
    with sqlite3.connect(f"file:{template.dir / 'data' / 'wikicache.sqlite'}?mode=ro", uri=True) as db:
        (exp,) = db.execute("SELECT exptime FROM objectcache WHERE keyname LIKE ?", (f"%:pcache:idhash:{pid}-0!canonical",)).fetchone()
    at = datetime.datetime.strptime(exp, "%Y%m%d%H%M%S") - datetime.timedelta(days=365)
    return at.strftime("%Y%m%d%H%M%S")


def parser_cache_time(html: bytes) -> str:
    """The timestamp MediaWiki leaves in a page rendered from (or into) its parser cache."""
    m = re.search(rb"Saved in parser cache with key \S+ and timestamp (\d{14})", html)
    assert m, "no parser cache comment in the page"
    return m.group(1).decode()


def test_replica_serves_a_rendered_page_through_the_agent_and_its_scoreboard_load(procs, addrs, template):
    # 6 workers (2 held, a render, the agent's poll and ours, and one spare), SR_2: refuse an offer once 2 or more are busy
    title = template.pages[3]
    # When the template's render of the page was saved; a render made on the
    # replica would carry a later second (waited for, bounded).
    saved = parser_cache_saved(template, title)
    wait_until(lambda: time.strftime("%Y%m%d%H%M%S", time.gmtime()) > saved, timeout=3, what="a second after the template's save")
    r = wiki.start_replica(procs, addrs, template, workers=6, policy="static:2", apache_poll_ms=10, hold=True)

    # A real page, rendered by MediaWiki (templates expanded, references
    # numbered), through the agent, from the copy's warm parser cache: the
    # copy kept the template's LocalSettings.php mtime, so the entry saved
    # while warming the template is still valid here.
    status, h, html = request(r.agent, "GET", wiki.page_path(title), headers=OFFER)
    assert status == 200, html[:500]
    assert h.get("hunt-served-by") == r.id
    assert b'class="mw-parser-output"' in html and title.encode() in html
    assert b'class="infobox"' in html or b'class="reference"' in html, "templates were not expanded"
    assert b"{{Cite" not in html and b"{{#if" not in html
    # (a render's timestamp is when it began, its save when it ended: a second may pass between)
    assert parser_cache_time(html) <= saved, "rendered on the copy: the template's warm parser cache was not used"
    assert (r.dir / "LocalSettings.php").stat().st_mtime == template.settings.stat().st_mtime
    # a static file of the skin, from the same Apache
    assert request(r.agent, "GET", f"{wiki.SCRIPT_PATH}/resources/assets/poweredby_mediawiki_88x31.png", headers=OFFER)[0] == 200

    # The agent's load is the scoreboard's, not its own count: requests held
    # straight at Apache (not through the agent) show up in huntlb_busy.
    wait_until(lambda: metrics(r.admin)["huntlb_busy"] == 0, what="idle scoreboard")
    held = []
    for k in (1, 2):
        t = threading.Thread(target=request, args=(r.apache.addr, "GET", "/hold.php?ms=4000"), daemon=True)
        t.start()
        held.append(t)
        wait_until(lambda: metrics(r.admin)["huntlb_busy"] == k, timeout=5, what=f"huntlb_busy == {k}")
        # our status request is one more busy worker (the agent's scoreboard read is none)
        wait_until(lambda: r.apache.busy_workers() - 1 == k, timeout=2, what=f"Apache's BusyWorkers - 1 == {k} (agent and Apache agree)")
    assert metrics(r.admin)["huntlb_inflight"] == 0, "the held requests never passed through the agent"
    # at 2 busy workers SR_2 refuses an offer, and a final is served anyway
    status, h, _ = request(r.agent, "GET", wiki.page_path(title), headers=OFFER)
    assert status == 425, f"offer at 2 busy workers: {status}"
    status, _, html = request(r.agent, "GET", wiki.page_path(title), headers={"hunt-offer": "1", "hunt-target": "2"})
    assert status == 200 and b"mw-parser-output" in html
    for t in held:
        t.join(timeout=10)
    wait_until(lambda: metrics(r.admin)["huntlb_busy"] == 0, timeout=5, what="scoreboard back to idle")
    # accepted again once idle (a poll may still see a worker finishing the final's render: bounded retries)
    wait_until(lambda: request(r.agent, "GET", wiki.page_path(title), headers=OFFER)[0] == 200, timeout=5, every=0.2,
               what="an offer accepted once the scoreboard is idle")
    m = metrics(r.admin)
    ok, failed = m['huntlb_apache_polls_total{result="ok"}'], m['huntlb_apache_polls_total{result="failed"}']
    # the scoreboard is read from memory: no poll fails while Apache runs
    assert ok > 10 and failed == 0, f"scoreboard polls: {ok} ok, {failed} failed"
    assert "PHP Fatal" not in r.apache.error_log()


def hold(addr: str, ms: int, out: list | None = None) -> threading.Thread:
    """A request held `ms` in one of Apache's workers (hold.php), straight at Apache, in a thread."""
    def run():
        res = request(addr, "GET", f"/hold.php?ms={ms}", timeout=30)[0]
        if out is not None:
            out.append(res)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_scoreboard_load_follows_apaches_busy_workers_through_saturation(procs, addrs, template):
    """The agent's `huntlb_busy`, read from Apache's scoreboard in shared
    memory, is Apache's own busy-worker count at every level: 1 to W-1 (as
    mod_status reports it, less its own request), W with every worker held
    and more requests queued behind them (when mod_status cannot answer at
    all, and a status poll would have stalled), and 0 again after."""
    W, Q = 4, 3
    r = wiki.start_replica(procs, addrs, template, workers=W, policy=f"static:{W}", apache_poll_ms=5, hold=True)
    busy = lambda: metrics(r.admin)["huntlb_busy"]  # noqa: E731
    wait_until(lambda: busy() == 0, what="idle scoreboard")
    assert "Apache scoreboard opened" in r.agent_proc.log()
    # every hold ends at the same moment, so the pool stays saturated until then
    end = time.monotonic() + 7.0
    held = []
    for k in range(1, W):
        held.append(hold(r.apache.addr, int((end - time.monotonic()) * 1000)))
        wait_until(lambda: busy() == k, timeout=3, what=f"huntlb_busy == {k}")
        # mod_status counts its own request: one more; and the worker that answered
        # the previous status request may still be closing it for a moment (CI saw k+1 once)
        wait_until(lambda: r.apache.busy_workers() - 1 == k, timeout=2, every=0.1, what=f"Apache's BusyWorkers - 1 == {k} held")
        # (and its worker is busy closing that request a moment after answering it: counted, then gone)
        wait_until(lambda: busy() == k, timeout=2, what=f"huntlb_busy == {k} after the status request")
    # the last worker, and Q more requests queued in the listen backlog behind it
    held.append(hold(r.apache.addr, int((end - time.monotonic()) * 1000)))
    wait_until(lambda: busy() == W, timeout=3, what=f"huntlb_busy == {W} (saturated)")
    queued_done: list = []
    queued = [hold(r.apache.addr, 300, queued_done) for _ in range(Q)]
    # mod_status has no worker left to answer: a status request waits in the queue too
    t0 = time.monotonic()
    with pytest.raises(OSError):  # socket.timeout is an OSError
        request(r.apache.addr, "GET", "/server-status?auto", timeout=1.0)
    assert time.monotonic() - t0 >= 0.9
    # saturated: exactly W, the queue not counted, read after read (the agent polls every 5 ms)
    seen = []
    while time.monotonic() < end - 1.5:
        seen.append(busy())
        time.sleep(0.05)
    assert len(seen) >= 20 and set(seen) == {W}, f"huntlb_busy while saturated: {sorted(set(seen))} over {len(seen)} reads"
    assert not queued_done, "a queued request was served while every worker was held"
    # released: the queue (and the timed-out status request) run, then nothing
    for t in held + queued:
        t.join(timeout=15)
    assert queued_done == [200] * Q
    wait_until(lambda: busy() == 0, timeout=5, what="huntlb_busy back to 0")
    # back to 0 by Apache's own count too, and one worker at a level again
    wait_until(lambda: r.apache.busy_workers() - 1 == 0, timeout=2, what="Apache's BusyWorkers - 1 == 0")
    t = hold(r.apache.addr, 1500)
    wait_until(lambda: busy() == 1, timeout=3, what="huntlb_busy == 1 again")
    wait_until(lambda: r.apache.busy_workers() - 1 == 1, timeout=2, every=0.1, what="Apache's BusyWorkers - 1 == 1 again")
    t.join(timeout=10)
    wait_until(lambda: busy() == 0, timeout=5, what="huntlb_busy back to 0 again")
    m = metrics(r.admin)
    ok, failed = m['huntlb_apache_polls_total{result="ok"}'], m['huntlb_apache_polls_total{result="failed"}']
    assert ok > 500 and failed == 0, f"scoreboard polls: {ok} ok, {failed} failed"
    assert m["huntlb_inflight"] == 0, "nothing went through the agent: the count is Apache's"

    # Apache stops: its scoreboard goes with it; the agent warns and counts failed reads
    polls_failed = lambda: metrics(r.admin)['huntlb_apache_polls_total{result="failed"}']  # noqa: E731
    r.apache.proc.stop()
    wait_until(lambda: polls_failed() > 10, timeout=5, what="failed scoreboard reads once Apache stopped")
    assert "Apache scoreboard unreadable" in r.agent_proc.log()
    # started again (a new segment under the same name): read again, by name
    apache = wiki.start_apache(procs, r.host, r.dir, workers=W, hold=True, name="restarted")
    wait_until(lambda: "Apache scoreboard read again" in r.agent_proc.log(), timeout=5, what="the agent reading the new scoreboard")
    failed = polls_failed()
    t = hold(apache.addr, 1500)
    wait_until(lambda: busy() == 1, timeout=3, what="huntlb_busy == 1 on the restarted Apache")
    t.join(timeout=10)
    wait_until(lambda: busy() == 0, timeout=5, what="huntlb_busy back to 0 on the restarted Apache")
    assert polls_failed() == failed


def test_agent_refuses_a_missing_or_foreign_scoreboard_at_start(procs, addrs, tmp_path):
    """A scoreboard that is not there, or not Apache 2.4's layout, stops the
    agent at start with an error naming the key and the file."""
    import struct
    missing = tmp_path / "run" / "scoreboard"
    foreign = tmp_path / "foreign"
    # a consistent APR header, limits of 8 prefork workers, 32 bytes short of Apache 2.4's 3072
    foreign.write_bytes(struct.pack("<Qii", 3040, 8, 1) + bytes(3040 - 16))
    for path, why in ((missing, "not found"), (foreign, "another Apache version")):
        p, _, _ = procs.agent(addrs.host(), "127.0.0.1:9", wait=False, load="apache", apache_scoreboard=str(path))
        assert p.wait(10) == 1
        log = p.log()
        assert "config key `apache_scoreboard`" in log and str(path) in log and why in log, log


def test_a_stopped_replica_leaves_no_scoreboard_in_shared_memory(addrs, template, tmp_path):
    """Apache's scoreboard lives in /dev/shm (ShM.*) and outlives an Apache
    killed by the teardown's SIGKILL: the replica's own cleanup removes it."""
    (tmp_path / "own").mkdir()
    own = Procs(tmp_path / "own")
    try:
        before = set(wiki.SHM.glob("ShM.*"))
        r = wiki.start_replica(own, addrs, template, workers=2, policy="always")
        made = set(wiki.SHM.glob("ShM.*")) - before
        assert len(made) == 1, made  # its scoreboard, which its agent reads
        assert metrics(r.admin).get('huntlb_apache_polls_total{result="failed"}', 0) == 0
        r.apache.proc.signal(signal.SIGKILL)  # no Apache cleanup at all
    finally:
        own.stop_all()
    assert not any(f.exists() for f in made)


def test_cpu_limit_caps_a_replica(procs, addrs, template):
    """A replica's CPU limit holds: 2 workers rendering flat out for 2 s
    under a 0.25-core limit use at most about 0.25 core (and are throttled)."""
    why = wiki.CpuLimit.available()
    if why:
        pytest.skip(f"no CPU limit on this machine: {why}")
    r = wiki.start_replica(procs, addrs, template, workers=2, cores=0.25, policy="static:32", hold=True)
    assert r.cpu is not None
    # the Apache master and all its children are in the group
    pids = set(r.cpu.procs_file.read_text().split())
    assert str(r.apache.proc.pid) in pids and len(pids) >= 3, pids
    before, cpu0, t0 = r.cpu.throttled(), group_cpu_s(r.cpu), time.monotonic()
    stop = t0 + 2.0
    titles = template.pages

    def load():
        i = 0
        while time.monotonic() < stop and i < 1000:
            # a new render every time (an uncached parse), as CPU-bound as MediaWiki gets
            request(r.apache.addr, "GET", f"{wiki.SCRIPT_PATH}/api.php?action=parse&format=json&title=X&text=%7B%7B:{titles[i % len(titles)].replace(' ', '_')}%7D%7D", timeout=30)
            i += 1
    threads = [threading.Thread(target=load, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=40)
    used = (group_cpu_s(r.cpu) - cpu0) / (time.monotonic() - t0)
    periods, _ = r.cpu.throttled()
    assert periods > before[0], "the replica was never throttled: the limit is not applied"
    # two workers rendering flat out would take up to 2 cores; the limit is 0.25
    assert 0.05 < used < 0.25 * 1.3, f"the replica used {used:.2f} core under a 0.25-core limit"


def group_cpu_s(cpu) -> float:
    """User + system CPU seconds of the processes in a replica's cgroup (/proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in cpu.procs_file.read_text().split():
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick
