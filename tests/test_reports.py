"""The committed reports are what their scenarios render from the committed data
(bench/data/, read by benchlib.data), measuring nothing: a report template
(bench/reports/), a scenario's rendering code or a data file changed alone fails
here. And the data files are in their compact form: read and written again, each
gives back its own bytes.

A report's numbers grep to its data, so a reader can find where each came
from: rendering stores what a report shows in its data ("shown"), and every
decimal number of a report is in its data file's text, or else in its
templates' prose."""

import gzip
import json
import re
from pathlib import Path

import pytest

import agent_overhead
import cluster_report
import elb
import haproxy_ablation
import haproxy_profile
import k8s_events_report
import llm_emulator
import many_fronts
import many_fronts_sim
import proxy_overhead
import reliability
import sim_proxies
import simulate
import srlb
import throughput
import tier_cost_report
from benchlib import data as rundata
from benchlib.reports import DATA, RESULTS, read_data
from benchlib.render import TEMPLATES, render
from benchlib.runs import load

ROOT = Path(__file__).resolve().parents[1]
# A decimal number as a reader would grep it: whole, not a piece of a longer one.
DECIMAL = re.compile(r"(?<![\d.])\d+\.\d+(?!\d)")


def committed(name: str) -> str:
    return (RESULTS / f"{name}.md").read_text()


def renders(name: str, report, data: dict) -> None:
    """report(data) is the committed report, and the "shown" data kept is what
    it shows now (a stale one would grep to numbers the report no longer has)."""
    kept = data.get("shown")
    assert report(data) == committed(name)
    assert data.get("shown") == kept, f"bench/data/{name}.json: \"shown\" is stale: re-render the report from its data"


def report_of(data: Path) -> Path | None:
    """The report rendered from bench/data/NAME.json: docs/results/NAME.md, or
    docs/NAME.md (docs/reliability.md); None before it is written."""
    name = data.name.removesuffix(".json")
    return next((p for p in (RESULTS / f"{name}.md", ROOT / "docs" / f"{name}.md") if p.exists()), None)


def not_in_data(report: str, data: str, name: str, prose: bool = True) -> list[str]:
    """The decimal numbers of `report` found whole neither in `data` nor in the
    prose of its templates (bench/reports/NAME.md, NAME.*.md: numbers written
    there are text, found by grep in the template; prose=False: not even there)."""
    prose = "".join(t.read_text() for t in sorted(TEMPLATES.glob(f"{name}*.md"))) if prose else ""
    found = _whole_numbers(data) | _whole_numbers(prose)
    return [n for n in DECIMAL.findall(report) if n not in found]


def _whole_numbers(text: str) -> set[str]:
    """Every string of digits and dots found whole in `text`: starting where
    no digit or dot precedes it, and followed by no digit (so 0.85 is in
    "0.85." and in "0.85e-3", not in "0.857" nor in "10.85"). The runs of
    digits and dots, each cut before each of its dots and at its end: one pass
    over the text, where a search per number took 25 s on the biggest data."""
    out = set()
    for run in re.findall(r"(?<![\d.])[\d.]+", text):
        out.add(run)
        out.update(run[:i] for i, c in enumerate(run) if c == ".")
    return out


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.name)
def test_data_file_is_compact_and_reads_back_to_its_bytes(path, tmp_path):
    text = path.read_text()
    if not text.startswith("{\n"):
        # Not written by benchlib.data: runs as JSON Lines (bench/many_fronts.py), a run a line.
        assert all(isinstance(json.loads(line), dict) for line in text.splitlines()), f"{path.name}: not a run per line"
        return
    again = tmp_path / path.name
    rundata.write(again, rundata.read(path))
    assert again.read_bytes() == path.read_bytes()
    bulk = rundata.bulk_path(path)
    assert rundata.bulk_path(again).exists() == bulk.exists()
    if bulk.exists():
        assert gzip.decompress(rundata.bulk_path(again).read_bytes()) == gzip.decompress(bulk.read_bytes())
    # a line per run: each of them whole on a line of its own
    runs = rundata.split(rundata.read(path))[0].get("runs")
    if isinstance(runs, list):
        lines = {line.strip().removesuffix(",") for line in path.read_text().splitlines()}
        assert all(json.dumps(r, ensure_ascii=False) in lines for r in runs)


def test_many_fronts_reports_render_from_their_data():
    shown = {}
    assert many_fronts.text(many_fronts.load(), shown) == committed("many-fronts")
    assert shown == many_fronts.stored_shown(), "bench/data/many-fronts.json: its \"shown\" lines are stale: run its `report`"
    d = read_data("many-fronts-sim")
    d["plot"] = "many-fronts-sim.png" if (RESULTS / "many-fronts-sim.png").exists() else None
    renders("many-fronts-sim", many_fronts_sim.report, d)


def test_srlb_reports_render_from_their_data():
    d = load(DATA / "srlb-poisson.json")
    renders("srlb-poisson", lambda d: srlb.report_sweep(d, d["plan"], d.get("quick", False)), d)
    renders("many-proxies", lambda d: srlb.report_many(d, False), load(DATA / "many-proxies.json"))
    renders("vs-least", srlb.report_vs_least, load(DATA / "vs-least.json"))


def test_simulation_reports_render_from_their_data():
    renders("simulation", simulate.report, read_data("simulation"))
    d = read_data("simulation-proxies")
    d["plot"] = (RESULTS / "simulation-proxies.png").exists()
    renders("simulation-proxies", sim_proxies.report, d)


def test_elb_and_reliability_reports_render_from_their_data():
    d = read_data("elb")
    renders("elb", lambda d: elb.report(d, d.get("quick", False)), d)
    assert reliability.report(read_data("reliability")) + "\n" == (ROOT / "docs" / "reliability.md").read_text()


def test_overhead_and_throughput_reports_render_from_their_data():
    renders("proxy-throughput", throughput.report, read_data("proxy-throughput"))
    renders("agent-overhead", agent_overhead.report, read_data("agent-overhead"))
    renders("llm", llm_emulator.report, read_data("llm"))
    renders("proxy-overhead", proxy_overhead.report, read_data("proxy-overhead"))
    renders("envoy-front-cost", proxy_overhead.report_envoy, read_data("envoy-front-cost"))
    renders("haproxy-ablation", haproxy_ablation.report, read_data("haproxy-ablation"))
    renders("haproxy-profile", haproxy_profile.report, read_data("haproxy-profile"))


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.name)
def test_every_number_of_a_report_greps_to_its_data(path):
    # `git grep 0.858` finds the report's line and the data's: a
    # median, ratio or CI the report computed is in the data's "shown"
    report = report_of(path)
    if report is None:
        pytest.skip(f"{path.name}: no report rendered from it yet")
    missing = not_in_data(report.read_text(), path.read_text(), path.name.removesuffix(".json"))
    assert not missing, f"{report.relative_to(ROOT)}: {len(missing)} numbers not in {path.relative_to(ROOT)}: {sorted(set(missing))[:10]}"


def test_a_number_the_data_does_not_have_is_found_out():
    text = committed("vs-least")
    assert not_in_data(text, (DATA / "vs-least.json").read_text(), "vs-least") == []
    edited = text.replace("**0.842**", "**0.843**")
    assert edited != text
    assert not_in_data(edited, (DATA / "vs-least.json").read_text(), "vs-least") == ["0.843"]


def test_the_bulk_of_a_run_is_beside_it_not_in_it():
    # The CDFs the plots draw are in srlb-poisson.bulk.json.gz, and come back with their runs.
    text = (DATA / "srlb-poisson.json").read_text()
    assert '"cdf"' not in text
    runs = load(DATA / "srlb-poisson.json")["runs"]
    assert any(r.cdf for r in runs)


def test_render_refuses_a_missing_or_an_unused_value():
    values = {"command": "make bench", "machine": "m", "servers": 12, "reps": 1, "counts_heads": "1", "counts_aligns": "-",
              "rows": ""}
    assert render("many-proxies", values).startswith("# Many proxies")
    with pytest.raises(KeyError, match="no value for \\['rows'\\]"):
        render("many-proxies", {k: v for k, v in values.items() if k != "rows"})
    with pytest.raises(KeyError, match="no placeholder for \\['extra'\\]"):
        render("many-proxies", {**values, "extra": 1})
    shown = {}
    render("many-proxies", {**values, "rows": "| a |\n| b |"}, shown=shown)
    assert shown["rows"] == ["| a |", "| b |"] and shown["servers"] == "12"
    with pytest.raises(KeyError, match="placeholder 'servers' is already shown"):
        render("many-proxies", {**values, "servers": 96}, shown=shown)


def test_the_fleet_trust_numbers_grep_to_their_runs():
    # docs/results/fleet-trust.md was written from bench/pairs.py's and
    # bench/fleet_junk.py's output, kept in bench/data/fleet-trust/: every
    # number it quotes is in one of those files, except the row whose log was
    # not kept (it says so).
    report = (RESULTS / "fleet-trust.md").read_text()
    kept = "".join(p.read_text() for p in sorted((DATA / "fleet-trust").iterdir()))
    # rows quoting an earlier commit's report, or a run whose log was not kept
    quoted = [line for line in report.splitlines() if "its log was not kept" in line or "committed before" in line]
    assert len(quoted) == 3
    for line in quoted:
        report = report.replace(line, "")
    settings = {"0.5", "0.88"}  # a reader thread's period, the load: what was run, not what was measured
    missing = [n for n in not_in_data(report, kept, "fleet-trust") if n not in settings]
    assert not missing, f"docs/results/fleet-trust.md: numbers in no file of bench/data/fleet-trust/: {sorted(set(missing))}"


def test_the_fleet_faults_numbers_grep_to_their_runs():
    # docs/results/fleet-faults.md was written from bench/pairs.py's,
    # bench/fleet_faults.py's, bench/fleet_liar.py's and bench/forward_cost.py's
    # output, kept in bench/data/fleet-faults/: every number it quotes is in
    # one of those files, or is a setting it names.
    report = (RESULTS / "fleet-faults.md").read_text()
    kept = "".join(p.read_text() for p in sorted((DATA / "fleet-faults").iterdir()) if p.suffix == ".txt")
    settings = {"0.88", "1.5", "0.84", "2", "4", "10", "12", "32", "20", "3", "7", "100", "800", "250", "50", "38", "0.5"}
    missing = [n for n in not_in_data(report, kept, "fleet-faults") if n not in settings]
    assert not missing, f"docs/results/fleet-faults.md: numbers in no file of bench/data/fleet-faults/: {sorted(set(missing))}"


def test_the_front_scaling_tables_are_their_runs_and_its_numbers_grep_to_them():
    # docs/results/front-scaling.md is its template (bench/reports/front-scaling.md)
    # with bench/front_scaling.py --report of the runs it names, verbatim; every
    # other number of it is in those runs' printed output
    # (bench/data/front-scaling/*.txt) or is a setting, not only in its template.
    import front_scaling
    doc = (RESULTS / "front-scaling.md").read_text()
    assert front_scaling.page() == doc
    named = sorted(set(re.findall(r"`([\w.-]+\.json)`", doc)))
    assert named, "front-scaling.md names no run"
    tables = front_scaling.report([DATA / "front-scaling" / n for n in named])
    for part in tables.split("\n\n### "):
        assert part.removeprefix("### ").strip() in doc, part[:200]
    prose = doc
    for line in tables.splitlines():
        prose = prose.replace(line, "")
    kept = "".join(p.read_text() for p in sorted((DATA / "front-scaling").iterdir()) if p.suffix == ".txt")
    settings = {"0.5", "0.88", "0.95", "1.5", "3.4"}  # health interval, rho, the bar, ..., a HAProxy version
    missing = [n for n in not_in_data(prose, kept + tables, "front-scaling", prose=False) if n not in settings]
    assert not missing, f"docs/results/front-scaling.md: numbers in no run of bench/data/front-scaling/: {sorted(set(missing))}"


def test_the_cluster_report_renders_from_its_runs():
    # make bench-cluster's runs (bench/data/cluster/*.jsonl) and the template
    # give docs/results/cluster.md, measuring nothing
    assert cluster_report.report() == committed("cluster")


def test_the_tier_cost_report_renders_from_its_runs():
    # make bench-tier-cost's runs (bench/data/tier-cost/*.jsonl: the idle
    # readings, then the runs) and the template give docs/results/tier-cost.md
    assert tier_cost_report.report() == committed("tier-cost")


def test_the_kubernetes_events_report_renders_from_its_run():
    # scripts/k8s_demo.py --json's run (bench/data/kubernetes/events.json) and
    # the template give docs/results/kubernetes-events.md, measuring nothing
    assert k8s_events_report.report() == committed("kubernetes-events")
