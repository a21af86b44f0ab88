#!/usr/bin/env python3
"""docs/results/cluster.md from `make bench-cluster`'s runs (bench/data/cluster/):
the tier against one front's ideal and against leastconn, on loopback, on the
emulated cluster and there with 1% of the fleet's datagrams lost; and what
the hosts change: the cluster's tier/ideal over loopback's, paired by
repetition (the beds share seeds, so a repetition meets the same arrivals and
jobs on both).

  PYTHONPATH=.:bench .venv/bin/python bench/cluster_report.py [--machine]

The prose is bench/reports/cluster.md; the machine the runs ran on is
bench/data/cluster/machine.txt (`--machine` writes this one's there first, as
make bench-cluster does after its runs).
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
from pathlib import Path

from benchlib.render import render
from benchlib.reports import machine
from benchlib.stats import ci95

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "cluster"
REPORT = ROOT / "docs" / "results" / "cluster.md"
MACHINE = DATA / "machine.txt"
BEDS = {"loopback": "loopback", "cluster": "emulated cluster", "loss": "emulated cluster, 1% fleet loss"}
TIER, LEAST, IDEAL = "FWD/pass", "leastconn", "leastconn@1"
BARS = {"cluster": 1.05, "loss": 1.10}
# The tier under plain fronts (FWDp/plain: the chart's default) on three beds,
# the real cluster's runs by bench/k8s_pairs.py; each proxy's own least-request.
PLAIN_TIER, PLAIN_BEDS = "FWDp/plain", {"loopback": "loopback", "cluster": "emulated cluster", "k8s": "Kubernetes"}
PLAIN_LEAST = {"haproxy": "leastconn", "envoy": "LR/full"}
K8S_BAR = 1.05


def runs(fronts: int, bed: str, proxy: str = "haproxy") -> list[dict]:
    f = DATA / f"{proxy}-{fronts}-{bed}.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.exists() else []


def ratios(rs: list[dict], cand: str, base: str, key: str) -> dict[int, float]:
    """rep -> cand/base, over repetitions where both ran valid and error-free."""
    out = {}
    for rep in sorted({r["rep"] for r in rs}):
        pair = {r["policy"]: r for r in rs if r["rep"] == rep and r["valid"] and not r["errors"]}
        if cand in pair and base in pair:
            out[rep] = pair[cand][key] / pair[base][key]
    return out


def flag(rs: list[dict], where: str, flagged: list[str] | None) -> None:
    """Runs with client errors or flagged invalid, named into `flagged`: their pairs are left out."""
    bad = [r for r in rs if r["errors"] or not r["valid"]]
    if bad and flagged is not None:
        flagged.append(f"{where}: {len(bad)} runs flagged (client errors or invalid), their pairs left out: "
                       + ", ".join(f"{r['policy']} rep {r['rep']}" for r in bad))


def fmt(xs: list[float]) -> str:
    if not xs:
        return "no valid pair"
    m, h = ci95(xs)
    ci = f"{m - h:.3f}-{m + h:.3f}" if h == h else "n/a"
    return f"**{statistics.median(xs):.3f}** (mean CI {ci}, {len(xs)})"


def rows(key: str, flagged: list[str] | None = None) -> str:
    """The table of `key` (mean_ms, p99_ms): a row per front count and bed;
    flagged runs named into `flagged`."""
    out = []
    for n in (4, 8):
        base = ratios(runs(n, "loopback"), TIER, IDEAL, key)
        for bed, name in BEDS.items():
            rs = runs(n, bed)
            if not rs:
                continue
            flag(rs, f"{n} fronts, {name}", flagged)
            ti = ratios(rs, TIER, IDEAL, key)
            tl = ratios(rs, TIER, LEAST, key)
            across = [ti[r] / base[r] for r in ti if r in base] if bed != "loopback" else []
            bar = f"≤ {BARS[bed]:.2f}" if bed in BARS and key == "mean_ms" else ""
            out.append(f"| {n} | {name} | {fmt(list(ti.values()))} | {fmt(list(tl.values()))} | "
                       f"{fmt(across) if bed != 'loopback' else '1'} | {bar} |")
    return "\n".join(out)


def cost() -> str:
    out = []
    for n in (4, 8):
        for bed, name in BEDS.items():
            rs = [r for r in runs(n, bed) if r["policy"] == TIER]
            if rs:
                cpu = statistics.median(r["agents_cpu"] for r in rs)
                dg = statistics.median(r["datagrams"] / r["achieved_rate"] for r in rs if r.get("datagrams") and r["achieved_rate"])
                out.append(f"| {n} | {name} | {cpu:.3f} | {dg:.2f} |")
    return "\n".join(out)


def plain_rows(key: str, flagged: list[str] | None = None) -> str:
    """The tier under plain fronts at 4 fronts: a row per proxy and bed, the
    real cluster's tier/least over the emulated cluster's paired by repetition."""
    out = []
    for proxy, least in PLAIN_LEAST.items():
        per = {bed: runs(4, f"{bed}-plain", proxy) for bed in PLAIN_BEDS}
        tl = {bed: ratios(rs, PLAIN_TIER, least, key) for bed, rs in per.items()}
        for bed, name in PLAIN_BEDS.items():
            rs = per[bed]
            if not rs:
                continue
            flag(rs, f"{proxy}, 4 fronts, {name}, plain fronts", flagged)
            ti = ratios(rs, PLAIN_TIER, f"{least}@1", key)
            across = [tl[bed][r] / tl["cluster"][r] for r in tl[bed] if r in tl["cluster"]] if bed == "k8s" else []
            cpu = {n: statistics.median(r["agents_cpu"] for r in rs if r["policy"] == n) for n in (PLAIN_TIER, least)
                   if any(r["policy"] == n and r.get("agents_cpu") is not None for r in rs)}
            fronts = [r["fronts_cpu"] for r in rs if r["policy"] == least and r.get("fronts_cpu")]
            rate = statistics.median(r["achieved_rate"] for r in rs)
            cost = (f"{cpu.get(least, float('nan')):.3f} / {cpu.get(PLAIN_TIER, float('nan')):.3f} | "
                    f"{statistics.median(fronts):.3f}" if fronts else f"{cpu.get(least, float('nan')):.3f} / "
                    f"{cpu.get(PLAIN_TIER, float('nan')):.3f} | -")
            out.append(f"| {proxy} | {name} | {fmt(list(tl[bed].values()))} | {fmt(list(ti.values()))} | "
                       f"{fmt(across) if bed == 'k8s' else '-'} | {f'≤ {K8S_BAR:.2f}' if bed == 'k8s' and key == 'mean_ms' else ''} | "
                       f"{cost if key == 'mean_ms' else ' | '} | {rate:.0f} |")
    return "\n".join(out) or "| (no runs) | | | | | | | |"


def report() -> str:
    """docs/results/cluster.md, from the runs and bench/reports/cluster.md."""
    flagged: list[str] = []
    mean = rows("mean_ms", flagged)
    plain = plain_rows("mean_ms", flagged)
    ks = sorted({r.get("longer", 1.0) for proxy in PLAIN_LEAST for bed in PLAIN_BEDS for r in runs(4, f"{bed}-plain", proxy)})
    return render("cluster", {"machine": MACHINE.read_text().strip(), "mean": mean, "p99": rows("p99_ms"), "cost": cost(),
                              "plain_mean": plain, "plain_p99": plain_rows("p99_ms"),
                              "plain_longer": " and ".join(f"{k:g}" for k in ks) or "n/a",
                              "flagged": "\n".join(f"* {f}" for f in flagged) or "None: every run valid, no client error."})


def main() -> int:
    if "--machine" in sys.argv:
        # make bench-cluster: the machine the runs ran on, beside them
        MACHINE.write_text(f"{platform.machine()}, {machine()}\n")
    REPORT.write_text(report())
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
