#!/usr/bin/env python3
"""Agent overhead: what huntlb-agent adds in front of an app (make bench-agent).

A tiny page (the workload app with zero service demand), keep-alive, side by side
in one run: the app direct, the app through the agent with an accepted offer
(and one from a front that names itself, `hunt-front`, counted per front), and
a refused offer (the 425 answered by the agent alone). The app and agent are
pinned to CPU 0, wrk to CPU 1: req/s is per core. Repetitions alternate the
variants; the report gives medians and 95% confidence intervals.
"""

import argparse
import tempfile
from pathlib import Path

from benchlib.fronts import pin
from benchlib.reports import machine, write_result
from benchlib.stats import ci95, median
from benchlib.tools import wrk
from harness import OFFER, Addrs, Procs

OFFER_HDRS = OFFER


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4)
    a = ap.parse_args()
    procs, addrs = Procs(Path(tempfile.mkdtemp(prefix="huntlb-bench-"))), Addrs()
    try:
        host = addrs.host()
        app_p, app = procs.workload(host, cores=1000, workers=1000, backlog=100000, demand="const:0")
        ag_p, agent, _ = procs.agent(host, app, policy="always")
        rhost = addrs.host()
        rf_p, refuser, _ = procs.agent(rhost, app, policy="static:0")
        for p in (app_p, ag_p, rf_p):
            pin(p.pid, 0)
        variants = {
            "direct": (f"http://{app}/", {}),
            "agent, offer accepted": (f"http://{agent}/", OFFER_HDRS),
            "agent, offer accepted, hunt-front": (f"http://{agent}/", {**OFFER_HDRS, "hunt-front": "127.0.1.254:10000"}),
            "agent, offer refused": (f"http://{refuser}/", OFFER_HDRS),
        }
        runs = {k: {"lat": [], "tput": []} for k in variants}
        for rep in range(a.reps):
            for name, (url, hdrs) in variants.items():
                runs[name]["lat"].append(wrk(url, 1, a.seconds, hdrs))
                runs[name]["tput"].append(wrk(url, 32, a.seconds, hdrs))
            print(f"rep {rep + 1}/{a.reps}: " + ", ".join(
                f"{n}: p50 {runs[n]['lat'][-1]['p50_us']:.0f}us {runs[n]['tput'][-1]['rps']:.0f} req/s" for n in variants))
        report(runs, a)
    finally:
        procs.stop_all()


def report(runs, a):
    d, acc = runs["direct"], runs["agent, offer accepted"]
    added50 = [x["p50_us"] - y["p50_us"] for x, y in zip(acc["lat"], d["lat"])]
    added99 = [x["p99_us"] - y["p99_us"] for x, y in zip(acc["lat"], d["lat"])]
    ratio = [x["rps"] / y["rps"] for x, y in zip(acc["tput"], d["tput"])]
    rows = []
    for name, r in runs.items():
        rows.append(f"| {name} | {median([x['p50_us'] for x in r['lat']]):.0f} | {median([x['p99_us'] for x in r['lat']]):.0f} "
                    f"| {median([x['rps'] for x in r['tput']]):.0f} |")
    m50, h50 = ci95(added50)
    m99, h99 = ci95(added99)
    mr, hr = ci95(ratio)
    named = runs.get("agent, offer accepted, hunt-front")
    front = ""
    if named:
        fr = [x["rps"] / y["rps"] for x, y in zip(named["tput"], acc["tput"])]
        f50 = [x["p50_us"] - y["p50_us"] for x, y in zip(named["lat"], acc["lat"])]
        (mf, hf), (m5, h5) = ci95(fr), ci95(f50)
        front = (f"\nCounting per front (`hunt-front`, what the Envoy front sends) against the same offer without it: "
                 f"req/s ratio **{mf:.3f} ± {hf:.3f}**, p50 {m5:+.1f} ± {h5:.1f} us.\n")
    md = f"""# Agent overhead

`make bench-agent` ({machine()}). A tiny page from the workload app (zero service
demand), HTTP/1.1 keep-alive, measured with Debian's `wrk` (closed loop): latency
with 1 connection, req/s with 32 connections; app and agent pinned to CPU 0, wrk
to CPU 1, so req/s is what one core serves. {a.reps} repetitions of {a.seconds:.0f} s
per variant, variants alternated.

| variant | p50 us | p99 us | req/s (1 core) |
|---------|-------:|-------:|---------------:|
{chr(10).join(rows)}

Medians over repetitions. Added by the agent (accepted offer minus direct, paired
per repetition, mean ± 95% CI): **p50 {m50:.1f} ± {h50:.1f} us**, p99 {m99:.1f} ± {h99:.1f} us;
req/s ratio {mr:.3f} ± {hr:.3f} (the agent shares the app's core). Target: <= 30 us p50 added.
A refused offer is answered by the agent alone: its latency is the refusal's cost.
{front}"""
    write_result("agent-overhead", {"machine": machine(), "reps": a.reps, "seconds": a.seconds, "runs": runs,
                                    "added_p50_us": added50, "added_p99_us": added99, "rps_ratio": ratio}, md)
    print(md)


if __name__ == "__main__":
    main()
