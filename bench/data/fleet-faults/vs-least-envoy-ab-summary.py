#!/usr/bin/env python3
# Run from anywhere: the summary in vs-least-envoy-ab-summary.txt, over the
# vs-least-envoy-{pre,after}-r*.jsonl beside this script (vs-least-envoy-ab.sh wrote them).
import json, glob, statistics, sys
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # bench/, for benchlib
from benchlib.stats import median_ci95, ci95
runs = {}
for arm in ("pre", "after"):
    for f in sorted(glob.glob(str(HERE / f"vs-least-envoy-{arm}-r*.jsonl"))):
        r = int(f.split("-r")[-1].split(".")[0])
        for line in open(f):
            d = json.loads(line)
            runs.setdefault((r, d["rep"]), {}).setdefault(arm, {})[d["policy"]] = d
for arm in ("pre", "after"):
    ratios, cpu = [], []
    for k, v in sorted(runs.items()):
        a = v.get(arm, {})
        if "LR/full" in a and "FWD/full" in a and all(x["valid"] and not x["errors"] for x in a.values()):
            ratios.append(a["FWD/full"]["mean_ms"] / a["LR/full"]["mean_ms"])
        if "FWD/full" in a:
            cpu.append(a["FWD/full"]["agents_cpu"])
    lo, hi = median_ci95(ratios) if len(ratios) >= 6 else (float("nan"), float("nan"))
    m, h = ci95(ratios)
    print(f"{arm}: FWD/full over LR/full mean: median {statistics.median(ratios):.3f} [{lo:.3f}, {hi:.3f}], mean {m:.3f} ± {h:.3f}, n={len(ratios)}; agents' CPU FWD/full median {statistics.median(cpu):.3f} cores (n={len(cpu)})")
# after / pre of the ratio, paired by round and repetition (same seeds)
pr = []
for k, v in sorted(runs.items()):
    a, b = v.get("after", {}), v.get("pre", {})
    if all(p in x and x[p]["valid"] and not x[p]["errors"] for x in (a, b) for p in ("LR/full", "FWD/full")):
        pr.append((a["FWD/full"]["mean_ms"] / a["LR/full"]["mean_ms"]) / (b["FWD/full"]["mean_ms"] / b["LR/full"]["mean_ms"]))
if pr:
    lo, hi = median_ci95(pr) if len(pr) >= 6 else (float("nan"), float("nan"))
    m, h = ci95(pr)
    print(f"today's agent over the pre-handshake agent, their FWD/full over LR/full ratios paired: median {statistics.median(pr):.3f} [{lo:.3f}, {hi:.3f}], mean {m:.3f} ± {h:.3f}, n={len(pr)}: {', '.join(f'{x:.3f}' for x in pr)}")
