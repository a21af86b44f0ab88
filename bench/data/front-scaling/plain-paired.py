#!/usr/bin/env python3
"""Paired ratio of two strategies kept by bench/pairs.py --json (same rep, same seed): mean and p99.
Usage: python3 plain-paired.py RUNS.jsonl A B   (prints A over B per valid pair, median and its 95% CI)"""
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]  # bench/, for benchlib, from anywhere
from benchlib.stats import median_ci95  # noqa: E402

runs = [json.loads(line) for line in open(sys.argv[1])]
a, b = sys.argv[2], sys.argv[3]
by = {}
for r in runs:
    if r.get("valid", True) and not r.get("errors"):
        by.setdefault(r["rep"], {})[r["policy"]] = r
for k in ("mean_ms", "p99_ms"):
    xs = sorted(v[a][k] / v[b][k] for v in by.values() if a in v and b in v)
    if not xs:
        print(f"{a} over {b}, {k[:-3]}: no valid pair")
        continue
    lo, hi = median_ci95(xs)
    med = xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
    print(f"{a} over {b}, {k[:-3]}: median {med:.3f} [{lo:.3f}, {hi:.3f}] ({len(xs)} pairs: {', '.join(f'{x:.3f}' for x in xs)})")
