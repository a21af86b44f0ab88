#!/usr/bin/env python3
"""Many fronts at a bounded cost, by simulation (docs/results/many-fronts-sim.md).

Two studies over one simulated fleet (bench/fronts_sim.py), each its own file
with its modes, grid and bar as data:

* bench/fronts_sim_sample.py: a bounded sample of peers against every peer,
  against JSQ, least-request, P2C, Prequal and hunting without the tier;
* bench/fronts_sim_frontier.py (--frontier): ways to share the counts with
  fewer messages than the shipped sample, over a larger grid and a stricter bar.

Every mode's messages per request (refusals, forwards, datagrams between
agents, probes) are counted. The report's prose is bench/reports/many-fronts-sim*.md;
the numbers in it come from the runs, bench/data/many-fronts-sim.json.

Usage: python3 bench/many_fronts_sim.py [--seeds 3] [--requests 200000] [--quick]
       python3 bench/many_fronts_sim.py --only "tier, K=4, B=2" ...  (re-run these modes of the first study into the data)
       python3 bench/many_fronts_sim.py --frontier "K=8, B=4, delta=2" ... [--requests 100000]
           (run these modes of the frontier study, or `all`, into the data)
       python3 bench/many_fronts_sim.py --report-only
(after `cargo build --release -p huntlb-instruments`; one simulator process at a
time: wrap it in `flock /tmp/huntlb-heavy.lock nice -n 10`). Writes
docs/results/many-fronts-sim.md and .png, the runs to bench/data/many-fronts-sim.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import fronts_sim_frontier as frontier
import fronts_sim_sample as sample
from benchlib import data as rundata
from benchlib.reports import RESULTS, ROOT, data_path, machine
from benchlib.render import render, shown_in
from fronts_sim import BACKLOG, CORES, DELAY_MS, HOP_MS, MEAN_MS, RESAMPLE_MS, RHO, SIM, WORKERS, run_grid

NAME = "many-fronts-sim"
DATA = data_path(NAME)


def report(data: dict) -> str:
    """The page: the first study's model, findings, verdict and tables, then
    the frontier study's section when the data has it."""
    c = sample.study_cells(data["runs"])
    modes = list(dict.fromkeys(r["mode"] for r in data["runs"]))
    plot = (f"\n\n![mean over JSQ's and messages per request vs fronts]({data['plot']})\n" if data.get("plot") else "")
    values = {
        "argv": data["argv"], "seconds": f"{data['seconds']:.0f}", "machine": data["machine"],
        "fleets": ", ".join(f"{b} backends" for b in sample.FRONTS), "workers": str(WORKERS), "cores": str(CORES),
        "backlog": str(BACKLOG), "mean_ms": str(MEAN_MS), "demands": " or ".join(sample.DEMANDS.values()), "rho": str(RHO),
        "seeds": str(len(data["seeds"])), "requests": str(data["requests"]), "delay_ms": str(DELAY_MS), "hop_ms": str(HOP_MS),
        "resample_ms": str(RESAMPLE_MS),
        "design": sample.design_text(c, modes), "findings": sample.findings_text(c), "verdict": sample.verdict_text(c, modes),
        "plot": plot, "tables": "\n" + sample.tables_text(c, modes),
        "frontier": frontier.text(data["frontier"], bool(data.get("plot"))) if data.get("frontier") else "",
    }
    return render(NAME, values, shown=shown_in(data))


def write(data: dict, out: Path, plotted: str | None) -> None:
    """The report, then the data with what the report shows (whether a plot was
    drawn is this run's, not the data's)."""
    data["plot"] = plotted
    (out / f"{NAME}.md").write_text(report(data))
    rundata.write(data_path(NAME, out), {k: v for k, v in data.items() if k != "plot"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds per cell (medians are reported)")
    ap.add_argument("--requests", type=int, default=200_000, help="requests per run")
    ap.add_argument("--quick", action="store_true", help="1 seed of 20000 requests, to bench/out/many-fronts-sim/")
    ap.add_argument("--only", nargs="+", metavar="MODE", help="re-run these modes of the first study (bench/fronts_sim_sample.py) into the data")
    ap.add_argument("--report-only", action="store_true", help=f"rewrite the report from {DATA.relative_to(ROOT)}")
    ap.add_argument("--frontier", nargs="+", metavar="MODE",
                    help="run these modes of the frontier study (bench/fronts_sim_frontier.py), or `all`, over its grid into the data")
    a = ap.parse_args()
    if a.quick:
        a.seeds, a.requests = 1, 20_000
    if not a.report_only and not SIM.exists():
        raise SystemExit(f"{SIM} not built: run `cargo build --release -p huntlb-instruments` first")
    t0 = time.monotonic()
    if a.report_only:
        data = rundata.read(DATA)
    elif a.frontier:
        data = rundata.read(DATA)
        names = list(frontier.MODES) if a.frontier == ["all"] else a.frontier
        unknown = [m for m in names if m not in frontier.MODES]
        if unknown:
            raise SystemExit(f"--frontier: unknown modes {unknown} (known: {list(frontier.MODES)})")
        f = data.setdefault("frontier", {"seeds": list(range(1, a.seeds + 1)), "requests": a.requests, "seconds": 0.0, "runs": []})
        modes = {m: frontier.args(m) for m in names}
        f["runs"] = [r for r in f["runs"] if r["mode"] not in names] + run_grid(modes, frontier.GRID, f["seeds"], f["requests"], t0)
        f["seconds"] += time.monotonic() - t0
        rundata.write(DATA, data)  # the runs first: the report is rendered from them below
    elif a.only:
        data = rundata.read(DATA)
        unknown = [m for m in a.only if m not in sample.MODES]
        if unknown:
            raise SystemExit(f"--only: unknown modes {unknown} (known: {list(sample.MODES)})")
        data["runs"] = [r for r in data["runs"] if r["mode"] not in a.only] \
            + run_grid({m: sample.MODES[m] for m in a.only}, sample.GRID, data["seeds"], data["requests"], t0)
        data["seconds"] += time.monotonic() - t0
    else:
        seeds = list(range(1, a.seeds + 1))
        data = {"machine": machine(), "seeds": seeds, "requests": a.requests,
                "argv": f"python3 bench/many_fronts_sim.py --seeds {a.seeds} --requests {a.requests}",
                "runs": run_grid(sample.MODES, sample.GRID, seeds, a.requests, t0)}
        data["seconds"] = time.monotonic() - t0
    data.pop("plot", None)
    if a.quick:
        out = ROOT / "bench" / "out" / NAME
        out.mkdir(parents=True, exist_ok=True)
        write(data, out, None)
        print(f"wrote {out}/{NAME}.md", flush=True)
        return
    frontier.plot(data.get("frontier"), RESULTS, NAME)
    write(data, RESULTS, sample.plot(data["runs"], RESULTS, NAME))
    print(f"wrote docs/results/{NAME}.md, {DATA.relative_to(ROOT)} ({time.monotonic() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
