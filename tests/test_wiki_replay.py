"""The Wikipedia replay's arithmetic (bench/wiki_replay.py), on rows made up
here: which request a loadgen line is, per class times, the day's bins, and
the report rendered from the committed data (measuring nothing)."""

import math

import wiki_replay
from benchlib import wikitrace
from benchlib.reports import RESULTS, read_data

T = {"day_seconds": 10.0, "bins": 5}


def test_outcomes_join_each_loadgen_line_with_its_trace_request(tmp_path):
    trace = [(0.0, wikitrace.view_path(1)), (0.5, "/wiki/skins/x.png"), (1.0, wikitrace.render_path(2))]
    f = tmp_path / "r.requests"
    # the loadgen writes in schedule order, INDEX OFFSET_US LATENCY_US STATUS; 0 is an error
    f.write_text("0 1000 250000 200\n1 500000 3000 200\n2 1000000 0 0\n")
    assert wiki_replay.outcomes(f, trace) == [(0.001, "page", 250.0, 200), (0.5, "static", 3.0, 200),
                                              (1.0, "render", 0.0, 0)]


def test_quantile_is_nearest_rank():
    xs = [1.0, 2.0, 3.0, 4.0]
    assert [wiki_replay.quantile(xs, q) for q in (0.25, 0.5, 0.75, 0.99, 1.0)] == [1.0, 2.0, 3.0, 4.0, 4.0]
    assert math.isnan(wiki_replay.quantile([], 0.5))


def test_summarize_counts_errors_apart_and_bins_page_times_by_the_hour_they_were_sent():
    rows = [(0.5, "page", 100.0, 200), (1.0, "page", 300.0, 200), (1.5, "static", 2.0, 200),
            (4.5, "page", 50.0, 200), (9.9, "page", 900.0, 503), (9.5, "render", 700.0, 200)]
    s = wiki_replay.summarize(rows, {"valid": True, "refused": 4, "forwarded": 1}, T)
    # a failed page is an error, not a page time
    assert s["errors"] == 1 and s["classes"]["page"]["n"] == 3
    assert s["classes"]["page"]["p50_ms"] == 100.0 and s["classes"]["page"]["p99_ms"] == 300.0
    assert s["classes"]["render"]["n"] == 1 and "static" in s["classes"]
    # 5 bins of 2 s: sends per second in each, page deciles where there were pages
    assert s["samples"]["rate"] == [1.5, 0.0, 0.5, 0.0, 1.0]
    dec = s["samples"]["page_deciles"]
    assert dec[0][4] == 100.0 and dec[0][8] == 300.0 and dec[2] == [50.0] * 9
    assert dec[1] is None and dec[4] is None  # the last bin's only page failed
    assert s["refused"] == 4 and s["forwarded"] == 1 and len(s["cdf"]) == 99


def test_the_report_renders_from_its_committed_data():
    d = read_data("wiki-replay")
    kept = d.get("shown")
    assert wiki_replay.report(d) == (RESULTS / "wiki-replay.md").read_text()
    assert d["shown"] == kept, "bench/data/wiki-replay.json: \"shown\" is stale: run `bench/wiki_replay.py report`"
