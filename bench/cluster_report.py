#!/usr/bin/env python3
"""docs/results/cluster.md from `make bench-cluster`'s runs (bench/data/cluster/):
the tier against one front's ideal and against leastconn, on loopback, on the
emulated cluster and there with 1% of the fleet's datagrams lost; and what
the hosts change: the cluster's tier/ideal over loopback's, paired by
repetition (the beds share seeds, so a repetition meets the same arrivals and
jobs on both).

  PYTHONPATH=.:bench .venv/bin/python bench/cluster_report.py
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
from pathlib import Path

from benchlib.stats import ci95

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "cluster"
REPORT = ROOT / "docs" / "results" / "cluster.md"
BEDS = {"loopback": "loopback", "cluster": "emulated cluster", "loss": "emulated cluster, 1% fleet loss"}
TIER, LEAST, IDEAL = "FWD/pass", "leastconn", "leastconn@1"
BARS = {"cluster": 1.05, "loss": 1.10}


def runs(fronts: int, bed: str) -> list[dict]:
    f = DATA / f"haproxy-{fronts}-{bed}.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.exists() else []


def ratios(rs: list[dict], cand: str, base: str, key: str) -> dict[int, float]:
    """rep -> cand/base, over repetitions where both ran valid and error-free."""
    out = {}
    for rep in sorted({r["rep"] for r in rs}):
        pair = {r["policy"]: r for r in rs if r["rep"] == rep and r["valid"] and not r["errors"]}
        if cand in pair and base in pair:
            out[rep] = pair[cand][key] / pair[base][key]
    return out


def fmt(xs: list[float]) -> str:
    if not xs:
        return "no valid pair"
    m, h = ci95(xs)
    ci = f"{m - h:.3f}-{m + h:.3f}" if h == h else "n/a"
    return f"**{statistics.median(xs):.3f}** (mean CI {ci}, {len(xs)})"


def main() -> int:
    out = ["# The tier on emulated hosts: what the hosts change", "",
           "Written by `bench/cluster_report.py` from `make bench-cluster`'s runs "
           "(`bench/data/cluster/`). The vs-least testbed (12 apps of 2 emulated cores, 32 "
           "workers, exponential jobs of 20 ms, ρ 0.88 of λ0, 10 s runs, open-loop Poisson "
           "arrivals with shared seeds) through HAProxy 2.6 fronts: `FWD/pass` is the tier front "
           "([front-tier.cfg](../../haproxy-lua/examples/front-tier.cfg)) over the agents' tier, "
           "`leastconn` the same front with its hunting lines removed, `leastconn@1` that through "
           "one front (one front's least is the fleet's: the ideal this testbed reaches). "
           "On loopback every process shares 127.x addresses; on the emulated cluster "
           "([cluster.md](../cluster.md)) each app and agent, each front, the load generator and "
           "DNS are hosts of their own (network namespaces on a bridge), the fronts find the "
           "backends by DNS (`server-template` over the service's name) and the agents their "
           "peers by the same name. 5 paired repetitions per row; the beds share seeds, so "
           "the last column pairs each repetition's tier/ideal on the cluster with the same "
           "repetition's on loopback. Cells: median (95% CI of the mean, pairs).", "",
           f"Machine: {platform.machine()}, 2 cores (`nproc`), other work at times; see each run's "
           "lateness in the data.", ""]
    flagged = []
    for key, label in (("mean_ms", "mean"), ("p99_ms", "p99")):
        out += [f"## {label.capitalize()} latency", "",
                "| fronts | bed | tier / ideal | tier / leastconn | tier/ideal over loopback's | bar |",
                "|---:|---|---|---|---|---:|"]
        for n in (4, 8):
            base = ratios(runs(n, "loopback"), TIER, IDEAL, key)
            for bed, name in BEDS.items():
                rs = runs(n, bed)
                if not rs:
                    continue
                bad = [r for r in rs if r["errors"] or not r["valid"]]
                if bad and key == "mean_ms":
                    flagged.append(f"{n} fronts, {name}: {len(bad)} runs flagged (client errors or invalid), "
                                   f"their pairs left out: " + ", ".join(f"{r['policy']} rep {r['rep']}" for r in bad))
                ti = ratios(rs, TIER, IDEAL, key)
                tl = ratios(rs, TIER, LEAST, key)
                across = [ti[r] / base[r] for r in ti if r in base] if bed != "loopback" else []
                bar = f"≤ {BARS[bed]:.2f}" if bed in BARS and key == "mean_ms" else ""
                out.append(f"| {n} | {name} | {fmt(list(ti.values()))} | {fmt(list(tl.values()))} | "
                           f"{fmt(across) if bed != 'loopback' else '1'} | {bar} |")
        out.append("")
    out += ["## Cost", "", "| fronts | bed | agents' CPU, cores (tier) | datagrams per request |", "|---:|---|---:|---:|"]
    for n in (4, 8):
        for bed, name in BEDS.items():
            rs = [r for r in runs(n, bed) if r["policy"] == TIER]
            if rs:
                cpu = statistics.median(r["agents_cpu"] for r in rs)
                dg = statistics.median(r["datagrams"] / r["achieved_rate"] for r in rs if r.get("datagrams") and r["achieved_rate"])
                out.append(f"| {n} | {name} | {cpu:.3f} | {dg:.2f} |")
    out += ["", "## Flagged runs", ""] + ([f"* {f}" for f in flagged] or ["None: every run valid, no client error."])
    REPORT.write_text("\n".join(out) + "\n")
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
