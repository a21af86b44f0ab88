#!/usr/bin/env python3
"""A Wikipedia-like request trace for the MediaWiki replicas, written to a
file of `SECONDS PATH` lines that `huntlb-loadgen --trace` replays open-loop
(ms granularity), so every strategy meets the very same requests (paired).
The model, and what each part of it rests on: bench/benchlib/wikitrace.py.

    bench/wiki_trace.py --pages 2000 --mean-rate 40 --day-seconds 600 --out bench/out/wiki/trace.txt
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchlib.wikitrace import MEDIAWIKI, STATIC_FILES, generate, summarize


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=2000, help="pages in the wiki (harness.wiki.build_template's)")
    ap.add_argument("--mean-rate", type=float, required=True, help="mean requests/s of the replay over the whole day")
    ap.add_argument("--day-seconds", type=float, default=600.0, help="replay seconds for 24 hours")
    ap.add_argument("--hours", type=float, default=24.0, help="hours of the day to replay (from --start-utc)")
    ap.add_argument("--start-utc", type=float, default=0.0, help="the replay starts at this hour of the day, UTC")
    ap.add_argument("--zipf", type=float, default=1.0, help="page popularity exponent alpha")
    ap.add_argument("--shares", default="0.50,0.45,0.05", help="pages,static,renders")
    ap.add_argument("--peak-ratio", type=float, default=2.0, help="the day's highest rate over its lowest")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True, help="trace file (SECONDS PATH lines); a .json summary goes beside it")
    a = ap.parse_args(argv)
    try:
        shares = tuple(float(x) for x in a.shares.split(","))
        static = [f for f in STATIC_FILES if not MEDIAWIKI.exists() or (MEDIAWIKI / f).exists()]
        trace = generate(a.pages, a.mean_rate, a.day_seconds, a.seed, a.zipf, shares, a.peak_ratio, a.start_utc, a.hours, static)
    except ValueError as e:
        print(f"wiki_trace: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        f.write(f"# bench/wiki_trace.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")
        for t, p in trace:
            f.write(f"{t:.3f} {p}\n")
    summary = {"args": vars(a), **summarize(trace, a.pages, a.day_seconds, a.start_utc)}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "rate_per_bin"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
