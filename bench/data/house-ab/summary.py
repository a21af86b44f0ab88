#!/usr/bin/env python3
"""The house A/B (ab.sh's runs beside this script, from anywhere): per
repetition and tree, each tier strategy's mean latency over leastconn's, the
agents' CPU and the client errors; then this tree's ratio over the tree
before's, paired by repetition (the same seed in every run)."""
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # bench/, for benchlib
from benchlib.stats import ci95, median_ci95  # noqa: E402

BASE, TIERS, ROLES = "leastconn", ("FWD/least", "FWDp/plain"), ("pre", "now")
runs: dict[int, dict[str, dict]] = {}
for role in ROLES:
    for f in sorted(HERE.glob(f"{role}-r*.jsonl")):
        rep = int(f.stem.split("-r")[1])
        runs.setdefault(rep, {})[role] = {d["policy"]: d for d in map(json.loads, f.read_text().splitlines()) if "idle" not in d}


def ok(d: dict) -> bool:
    return d["valid"] and not d["errors"]


print("rep tree   FWD/least/lc  FWDp/plain/lc  agents' CPU (cores) lc / FWD/least / FWDp/plain  errors  flags")
for rep, by in sorted(runs.items()):
    for role in ROLES:
        if role not in by:
            continue
        a = by[role]
        ratios = "  ".join(f"{a[t]['mean_ms'] / a[BASE]['mean_ms']:12.3f}" for t in TIERS)
        cpu = " / ".join(f"{a[p]['agents_cpu']:.2f}" for p in (BASE, *TIERS))
        errs = sum(a[p]["errors"] for p in (BASE, *TIERS))
        flags = "; ".join(f"{p}: {a[p]['invalid_reason']}" for p in (BASE, *TIERS) if not a[p]["valid"])
        print(f"r{rep}  {role:5s} {ratios}   {cpu:>38s}  {errs:6d}  {flags}")
print()
print("this tree over the tree before, paired by repetition (pairs with a flagged run left out):")
for t in TIERS:
    xs = [(by["now"][t]["mean_ms"] / by["now"][BASE]["mean_ms"]) / (by["pre"][t]["mean_ms"] / by["pre"][BASE]["mean_ms"])
          for by in runs.values() if all(r in by and ok(by[r][BASE]) and ok(by[r][t]) for r in ROLES)]
    if not xs:
        print(f"  {t} / {BASE}, mean: no valid pair")
        continue
    m, h = ci95(xs)
    lo, hi = median_ci95(xs)
    mci = f" [{lo:.3f}, {hi:.3f}]" if lo == lo else " (no distribution-free CI below 6 pairs)"
    print(f"  {t} / {BASE}, mean: median {statistics.median(xs):.3f}{mci}, mean {m:.3f} ± {h:.3f} (95% CI), n={len(xs)}: "
          + ", ".join(f"{x:.3f}" for x in xs))
for p in (BASE, *TIERS):
    xs = [by["now"][p]["agents_cpu"] / by["pre"][p]["agents_cpu"] for by in runs.values() if all(r in by for r in ROLES)]
    if xs:
        m, h = ci95(xs)
        print(f"  {p}: the agents' CPU, this tree over the tree before: median {statistics.median(xs):.3f}, mean {m:.3f} ± {h:.3f}, "
              f"n={len(xs)}")
