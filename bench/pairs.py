#!/usr/bin/env python3
"""Strategies of the vs-least bench (benchlib/testbed.py), each paired with a
baseline, and nothing else running: a check of one ratio of `vs-least` (which
keeps every strategy's fronts up at once).

Usage (after `make release`):
  PYTHONPATH=.:bench HUNTLB_PROFILE=release .venv/bin/python bench/pairs.py envoy LR/full FWD/full --fronts 4 --reps 10

ρ 0.88 of the last sweep's λ0, 10 s per run, the order reversed every other
repetition as in vs-least; prints every run, then candidate / baseline for mean
and p99: median over repetitions, and mean ± 95% CI; with a tier, the agents'
CPU and the datagrams they sent per request. Writes its runs only with --json.
A run with client errors or flagged invalid is reported, never averaged in
quietly.
"""

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path

from benchlib import testbed
from benchlib.runs import Run
from benchlib.stats import ci95


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("proxy", choices=["envoy", "haproxy"])
    ap.add_argument("baseline")
    ap.add_argument("candidate", nargs="+", help="one or more, each paired with the baseline; NAME@F runs NAME through "
                    "F fronts (same arrivals and jobs), e.g. leastconn@1, the one front whose least is the fleet's (JSQ)")
    ap.add_argument("--fronts", type=int, default=4)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--first-rep", type=int, default=0, metavar="K",
                    help="number the repetitions from K (each repetition's seed is its number's): a run split in parts, "
                         "or an A/B of two trees in alternating rounds, meets new arrivals in each")
    ap.add_argument("--servers", type=int, default=testbed.SERVERS,
                    help="backends; their jobs are as much longer (mean_ms x servers / 12), so the capacity and rate stay")
    ap.add_argument("--demand", default="exp", help="the jobs' sizes: exp, or lognormal:SIGMA (heavy-tailed)")
    ap.add_argument("--cluster", action="store_true", help="on the emulated cluster (benchlib/clusterbed.py: hosts as "
                    "network namespaces, DNS discovery; needs root): FWD/pass and FWDp/plain against the proxy's own least only")
    ap.add_argument("--fleet-loss", type=float, default=0.0, metavar="P",
                    help="with --cluster: drop each datagram arriving at a backend's fleet port with probability P")
    ap.add_argument("--longer", type=float, default=1.0, metavar="K",
                    help="jobs K times longer and arrivals K times fewer: the same ρ at 1/K of the requests a second "
                    "(a bed that cannot carry the full rate: the real cluster on 2 cores, bench/k8s_pairs.py)")
    ap.add_argument("--idle", type=float, default=0, metavar="S",
                    help="first, each strategy ready and no request for S seconds: each agent's CPU (the fixed part)")
    ap.add_argument("--agent-opt", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting every agent gets, whatever the strategy (e.g. threads=2); repeatable")
    ap.add_argument("--json", type=Path, help="write every run here (one JSON object per line)")
    ap.add_argument("--from", dest="runs_from", type=Path, metavar="JSONL",
                    help="measure nothing: the ratios of runs an earlier --json wrote, against this baseline")
    a = ap.parse_args()
    if a.runs_from:
        rows = [d for d in (json.loads(line) for line in a.runs_from.read_text().splitlines() if line.strip()) if "idle" not in d]
        known = {f.name for f in dataclasses.fields(Run)}
        runs = [Run.from_json({k: v for k, v in d.items() if k in known}) for d in rows]
        a.reps, a.fronts, a.servers = max(r.rep for r in runs) + 1, rows[0]["fronts"], rows[0]["servers"]
        return summarize(a, runs)
    lam0 = testbed.last_lambda0()
    rate = 0.88 * lam0 / a.longer
    work, mean_ms = Path(tempfile.mkdtemp(prefix="huntlb-pairs-")), testbed.MEAN_MS * a.servers / testbed.SERVERS * a.longer
    if a.cluster:
        from benchlib.clusterbed import ClusterBench
        b = ClusterBench(work, [a.proxy], servers=a.servers, mean_ms=mean_ms, demand=a.demand, fleet_loss=a.fleet_loss)
    elif a.fleet_loss:
        raise SystemExit("--fleet-loss needs --cluster (loss is a kernel rule inside the cluster's hosts)")
    else:
        opts = dict(o.split("=", 1) for o in a.agent_opt)
        b = testbed.Bench(work, [a.proxy], False, servers=a.servers, mean_ms=mean_ms, demand=a.demand, agent_opts=opts)
    runs, idles = [], []
    try:
        for name in ([a.baseline, *a.candidate] if a.idle else []):
            policy, _, fronts = name.partition("@")
            per, fronts_cpu = b.idle_cpu(a.proxy, policy, a.idle, int(fronts or a.fronts))
            idles.append({"idle": name, "seconds": a.idle, "per_agent": per, "fronts_cpu": fronts_cpu})
            print(f"{name}: idle {a.idle:g} s, each agent's CPU, % of a core: median {100 * statistics.median(per):.2f} "
                  f"(max {100 * max(per):.2f}); the fronts' {100 * fronts_cpu:.2f}", flush=True)
        for rep in range(a.first_rep, a.first_rep + a.reps):
            names = [a.baseline, *a.candidate] if rep % 2 == 0 else [*reversed(a.candidate), a.baseline]
            for name in names:
                policy, _, fronts = name.partition("@")
                r = b.run(a.proxy, policy, rate, testbed.seconds_for(rate, 10.0), rho=0.88, rep=rep, instances=int(fronts or a.fronts),
                          keep_cdf=False, seed=testbed.common_seed(rate, rep, a.fronts))
                r.policy = name
                runs.append(r)
    finally:
        b.close()
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        setup = {"baseline": a.baseline, "fronts": a.fronts, "servers": a.servers, "demand": a.demand, "longer": a.longer,
                 "bed": "cluster" if a.cluster else "loopback", "fleet_loss": a.fleet_loss}
        # the idle readings first, each a line with an "idle" key (--from reads the runs only)
        a.json.write_text("".join(json.dumps({**x, **setup}, sort_keys=True) + "\n" for x in idles) +
                          "".join(json.dumps({**r.to_json(), **setup}, sort_keys=True) + "\n" for r in runs))
    return summarize(a, runs)


def summarize(a, runs) -> int:
    """Every candidate / baseline, mean and p99, paired by repetition; the agents' CPU and datagrams."""
    bad = [r for r in runs if r.errors or not r.valid]
    if bad:
        print(f"FLAGGED: {len(bad)} runs with client errors or invalid; their pairs are left out", file=sys.stderr)
    for cand in a.candidate:
        for key in ("mean_ms", "p99_ms"):
            xs = []
            for rep in sorted({r.rep for r in runs}):
                pair = {r.policy: r for r in runs if r.rep == rep and r not in bad}
                if a.baseline in pair and cand in pair:
                    xs.append(getattr(pair[cand], key) / getattr(pair[a.baseline], key))
            if not xs:
                print(f"{cand} / {a.baseline}, {a.fronts} fronts, {key[:-3]}: no valid pair (every one flagged above)")
                continue
            m, h = ci95(xs)
            print(f"{cand} / {a.baseline}, {a.fronts} fronts, {key[:-3]}: median {statistics.median(xs):.3f}, "
                  f"mean {m:.3f} ± {h:.3f} ({len(xs)} pairs)")
    for name in (a.baseline, *a.candidate):
        cpu = [r.agents_cpu for r in runs if r.policy == name and r.agents_cpu is not None]
        if cpu:
            print(f"{name}: the {a.servers} agents' CPU, cores: median {statistics.median(cpu):.3f} (range {min(cpu):.3f}-{max(cpu):.3f})")
        fcpu = [(r.agents_cpu, r.fronts_cpu) for r in runs if r.policy == name and r.fronts_cpu and r.agents_cpu is not None]
        if fcpu:
            ratio = [ag / fr for ag, fr in fcpu]
            print(f"{name}: the fronts' CPU, cores: median {statistics.median(f for _, f in fcpu):.3f}; agents / fronts: "
                  f"median {statistics.median(ratio):.2f} (range {min(ratio):.2f}-{max(ratio):.2f})")
        fair = [r.fairness for r in runs if r.policy == name and r.fairness is not None]
        if fair:
            print(f"{name}: Jain's index of the apps' load: median {statistics.median(fair):.3f} (range {min(fair):.3f}-{max(fair):.3f})")
        dg = [r.datagrams / r.achieved_rate for r in runs if r.policy == name and r.datagrams is not None and r.achieved_rate]
        if dg:
            print(f"{name}: the tier's datagrams per request: median {statistics.median(dg):.2f} (range {min(dg):.2f}-{max(dg):.2f})")
    # The tier's own CPU a request: the agents' CPU over the baseline's in the same repetition, over the rate.
    for cand in a.candidate:
        us = []
        for rep in sorted({r.rep for r in runs}):
            pair = {r.policy: r for r in runs if r.rep == rep}
            if a.baseline in pair and cand in pair and pair[cand].agents_cpu is not None and pair[a.baseline].agents_cpu is not None:
                us.append((pair[cand].agents_cpu - pair[a.baseline].agents_cpu) / pair[cand].achieved_rate * 1e6)
        if us:
            print(f"{cand}: the agents' CPU a request over {a.baseline}'s, us: median {statistics.median(us):.0f} "
                  f"(range {min(us):.0f}-{max(us):.0f}, {len(us)} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
