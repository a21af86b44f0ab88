"""The committed reports are what their scenarios render from the committed data
(bench/data/, read by benchlib.data), measuring nothing: a report template
(bench/reports/), a scenario's rendering code or a data file changed alone fails
here. And the data files are in their compact form: read and written again, each
gives back its own bytes."""

import gzip
import json
from pathlib import Path

import pytest

import agent_overhead
import elb
import haproxy_ablation
import haproxy_profile
import many_fronts
import proxy_overhead
import reliability
import sim_proxies
import simulate
import srlb
import throughput
from benchlib import data as rundata
from benchlib.reports import DATA, RESULTS, read_data
from benchlib.render import render
from benchlib.runs import load

ROOT = Path(__file__).resolve().parents[1]


def committed(name: str) -> str:
    return (RESULTS / f"{name}.md").read_text()


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


def test_many_fronts_report_renders_from_its_data():
    assert many_fronts.text(many_fronts.load()) == committed("many-fronts")


def test_srlb_reports_render_from_their_data():
    d = load(DATA / "srlb-poisson.json")
    assert srlb.report_sweep(d, d["plan"], d.get("quick", False)) == committed("srlb-poisson")
    assert srlb.report_many(load(DATA / "many-proxies.json"), False) == committed("many-proxies")
    assert srlb.report_vs_least(load(DATA / "vs-least.json")) == committed("vs-least")


def test_simulation_reports_render_from_their_data():
    assert simulate.report(read_data("simulation")) == committed("simulation")
    d = read_data("simulation-proxies")
    d["plot"] = (RESULTS / "simulation-proxies.png").exists()
    assert sim_proxies.report(d) == committed("simulation-proxies")


def test_elb_and_reliability_reports_render_from_their_data():
    d = read_data("elb")
    assert elb.report(d, d.get("quick", False)) == committed("elb")
    assert reliability.report(read_data("reliability")) + "\n" == (ROOT / "docs" / "reliability.md").read_text()


def test_overhead_and_throughput_reports_render_from_their_data():
    assert throughput.report(read_data("proxy-throughput")) == committed("proxy-throughput")
    assert agent_overhead.report(read_data("agent-overhead")) == committed("agent-overhead")
    assert proxy_overhead.report(read_data("proxy-overhead")) == committed("proxy-overhead")
    assert proxy_overhead.report_envoy(read_data("envoy-front-cost")) == committed("envoy-front-cost")
    assert haproxy_ablation.report(read_data("haproxy-ablation")) == committed("haproxy-ablation")
    assert haproxy_profile.report(read_data("haproxy-profile")) == committed("haproxy-profile")


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
