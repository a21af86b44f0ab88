#!/usr/bin/env python3
# Run from the repository root: the summary in vs-least-envoy-ab2-summary.txt,
# over vs-least-envoy-ab2-{pre,now}-r*.jsonl, which vs-least-envoy-ab2.sh wrote.
import json, glob, statistics, sys
sys.path.insert(0, "bench")
from benchlib.stats import median_ci95, ci95
ARMS = ("pre", "now")
runs = {}
for arm in ARMS:
    for f in sorted(glob.glob(f"bench/data/fleet-faults/vs-least-envoy-ab2-{arm}-r*.jsonl")):
        r = int(f.split("-r")[-1].split(".")[0])
        for line in open(f):
            d = json.loads(line)
            runs.setdefault((r, d["rep"]), {}).setdefault(arm, {})[d["policy"]] = d


def good(a: dict) -> bool:
    return all(p in a and a[p]["valid"] and not a[p]["errors"] for p in ("LR/full", "FWD/full"))


def show(xs: list[float]) -> str:
    lo, hi = median_ci95(xs) if len(xs) >= 6 else (float("nan"), float("nan"))
    m, h = ci95(xs)
    return f"median {statistics.median(xs):.3f} [{lo:.3f}, {hi:.3f}], mean {m:.3f} ± {h:.3f}, n={len(xs)}"


flagged = sum(1 for v in runs.values() for a in v.values() for x in a.values() if not x["valid"] or x["errors"])
print(f"runs flagged (generator late or client errors), left out with their pair: {flagged}")
for arm in ARMS:
    ok = [v[arm] for k, v in sorted(runs.items()) if arm in v and good(v[arm])]
    for key in ("mean_ms", "p99_ms"):
        print(f"{arm}: FWD/full over LR/full, {key.removesuffix('_ms')}: " + show([a["FWD/full"][key] / a["LR/full"][key] for a in ok]))
    cpu = [v[arm]["FWD/full"]["agents_cpu"] for v in runs.values() if arm in v and "FWD/full" in v[arm]]
    print(f"{arm}: the 12 agents' CPU under FWD/full, median {statistics.median(cpu):.3f} cores (n={len(cpu)})")
# today's over the pre-handshake tree, paired by round and repetition (same seeds)
for key in ("mean_ms", "p99_ms"):
    pr = [(v["now"]["FWD/full"][key] / v["now"]["LR/full"][key]) / (v["pre"]["FWD/full"][key] / v["pre"]["LR/full"][key])
          for k, v in sorted(runs.items()) if all(arm in v and good(v[arm]) for arm in ARMS)]
    if pr:
        print(f"today's tree over the pre-handshake one, FWD/full over LR/full ({key.removesuffix('_ms')}) paired: {show(pr)}: {', '.join(f'{x:.3f}' for x in pr)}")
