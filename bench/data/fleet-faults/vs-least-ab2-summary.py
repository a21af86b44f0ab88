#!/usr/bin/env python3
# Run with envoy or haproxy, from anywhere: the summary in
# vs-least-PROXY-ab2-summary.txt, over vs-least-PROXY-ab2-{pre,now}-r*.jsonl
# beside this script, which vs-least-ab2.sh wrote.
import json, glob, statistics, sys
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # bench/, for benchlib
from benchlib.stats import median_ci95, ci95
proxy = sys.argv[1]
BASE, TIER = {"envoy": ("LR/full", "FWD/full"), "haproxy": ("leastconn", "FWD/least")}[proxy]
ARMS = ("pre", "now")
runs = {}
for arm in ARMS:
    for f in sorted(glob.glob(str(HERE / f"vs-least-{proxy}-ab2-{arm}-r*.jsonl"))):
        r = int(f.split("-r")[-1].split(".")[0])
        for line in open(f):
            d = json.loads(line)
            runs.setdefault((r, d["rep"]), {}).setdefault(arm, {})[d["policy"]] = d


def good(a: dict) -> bool:
    return all(p in a and a[p]["valid"] and not a[p]["errors"] for p in (BASE, TIER))


def show(xs: list[float]) -> str:
    lo, hi = median_ci95(xs) if len(xs) >= 6 else (float("nan"), float("nan"))
    m, h = ci95(xs)
    return f"median {statistics.median(xs):.3f} [{lo:.3f}, {hi:.3f}], mean {m:.3f} ± {h:.3f}, n={len(xs)}"


flagged = sum(1 for v in runs.values() for a in v.values() for x in a.values() if not x["valid"] or x["errors"])
print(f"runs flagged (generator late or client errors), left out with their pair: {flagged}")
for arm in ARMS:
    ok = [v[arm] for k, v in sorted(runs.items()) if arm in v and good(v[arm])]
    for key in ("mean_ms", "p99_ms"):
        print(f"{arm}: {TIER} over {BASE}, {key.removesuffix('_ms')}: " + show([a[TIER][key] / a[BASE][key] for a in ok]))
    cpu = [v[arm][TIER]["agents_cpu"] for v in runs.values() if arm in v and TIER in v[arm]]
    print(f"{arm}: the 12 agents' CPU under {TIER}, median {statistics.median(cpu):.3f} cores (n={len(cpu)})")
# today's over the pre-handshake tree, paired by round and repetition (same seeds)
for key in ("mean_ms", "p99_ms"):
    pr = [(v["now"][TIER][key] / v["now"][BASE][key]) / (v["pre"][TIER][key] / v["pre"][BASE][key])
          for k, v in sorted(runs.items()) if all(arm in v and good(v[arm]) for arm in ARMS)]
    if pr:
        print(f"today's tree over the pre-handshake one, {TIER} over {BASE} ({key.removesuffix('_ms')}) paired: {show(pr)}: {', '.join(f'{x:.3f}' for x in pr)}")
