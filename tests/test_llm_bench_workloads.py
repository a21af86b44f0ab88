"""bench/llm_gateways.py's workloads and SLO sweep, without
running a fleet: the SLO rate read from a sweep's steps, the report grouping
runs by workload (runs from before workloads are sharegpt's, and the page
stays what it was), and huntlb-llmload's schedules as --dry-run prints them."""

import copy
import subprocess

import pytest

import llm_gateways as bench
from benchlib.reports import RESULTS, read_data
from harness import binary


def test_the_slo_rate_is_interpolated_between_the_steps_around_it():
    # 250 ms passed between 12/s (200 ms) and 14/s (400 ms): a quarter of the way
    assert bench.slo_rate([(14, 400), (10, 100), (12, 200), (16, 900)], 250) == (12.5, "interpolated")
    at, why = bench.slo_rate([(10, 300), (12, 500)], 250)
    assert at is None and why.startswith("below 10.00/s")
    at, why = bench.slo_rate([(10, 100), (12, 200)], 250)
    assert at is None and why.startswith("above 12.00/s")
    # the SLO is 500 ms of the model's clock, which runs at TIME_SCALE
    assert bench.SLO_P90_MS * bench.TIME_SCALE == 250


def fake_run(r: dict, workload: str, rep: int, arm: str) -> dict:
    return {**r, "workload": workload, "rep": rep, "arm": arm, "salt": arm}


def test_runs_without_a_workload_are_sharegpts_and_each_workload_gets_its_section():
    data = read_data("llm-gateways")
    page = (RESULTS / "llm-gateways.md").read_text()
    # the committed page is its data's, other workloads' sections included
    assert bench.report(copy.deepcopy(data)) == page
    # the runs from before workloads existed carry no field and are sharegpt's
    assert any("workload" not in r for r in data["runs"])
    assert all(bench.workload_of(r) == "sharegpt" for r in data["runs"] if "workload" not in r)
    # sharegpt alone: the page's body, which the other workloads' runs do not change
    base = copy.deepcopy(data)
    base["runs"] = [r for r in base["runs"] if bench.workload_of(r) == "sharegpt"]
    base.pop("workloads", None)
    base.pop("sweeps", None)
    alone = bench.report(copy.deepcopy(base))
    assert page.startswith(alone[:-1])
    d = copy.deepcopy(base)
    one = next(r for r in d["runs"] if r["arm"] == "hunt1")
    d["runs"] += [fake_run(one, "shared-prefix", 0, "hunt1"), fake_run(one, "shared-prefix", 0, "lr1")]
    d["workloads"] = {"shared-prefix": {"calibration": {"per_server_rps": 1.5, "seconds": 30.0}, "rho": 0.85, "rate": 10.2, "seconds": 40.0}}
    d["sweeps"] = {"shared-prefix": {"seconds": 20.0, "capacity": 12.0, "threshold_ms": 250.0, "seed": 1, "runs": [
        {**fake_run(one, "shared-prefix", k, arm), "rho": rho, "rate": rho * 12.0, "ttft_p90_ms": p90, "errors": 0}
        for k, (rho, p90) in enumerate([(0.8, 100.0), (1.0, 400.0)]) for arm in ("hunt1", "lr1")]}}
    text = bench.report(d)
    # the sharegpt page first, as it was, then the other workload and the sweep
    body, rest = text[:len(alone) - 1], text[len(alone) - 1:]
    assert body == alone[:-1]
    assert "## Workload shared-prefix" in rest and "10.20 requests/s" in rest
    assert "## The SLO rate: shared-prefix" in rest
    # 250 ms between 100 at 9.6/s and 400 at 12/s: 10.8/s, rho 0.900
    assert "| hunt1 | 100.0 | 400.0 | 10.80/s (rho 0.900) |" in rest


def dry(*args: str) -> list[str]:
    p = subprocess.run([binary("huntlb-llmload"), "--target", "x:1", "--rate", "20", "--duration", "10", "--dry-run", *args],
                       capture_output=True, text=True, timeout=30, check=True)
    return p.stdout.splitlines()


def test_the_load_generators_workloads_as_its_dry_run_prints_them():
    base = dry("--seed", "3")
    assert base == dry("--seed", "3", "--workload", "sharegpt") == dry("--seed", "3", "--salt", "x")
    assert all(len(line.split()) == 3 for line in base)
    sp = [line.split() for line in dry("--seed", "3", "--workload", "shared-prefix", "--groups", "4", "--prompts-per-group", "2")]
    assert all(x[1:3] == ["2304", "256"] for x in sp)
    # the 8 prompts in turn: each comes once in the first 8 requests
    assert len({(x[3], x[4]) for x in sp[:8]}) == 8
    lp = [line.split() for line in dry("--seed", "3", "--workload", "long-prompt")]
    lo = [line.split() for line in dry("--seed", "3", "--workload", "long-output")]
    assert all(256 <= int(x[1]) <= 1024 and int(x[2]) <= 128 for x in lp)
    assert all(int(x[1]) <= 256 and 128 <= int(x[2]) <= 1024 for x in lo)
    # the same arrivals in every workload: one seed, one clock
    assert [x[0] for x in lp] == [x.split()[0] for x in base]


@pytest.mark.parametrize("bad", [["--workload", "chat"], ["--salt", "a b"], ["--workload", "shared-prefix", "--groups", "0"]])
def test_a_bad_workload_or_salt_is_refused(bad):
    p = subprocess.run([binary("huntlb-llmload"), "--target", "x:1", "--rate", "1", "--dry-run", *bad], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and p.stdout == ""
