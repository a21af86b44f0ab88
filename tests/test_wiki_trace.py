"""The Wikipedia-like trace (bench/wiki_trace.py): its shape is the one asked
for (shares, Zipf popularity, the daily cycle's trough at 08:00 UTC), it is
the same for the same seed (every strategy replays one trace), bad input is
refused by name, and `huntlb-loadgen --trace` replays it: every request sent,
at its own path."""

import json
import subprocess
import sys
from collections import Counter

import pytest
from harness import app_stats, binary

from benchlib import wikitrace as wt  # bench/ is on pytest.ini's pythonpath


def test_shares_popularity_and_day_follow_the_model():
    tr = wt.generate(pages=500, mean_rate=200, day_seconds=240, seed=3, zipf=1.0, shares=(0.5, 0.4, 0.1), peak_ratio=2.0)
    s = wt.summarize(tr, 500, 240)
    assert abs(s["requests"] - 200 * 240) < 4 * (200 * 240) ** 0.5
    assert abs(s["shares"]["page"] - 0.5) < 0.01 and abs(s["shares"]["static"] - 0.4) < 0.01 and abs(s["shares"]["render"] - 0.1) < 0.01
    # Zipf(1) over 500 pages: the top 1% (5 pages) take H(5)/H(500) = 34% of views
    assert 0.31 < s["top_1pct_pages_share_of_views"] < 0.37
    # the day: 144 ten-minute bins, lowest around 08:00, highest around 20:00, ratio about 2
    rates = s["rate_per_bin"]
    assert len(rates) == 144
    smooth = [sum(rates[(i + k) % 144] for k in range(-6, 7)) / 13 for i in range(144)]
    assert abs(smooth.index(min(smooth)) - 48) <= 6 and abs(smooth.index(max(smooth)) - 120) <= 6
    assert 1.7 < max(smooth) / min(smooth) < 2.3
    # popularity is not size: the most viewed page is not simply page 0
    top = Counter(p for _, p in tr if wt.classify(p) == "page").most_common(1)[0][0]
    assert top == wt.view_path(top_rank_page(500, 3))


def top_rank_page(pages, seed):
    import random
    order = list(range(pages))
    random.Random(seed ^ 0x9A6E).shuffle(order)
    return order[0]


def test_same_seed_same_trace_and_flatter_popularity_with_lower_alpha():
    a = wt.generate(300, 50, 60, seed=9)
    assert a == wt.generate(300, 50, 60, seed=9)
    assert a != wt.generate(300, 50, 60, seed=10)
    steep = wt.summarize(wt.generate(300, 300, 60, seed=9, zipf=1.2), 300, 60)["top_1pct_pages_share_of_views"]
    flat = wt.summarize(wt.generate(300, 300, 60, seed=9, zipf=0.6), 300, 60)["top_1pct_pages_share_of_views"]
    assert steep > 2 * flat


@pytest.mark.parametrize("args, says", [
    (["--mean-rate", "10", "--shares", "0.5,0.5,0.5"], "--shares"),
    (["--mean-rate", "0"], "--mean-rate"),
    (["--mean-rate", "10", "--pages", "0"], "--pages"),
])
def test_bad_input_is_refused_by_name(tmp_path, args, says):
    r = subprocess.run([sys.executable, "bench/wiki_trace.py", *args, "--out", str(tmp_path / "t.txt")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert not (tmp_path / "t.txt").exists()


def test_loadgen_replays_the_trace_request_for_request(procs, addrs, tmp_path):
    out = tmp_path / "trace.txt"
    r = subprocess.run([sys.executable, "bench/wiki_trace.py", "--pages", "50", "--mean-rate", "150", "--day-seconds", "2",
                        "--seed", "5", "--out", str(out)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    summary = json.loads(out.with_suffix(".json").read_text())
    lines = [ln.split(" ", 1) for ln in out.read_text().splitlines() if not ln.startswith("#")]
    assert len(lines) == summary["requests"] > 200
    _, app = procs.workload(addrs.host(), demand="const:0", workers=64, cores=64)
    rep_path, each_path = tmp_path / "rep.json", tmp_path / "each.txt"
    lg = subprocess.run([binary("huntlb-loadgen"), "--target", f"http://{app}/", "--trace", str(out), "--json", str(rep_path),
                         "--requests", str(each_path), "--max-lateness-us", "20000"], capture_output=True, text=True, timeout=60)
    assert lg.returncode == 0, lg.stdout + lg.stderr
    rep = json.loads(rep_path.read_text())
    assert rep["scheduled"] == rep["completed"] == len(lines) and rep["errors"] == 0
    # --requests: one line per request, in trace order, at the trace's own send times
    each = [list(map(int, ln.split())) for ln in each_path.read_text().splitlines()]
    assert [e[0] for e in each] == list(range(len(lines)))
    assert all(abs(e[1] - round(float(t) * 1e6)) <= 1 for e, (t, _) in zip(each, lines))
    assert all(e[3] == 200 and 0 < e[2] < 5_000_000 for e in each)
    assert "requests" not in rep, "the per-request records belong in --requests, not the JSON report"
    # the app saw each path as often as the trace has it (its counts are by path, without the query)
    want = Counter(p.strip().split("?")[0] for _, p in lines)
    got = app_stats(app)["paths"]
    assert {p: got.get(p, 0) for p in want} == dict(want)
