#!/usr/bin/env python3
"""A member that lies about its count: backend 0's agent always reports 0
(an insider with the key, or an agent gone rogue), at 4 fronts under the
vs-least load, with and without the bound the other agents apply (a peer's
count is never below their own forwards outstanding there), paired with an
honest fleet on the same arrivals and jobs.

Needs a bench-only build (the `insider` feature, in its own target folder):
  CARGO_TARGET_DIR=target/insider cargo build --release -p huntlb-agent --features insider -p huntlb-instruments
  CARGO_TARGET_DIR=target/insider PYTHONPATH=.:bench HUNTLB_PROFILE=release .venv/bin/python bench/fleet_liar.py envoy --reps 5

Prints each run, the liar's share of the requests (its app's over the
fleet's, served during the run), and mean and p99 over the honest fleet's (median over repetitions,
mean and 95% CI).
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from benchlib import testbed
from benchlib.reports import write_json
from benchlib.stats import ci95, rep_ratios

STRATEGY = {"envoy": "FWD/full", "haproxy": "FWD/least"}
VARIANTS = ["honest", "liar, no bound", "liar, bound"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("proxy", choices=["envoy", "haproxy"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rate = 0.88 * testbed.last_lambda0()
    b = testbed.Bench(Path(tempfile.mkdtemp(prefix="huntlb-liar-")), [a.proxy], False)
    variant = ["honest"]
    start = b.fleet.procs.agent
    liar = b.fleet.backends[0].host

    def agent(host, app, **opts):
        env = {}
        if variant[0] != "honest" and host == liar:
            env["HUNTLB_INSIDER_BUSY"] = "0"
        if variant[0] == "liar, no bound":
            env["HUNTLB_INSIDER_NO_FLOOR"] = "1"
        return start(host, app, env=env, **opts)

    b.fleet.procs.agent = agent
    runs = []
    try:
        for rep in range(a.reps):
            for v in VARIANTS if rep % 2 == 0 else list(reversed(VARIANTS)):
                variant[0] = v
                before = b.fleet.stats()
                r = b.run(a.proxy, STRATEGY[a.proxy], rate, testbed.seconds_for(rate, 10.0), rho=0.88, rep=rep, instances=4,
                          keep_cdf=False, seed=testbed.common_seed(rate, rep, 4))
                r.policy = v
                served = [x["served"] - y["served"] for x, y in zip(b.fleet.stats(), before)]
                share = served[0] / sum(served)
                print(f"    {v}: the liar's share of the requests served {share:.3f}", flush=True)
                runs.append((r, share))
    finally:
        b.close()
    write_json(a.json, "".join(json.dumps({**r.to_json(), "variant": r.policy, "liar_share": s}, sort_keys=True) + "\n" for r, s in runs))
    bad = [r for r, _ in runs if r.errors or not r.valid]
    for r in bad:
        print(f"FLAGGED: {r.policy} rep {r.rep}: {r.errors} client errors, valid {r.valid}")
    n = len(b.fleet.backends)
    for v in VARIANTS:
        shares = [s for r, s in runs if r.policy == v and r not in bad]
        print(f"{a.proxy} {v}: the liar's share of the requests, median {statistics.median(shares):.3f} (fair: {1 / n:.3f})")
    for v in VARIANTS[1:]:
        for key in ("mean_ms", "p99_ms"):
            xs = rep_ratios([r for r, _ in runs], "honest", v, key)
            m, h = ci95(xs)
            print(f"{a.proxy} {v} / honest, {key[:-3]}: median {statistics.median(xs):.3f}, mean {m:.3f} ± {h:.3f} ({len(xs)} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
