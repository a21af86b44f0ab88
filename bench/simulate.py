#!/usr/bin/env python3
"""Scenario 3: the ideal dispatcher, by simulation (huntlb-sim over the policy core).

Runs the SRLB experiment's model (same servers, workers, cores, backlog, mean
demand, and the λ0 measured by bench/srlb.py) for RR, SR_4/8/16, SR_dyn, a
proxy's own-view least-request (p2c, as Envoy LEAST_REQUEST) and ideal JSQ;
checks the simulator against the real 12-server runs (mean response time at
ρ <= 0.9), then shows 100 and 1000 servers at the same per-server load.

Usage: python3 bench/simulate.py [--reps 5]   (after bench/srlb.py)
       python3 bench/simulate.py --report-only   (rewrite the report from the committed data)
Writes docs/results/simulation.{md,png} and bench/data/simulation.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchlib import plots
from benchlib.render import render, shown_in
from benchlib.reports import RESULTS, data_path, machine, read_data, write_result
from benchlib.runs import load, select
from benchlib.stats import ci95, median
from benchlib.tools import huntlb_sim
from harness import binary

POLICIES = {"RR": "random", "SR_4": "hunt:static:4", "SR_8": "hunt:static:8", "SR_16": "hunt:static:16",
            "SR_dyn": "hunt:dynamic", "LEAST_REQUEST": "p2c", "JSQ": "jsq"}
RHOS = [0.1, 0.25, 0.4, 0.5, 0.61, 0.7, 0.8, 0.88, 0.95]
# The shipped fronts (bench/srlb.py --only own): hunting over the proxy's own
# least-loaded pick, the agent deciding with the front's count (hunt-seen, or
# Envoy's hunt-front) and seen_margin 1 (SR_slack: the label its measured runs
# carry, from the key's old name). Simulated at the real fleet's size only,
# for the agreement check (a full scan per request is slow at 1000 servers).
OWN = {"SR_slack/own": "hunt-least:dynamic:seen_margin=1"}


def sim(setup: dict, servers: int, dispatch: str, rates: list[float], requests: int, seed: int, proxies: int = 1) -> list[dict]:
    return huntlb_sim(binary("huntlb-sim"), [
        "--servers", str(servers), "--workers", str(setup["workers"]), "--cores", str(setup["cores"]), "--proxies", str(proxies),
        "--backlog", str(setup["backlog"]), "--mean-ms", str(setup["mean_ms"]), "--dispatch", dispatch,
        "--requests", str(requests), "--seed", str(seed), "--rate", ",".join(f"{r:.3f}" for r in rates)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="seeds per point")
    a = ap.parse_args()
    real = load(data_path("srlb-poisson"))
    setup, lam0 = real["setup"], real["probe"]["lambda0"]
    per_server = lam0 / setup["servers"]
    curves = []
    for servers in (setup["servers"], 100, 1000):
        # The same simulated duration at every size (requests in proportion to
        # servers): shorter runs end before the queues have built up.
        requests = 20000 * servers // setup["servers"]
        for name, dispatch in POLICIES.items():
            reps = [sim(setup, servers, dispatch, [r * per_server * servers for r in RHOS], requests, seed)
                    for seed in range(1, (a.reps if servers < 1000 else 2) + 1)]
            for i, rho in enumerate(RHOS):
                means = [rep[i]["mean_ms"] for rep in reps]
                m, h = ci95(means)
                curves.append({"servers": servers, "policy": name, "rho": rho, "mean_ms": m, "ci95": h,
                               "p99_ms": median([rep[i]["p99_ms"] for rep in reps]),
                               "acceptance": reps[0][i]["acceptance"], "rejected": sum(rep[i]["rejected"] for rep in reps)})
            print(f"{servers:5d} servers {name:14s} done", flush=True)
    curves += own_curves(setup, lam0, a.reps)
    # Many proxies (scenario 2's model): own-view least-request at 1..16 proxies, rho 0.88.
    many = []
    rate88 = 0.88 * lam0
    for name, dispatch in (("LEAST_REQUEST (p2c)", "p2c"), ("leastconn (least)", "least"), ("RR", "random"), ("SR_dyn", "hunt:dynamic")):
        for proxies in (1, 2, 4, 16):
            means = [sim(setup, setup["servers"], dispatch, [rate88], 20000, seed, proxies)[0]["mean_ms"]
                     for seed in range(1, a.reps + 1)]
            m, h = ci95(means)
            many.append({"policy": name, "proxies": proxies, "mean_ms": m, "ci95": h})
    # The model's own spread for one run as long as the real ones (10 s), 10 seeds.
    spread = []
    for name in ("RR", "SR_dyn"):
        for rho in (0.61, 0.8, 0.88):
            rate = rho * lam0
            means = [sim(setup, setup["servers"], POLICIES[name], [rate], int(rate * 10), seed)[0]["mean_ms"] for seed in range(1, 11)]
            m, _ = ci95(means)
            spread.append({"policy": name, "rho": rho, "cv": statistics.stdev(means) / m})
    agree, overlay = agreement(real, curves, setup)
    data = {"machine": machine(), "setup": setup, "lambda0": lam0, "reps": a.reps, "curves": curves, "agreement": agree, "many": many, "spread": spread,
            "real": {str(setup["servers"]): overlay}}
    plots.simulation(data, RESULTS)
    write_result("simulation", data, report(data))


def own_curves(setup: dict, lam0: float, seeds: int) -> list[dict]:
    """The shipped fronts' mode (OWN) at the real fleet's size, every RHOS point."""
    servers, out = setup["servers"], []
    for name, dispatch in OWN.items():
        reps = [sim(setup, servers, dispatch, [r * lam0 for r in RHOS], 20000, seed) for seed in range(1, seeds + 1)]
        for i, rho in enumerate(RHOS):
            m, h = ci95([rep[i]["mean_ms"] for rep in reps])
            out.append({"servers": servers, "policy": name, "rho": rho, "mean_ms": m, "ci95": h,
                        "p99_ms": median([rep[i]["p99_ms"] for rep in reps]),
                        "acceptance": reps[0][i]["acceptance"], "rejected": sum(rep[i]["rejected"] for rep in reps)})
    return out


def agreement(real: dict, curves: list[dict], setup: dict) -> tuple[list[dict], dict]:
    """The real 12-server runs next to the model: mean response time, rho <= 0.9
    (the rows), and every real point for the plot (the overlay)."""
    agree, real_pts, overlay = [], {}, {}
    for r in select(real["runs"], instances=1, valid=True):
        real_pts.setdefault(f"{r.proxy} {r.policy}", {}).setdefault(r.rho, []).append(r.mean_ms)
    for key, by_rho in real_pts.items():
        proxy, name = key.split(" ", 1)
        if name not in {**POLICIES, **OWN} or name == "LEAST_REQUEST":
            continue
        for rho, xs in by_rho.items():
            found = select(curves, servers=setup["servers"], policy=name, rho=rho)
            if not found:
                continue
            s = found[0]
            overlay.setdefault(name, []).append((rho, median(xs)))
            if rho <= 0.9:
                agree.append({"proxy": proxy, "policy": name, "rho": rho, "real_ms": median(xs), "sim_ms": s["mean_ms"],
                              "rel": median(xs) / s["mean_ms"] - 1, "runs": len(xs)})
    return agree, overlay


def own_only() -> None:
    """Simulate only the shipped fronts' mode and redo the agreement with the
    last sweep's real runs (its --only own runs included); every other curve
    stays as committed. Seconds, where the whole model takes minutes."""
    real = load(data_path("srlb-poisson"))
    data = read_data("simulation")
    setup = data["setup"]
    data["curves"] = [c for c in data["curves"] if c["policy"] not in OWN] + own_curves(setup, data["lambda0"], data["reps"])
    agree, overlay = agreement(real, data["curves"], setup)
    data.update(agreement=agree, real={str(setup["servers"]): overlay})
    plots.simulation(data, RESULTS)
    write_result("simulation", data, report(data))


def report(d: dict) -> str:
    agree, curves, n0 = d["agreement"], d["curves"], d["setup"]["servers"]
    worst = max(agree, key=lambda x: abs(x["rel"])) if agree else None
    within = sum(abs(x["rel"]) <= 0.15 for x in agree)
    rows = "\n".join(f"| {x['proxy']} | {x['policy']} | {x['rho']} | {x['runs']} | {x['real_ms']:.1f} | {x['sim_ms']:.1f} | {100 * x['rel']:+.0f}% |"
                     for x in sorted(agree, key=lambda x: (x["proxy"], x["policy"], x["rho"])))
    nruns = sorted({x["runs"] for x in agree})
    runs_note = (f"{nruns[0]}" if len(nruns) == 1 else f"{nruns[0]} to {nruns[-1]}") + " runs of 10 s per point"
    at = lambda n, p, rho: select(curves, servers=n, policy=p, rho=rho)[0]  # noqa: E731
    big = []
    for n in sorted({c["servers"] for c in curves}):
        rr, dyn, best, jsq = at(n, "RR", 0.88), at(n, "SR_dyn", 0.88), min((at(n, p, 0.88) for p in ("SR_4", "SR_8", "SR_16")),
                                                                         key=lambda c: c["mean_ms"]), at(n, "JSQ", 0.88)
        big.append(f"| {n} | {rr['mean_ms']:.1f} | {dyn['mean_ms']:.1f} ({rr['mean_ms'] / dyn['mean_ms']:.2f}×) | "
                   f"{best['mean_ms']:.1f} {best['policy']} ({rr['mean_ms'] / best['mean_ms']:.2f}×) | {jsq['mean_ms']:.1f} "
                   f"({rr['mean_ms'] / jsq['mean_ms']:.2f}×) |")
    if not worst:
        return "no real runs to compare with\n"
    proxies = sorted({m["proxies"] for m in d["many"]})
    many_rows = [f"| {p} | " + " | ".join(f"{m['mean_ms']:.1f} ± {m['ci95']:.1f}" for m in d["many"] if m["policy"] == p) + " |"
                 for p in dict.fromkeys(m["policy"] for m in d["many"])]
    return render("simulation", {
        "machine": d["machine"],
        "n0": n0,
        "workers": d["setup"]["workers"],
        "cores": f"{d['setup']['cores']:.0f}",
        "backlog": d["setup"]["backlog"],
        "mean_ms": f"{d['setup']['mean_ms']:.0f}",
        "lambda0": f"{d['lambda0']:.0f}",
        "reps": d["reps"],
        "runs_note": runs_note,
        "within": within,
        "points": len(agree),
        "gap_median": f"{100 * statistics.median(x['rel'] for x in agree):+.0f}",
        "slow_side": sum(x["rel"] > 0 for x in agree),
        "worst_gap": f"{100 * worst['rel']:+.1f}",
        "worst_proxy": worst["proxy"],
        "worst_policy": worst["policy"],
        "worst_rho": worst["rho"],
        "spread": ", ".join(f"{x['policy']} ρ {x['rho']} {100 * x['cv']:.0f}%" for x in d["spread"]),
        "rows": rows,
        "many_heads": " | ".join(f"{n} prox{'y' if n == 1 else 'ies'}" for n in proxies),
        "many_aligns": "|".join("---:" for _ in proxies),
        "many_rows": "\n".join(many_rows),
        "big_rows": "\n".join(big),
    }, shown=shown_in(d))


def rewrite_report() -> None:
    """Rewrite simulation.md from the committed data (no simulation)."""
    data = read_data("simulation")
    write_result("simulation", data, report(data))


if __name__ == "__main__":
    if sys.argv[1:] == ["--report-only"]:
        rewrite_report()
    elif sys.argv[1:] == ["--own-only"]:
        own_only()
    else:
        main()
