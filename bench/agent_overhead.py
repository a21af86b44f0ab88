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
from benchlib.render import render, shown_in
from benchlib.reports import machine, parse_or_rewrite, write_result
from benchlib.stats import ci95, median
from benchlib.tools import wrk
from harness import OFFER, Addrs, Procs

OFFER_HDRS = OFFER


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4)
    a = parse_or_rewrite(ap, {"agent-overhead": report})
    if a is None:
        return
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
        d, acc = runs["direct"], runs["agent, offer accepted"]
        data = {"machine": machine(), "reps": a.reps, "seconds": a.seconds, "runs": runs,
                "added_p50_us": [x["p50_us"] - y["p50_us"] for x, y in zip(acc["lat"], d["lat"])],
                "added_p99_us": [x["p99_us"] - y["p99_us"] for x, y in zip(acc["lat"], d["lat"])],
                "rps_ratio": [x["rps"] / y["rps"] for x, y in zip(acc["tput"], d["tput"])]}
        md = report(data)
        write_result("agent-overhead", data, md)
        print(md)
    finally:
        procs.stop_all()


def report(data: dict) -> str:
    """The report, from the data main wrote (or the committed data: `--report-only`)."""
    runs = data["runs"]
    rows = []
    for name, r in runs.items():
        rows.append(f"| {name} | {median([x['p50_us'] for x in r['lat']]):.0f} | {median([x['p99_us'] for x in r['lat']]):.0f} "
                    f"| {median([x['rps'] for x in r['tput']]):.0f} |")
    m50, h50 = ci95(data["added_p50_us"])
    m99, h99 = ci95(data["added_p99_us"])
    mr, hr = ci95(data["rps_ratio"])
    acc, named = runs["agent, offer accepted"], runs.get("agent, offer accepted, hunt-front")
    front = ""
    if named:
        fr = [x["rps"] / y["rps"] for x, y in zip(named["tput"], acc["tput"])]
        f50 = [x["p50_us"] - y["p50_us"] for x, y in zip(named["lat"], acc["lat"])]
        (mf, hf), (m5, h5) = ci95(fr), ci95(f50)
        front = render("agent-overhead.front", {"rps_ratio": f"{mf:.3f}", "rps_ratio_ci": f"{hf:.3f}", "added_p50": f"{m5:+.1f}",
                                                "added_p50_ci": f"{h5:.1f}"}, part=True)
    return render("agent-overhead", {
        "machine": data["machine"],
        "reps": data["reps"],
        "seconds": f"{data['seconds']:.0f}",
        "rows": "\n".join(rows),
        "added_p50": f"{m50:.1f}",
        "added_p50_ci": f"{h50:.1f}",
        "added_p99": f"{m99:.1f}",
        "added_p99_ci": f"{h99:.1f}",
        "rps_ratio": f"{mr:.3f}",
        "rps_ratio_ci": f"{hr:.3f}",
        "front": front,
    }, shown=shown_in(data))

if __name__ == "__main__":
    main()
