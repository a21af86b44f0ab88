#!/usr/bin/env python3
"""SRLB's Poisson experiment (seed 002, Section V) through the real proxies.

12 workload apps (32 workers, 2 emulated cores, backlog 128, exponential demand
scaled from the paper's 100 ms to 20 ms so a sweep fits on a 2-core machine),
each behind a huntlb agent. λ0 is measured first as in the paper: the smallest
Poisson rate at which a 20000-query RR run drops requests (a full backlog).
Then ρ = λ/λ0 is swept through Envoy and HAProxy with RR (random, no hunting),
SR_4, SR_8, SR_16, SR_dyn (hunting), and the proxies' own baselines (Envoy
LEAST_REQUEST; HAProxy leastconn, random(2)). ρ = 0.88 is repeated for
confidence intervals. Scenario 2 ("many proxies") runs ρ = 0.88 with 1, 2 and
4 independent instances of each front sharing the backends.

Usage: make bench-quick | make bench  (or python3 bench/srlb.py [--quick] [--only sweep|many])
Writes docs/results/srlb-poisson.{md,*.png} and many-proxies.{md,png}, their data
to bench/data/ (srlb-poisson.json, with each run's CDF in srlb-poisson.bulk.json.gz);
--quick writes all of it to bench/out/quick/ and leaves docs/results/ and bench/data/
alone; --report-only measures nothing and rewrites the reports and plots from their data.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchlib import plots
from benchlib.fleet import baselines
from benchlib.render import render, shown_in
from benchlib.reports import RESULTS, ROOT, data_path, flag, machine, write_result
from benchlib.runs import Run, load, paired, select
from benchlib.stats import ci95, median
from benchlib.testbed import (BACKLOG, CORES, MAX_LATENESS_US, MEAN_MS, PROBE_QUERIES, REPEATS, SERVERS, WORKERS, Bench,
                              last_lambda0, seconds_for)

QUICK_OUT = ROOT / "bench" / "out" / "quick"


def plan(quick: bool) -> dict:
    if quick:
        return {"rhos": [0.3, 0.61, 0.88], "policies": ["RR", "SR_4", "SR_dyn"], "reps": 3, "max_s": 5.0,
                "probe_steps": [1.0, 1.05, 1.1], "many": [1, 2], "many_reps": 1, "mid_reps": 1}
    # reps: paired repetitions at rho 0.88 (the headline ratios); mid_reps: runs
    # of each policy at every rho up to 0.8 (the report and the simulator check
    # take their median): one 10-s run varies by 3-7% by itself at rho 0.6-0.8
    # (the simulator's spread), and a stall of the shared VM can shift a whole
    # run at any rho. 8 rho points keep `make bench` under 90 minutes.
    return {"rhos": [0.1, 0.4, 0.5, 0.61, 0.7, 0.8, 0.88, 0.95],
            "policies": ["RR", "SR_4", "SR_8", "SR_16", "SR_dyn"], "reps": 5, "max_s": 10.0,
            "probe_steps": [0.95, 1.0, 1.025, 1.05, 1.075, 1.1, 1.125, 1.15], "many": [1, 2, 4], "many_reps": 2,
            "mid_reps": 3}


MID_RHOS = (0.1, 0.8)


def refill(b: Bench, data: dict) -> int:
    """Re-run the invalid runs of a finished sweep in place (same rate, policy,
    proxy and length); returns how many are still invalid."""
    left = 0
    for i, r in enumerate(data["runs"]):
        if r.valid or r.instances != 1:
            continue
        new = b.run(r.proxy, r.policy, r.rate, r.seconds, rho=r.rho, rep=r.rep, sample=r.samples is not None)
        new.attempts += r.attempts or 1
        data["runs"][i] = new
        left += not new.valid
    return left


def strategies(proxy: str, policies: list[str]) -> list[str]:
    return policies + baselines(proxy)


def sweep(b: Bench, p: dict) -> dict:
    print(f"probing lambda0 (capacity {b.fleet.capacity:.0f} req/s nominal)", flush=True)
    probe = b.probe_lambda0(p["probe_steps"])
    lam0 = probe["lambda0"]
    print(f"lambda0 = {lam0:.0f} req/s ({lam0 / b.fleet.capacity:.3f} x nominal)", flush=True)
    runs = []
    for rho in p["rhos"]:
        for proxy in b.proxies:
            for name in strategies(proxy, p["policies"]):
                rate = rho * lam0
                runs.append(b.run(proxy, name, rate, seconds_for(rate, p["max_s"]), rho=rho, rep=0,
                                  sample=(rho == 0.88 and name in ("RR", "SR_4"))))
    # Repetitions at rho 0.88, policies back to back in each repetition.
    for rep in range(1, p["reps"]):
        for proxy in b.proxies:
            for name in p["policies"]:
                rate = 0.88 * lam0
                runs.append(b.run(proxy, name, rate, seconds_for(rate, p["max_s"]), rho=0.88, rep=rep))
    runs += mid_reps(b, p, lam0, runs, p.get("mid_reps", 1))
    return {"probe": probe, "runs": runs}


def mid_reps(b: Bench, p: dict, lam0: float, runs: list[Run], want: int) -> list[Run]:
    """Runs at each rho in MID_RHOS until every policy has `want` of them
    (the rows the report and the simulator check take the median of)."""
    new = []
    for rep in range(1, want):
        for rho in [r for r in p["rhos"] if MID_RHOS[0] <= r <= MID_RHOS[1]]:
            for proxy in b.proxies:
                for name in p["policies"]:
                    if len(select(runs + new, proxy=proxy, policy=name, rho=rho, instances=1)) > rep:
                        continue
                    rate = rho * lam0
                    new.append(b.run(proxy, name, rate, seconds_for(rate, p["max_s"]), rho=rho, rep=rep, keep_cdf=False))
    return new


# The shipped fronts (hunting over each proxy's own least-loaded pick, agents
# on their default policy, dynamic:seen_margin=1) across the sweep's loads,
# added to the last sweep: what the simulator is checked against for the new
# mode (bench/simulate.py). Not one of the plan's policies, so the paper's
# headline (RR against the best SR_c) is unchanged. SR_slack: the label the
# measured runs carry (benchlib.fleet.HUNT_POLICIES).
OWN = "SR_slack/own"


def own(b: Bench, data: dict, reps: int) -> list[Run]:
    new = []
    lam0 = data["probe"]["lambda0"]
    for rep in range(reps):
        for rho in [r for r in data["plan"]["rhos"] if r <= 0.9]:
            for proxy in b.proxies:
                rate = rho * lam0
                new.append(b.run(proxy, OWN, rate, seconds_for(rate, data["plan"]["max_s"]), rho=rho, rep=rep, keep_cdf=False))
    return new


def many(b: Bench, p: dict, lam0: float) -> list[Run]:
    runs = []
    rate = 0.88 * lam0
    for rep in range(p["many_reps"]):
        for n in p["many"]:
            for proxy in b.proxies:
                for name in ["RR", "SR_dyn"] + baselines(proxy):
                    runs.append(b.run(proxy, name, rate, seconds_for(rate, p["max_s"]), rho=0.88, rep=rep, instances=n,
                                      keep_cdf=False))
    return runs


def ratio_stats(runs: list[Run], proxy: str, num: str, den: str, key: str) -> dict:
    """num/den of `key` over paired repetitions at rho 0.88, one front."""
    xs = paired(runs, num, den, key, proxy=proxy, rho=0.88, instances=1)
    m, h = ci95(xs)
    return {"ratios": xs, "mean": m, "ci95": h, "median": median(xs), "n": len(xs)}


def report_sweep(data: dict, p: dict, quick: bool) -> str:
    runs, probe = data["runs"], data["probe"]
    lam0 = probe["lambda0"]
    lines = []
    headline = {}
    for proxy in sorted({r.proxy for r in runs}):
        srcs = [n for n in p["policies"] if n.startswith("SR_") and n != "SR_dyn"]
        at88 = lambda n: [r.mean_ms for r in select(runs, proxy=proxy, policy=n, rho=0.88, valid=True)]  # noqa: E731
        best = min(srcs, key=lambda n: median(at88(n))) if srcs else None
        h = {"RR/SR_dyn mean": ratio_stats(runs, proxy, "RR", "SR_dyn", "mean_ms"),
             "RR/SR_dyn p99": ratio_stats(runs, proxy, "RR", "SR_dyn", "p99_ms")}
        if best:
            h[f"RR/{best} mean"] = ratio_stats(runs, proxy, "RR", best, "mean_ms")
            h[f"RR/{best} p99"] = ratio_stats(runs, proxy, "RR", best, "p99_ms")
        headline[proxy] = h
        for k, v in h.items():
            lines.append(f"| {proxy} | {k} | **{v['median']:.2f}×** | {v['mean']:.2f} ± {v['ci95']:.2f} | {v['n']} |")
    data["headline"] = headline
    table = []
    names = sorted({(r.proxy, r.policy) for r in runs}, key=lambda x: (x[0], x[1]))
    rhos = sorted({r.rho for r in runs})
    for proxy, name in names:
        cells = []
        for rho in rhos:
            ok = select(runs, proxy=proxy, policy=name, rho=rho, valid=True)
            # "-": not run at that rho (SR_slack/own stops at 0.88); "invalid": run, never valid
            cells.append(flag(sum(r.errors for r in ok), f"{median([r.mean_ms for r in ok]):.1f}") if ok else
                         "invalid" if select(runs, proxy=proxy, policy=name, rho=rho) else "-")
        table.append(f"| {proxy} | {name} | " + " | ".join(cells) + " |")
    invalid = sum(not r.valid for r in runs)
    repeated = sum((r.attempts or 1) > 1 for r in runs)
    errors = sum(r.errors for r in runs)
    acc = [f"{r.proxy} {r.policy} {r.acceptance:.2f}" for r in select(runs, rho=0.88, rep=0) if r.acceptance is not None]
    return render("srlb-poisson", {
        "command": "make bench-quick" if quick else "make bench",
        "machine": data["machine"],
        "servers": SERVERS,
        "workers": WORKERS,
        "cores": f"{CORES:.0f}",
        "backlog": BACKLOG,
        "mean_ms": f"{MEAN_MS:.0f}",
        "probe_queries": PROBE_QUERIES,
        "via": probe["via"],
        "lam0": f"{lam0:.0f}",
        "lam0_of_nominal": f"{lam0 / probe['nominal']:.3f}",
        "nominal": f"{probe['nominal']:.0f}",
        "max_s": f"{p['max_s']:.0f}",
        "own": OWN,
        "reps": p["reps"],
        "mid_low": MID_RHOS[0],
        "mid_high": MID_RHOS[1],
        "mid_reps": p.get("mid_reps", 1),
        "headline_rows": "\n".join(lines),
        "rho_heads": " | ".join(f"ρ {x}" for x in rhos),
        "rho_aligns": "|".join("---:" for _ in rhos),
        "mean_rows": "\n".join(table),
        "acceptance": ", ".join(acc),
        "max_lateness_ms": f"{MAX_LATENESS_US / 1000:.0f}",
        "repeated": repeated,
        "runs": len(runs),
        "invalid": invalid,
        "client_errors": flag(errors),
    }, shown=shown_in(data))


def report_many(data: dict, quick: bool) -> str:
    runs = data["runs"]
    rows = []
    ns = sorted({r.instances for r in runs})
    for proxy in sorted({r.proxy for r in runs}):
        for name in sorted({r.policy for r in select(runs, proxy=proxy)}):
            cells = []
            for n in ns:
                ok = select(runs, proxy=proxy, policy=name, instances=n, valid=True)
                cells.append(flag(sum(r.errors for r in ok), f"{median([r.mean_ms for r in ok]):.1f} / "
                                  f"{median([r.p99_ms for r in ok]):.0f}") if ok else "")
            rows.append(f"| {proxy} | {name} | " + " | ".join(cells) + " |")
    reps = max(r.rep for r in runs) + 1
    return render("many-proxies", {
        "command": "make bench-quick" if quick else "make bench",
        "machine": data["machine"],
        "servers": SERVERS,
        "reps": reps,
        "counts_heads": " | ".join(f"{n} instance(s)" for n in ns),
        "counts_aligns": "|".join("---:" for _ in ns),
        "rows": "\n".join(rows),
    }, shown=shown_in(data))


# Scenario 3 (docs/results/vs-least.md): hunting against the balancer users run, paired. Per
# proxy: (its own least-request as configured by default, hunting over that
# pick, hunting over a random pick, then any stronger least-request it has).
# Envoy's default compares two random hosts; FULL_SCAN (LR/full) compares all.
# FWD/*: the same shipped front, over agents that form a forwarding tier.
VS_LEAST = {"envoy": {"baselines": ("LEAST_REQUEST", "LR/full"), "hunting": ("SR_slack/full", "FWD/full", "SR_dyn")},
            "haproxy": {"baselines": ("leastconn",), "hunting": ("SR_slack/least", "FWD/least", "SR_dyn")}}


def vs_least_names(proxy: str) -> tuple[str, ...]:
    return VS_LEAST[proxy]["baselines"] + VS_LEAST[proxy]["hunting"]


def vs_least(b: Bench, lam0: float, reps: int, counts: list[int]) -> list[Run]:
    """rho 0.88, each count of front instances, the three strategies back to back
    in each repetition (reversed every other one), so ratios pair runs that met
    the same machine."""
    runs = []
    rate = 0.88 * lam0
    for rep in range(reps):
        for n in counts:
            for proxy in [p for p in b.proxies if p in VS_LEAST]:
                names = vs_least_names(proxy) if rep % 2 == 0 else vs_least_names(proxy)[::-1]
                for name in names:
                    runs.append(b.run(proxy, name, rate, seconds_for(rate, 10.0), rho=0.88, rep=rep, instances=n, keep_cdf=False))
    return runs


def report_vs_least(data: dict) -> str:
    """The report; adds its paired ratios to `data` ("ratios", rounded as the
    report prints them, as text), so a ratio the README quotes greps to its data too."""
    runs, lam0 = data["runs"], data["lambda0"]
    rows, ratios, summary = [], [], []
    for proxy in sorted({r.proxy for r in runs}):
        bases, hunting = VS_LEAST[proxy]["baselines"], VS_LEAST[proxy]["hunting"]
        for n in sorted({r.instances for r in runs if r.proxy == proxy}):
            for name in bases + hunting:
                sel = select(runs, proxy=proxy, policy=name, instances=n)
                if not sel:  # a baseline added after these runs
                    continue
                ok = select(sel, valid=True)
                acc = [r.acceptance for r in ok if r.acceptance is not None]
                rows.append(f"| {proxy} | {n} | {name} | {median([r.mean_ms for r in ok]):.1f} | "
                            f"{median([r.p99_ms for r in ok]):.0f} | {f'{median(acc):.2f}' if acc else '-'} | "
                            f"{len(ok)}/{len(sel)} | {flag(sum(r.errors for r in sel))} |")
            for base in bases:
                for name in hunting:
                    for key in ("mean_ms", "p99_ms"):
                        xs = paired(runs, name, base, key, proxy=proxy, instances=n)
                        if not xs:  # a baseline added after these runs
                            continue
                        m, h = ci95(xs)
                        ratios.append(f"| {proxy} | {n} | {name} / {base} | {key[:-3]} | **{median(xs):.3f}** | {m:.3f} ± {h:.3f} "
                                      f"| {len(xs)} |")
                        summary.append({"proxy": proxy, "fronts": n, "ratio": f"{name} / {base}", "of": key[:-3],
                                        "median": f"{median(xs):.3f}", "mean": f"{m:.3f}", "ci95": f"{h:.3f}", "pairs": len(xs)})
    data["ratios"] = summary
    reps = max(r.rep for r in runs) + 1
    ran_on = "; ".join(f"{p} on {m}" for p, m in sorted(data.get("machines", {}).items())) or data["machine"]
    return render("vs-least", {
        "ran_on": ran_on,
        "servers": SERVERS,
        "workers": WORKERS,
        "cores": f"{CORES:g}",
        "mean_ms": f"{MEAN_MS:g}",
        "lam0": f"{lam0:.0f}",
        "reps": reps,
        "repeats": REPEATS,
        "rows": "\n".join(rows),
        "ratio_rows": "\n".join(ratios),
    }, shown=shown_in(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 rho points, 3 policies, short runs (~6 min)")
    ap.add_argument("--only", choices=["sweep", "many", "vs-least", "own"],
                    help="one scenario (many and vs-least reuse the last sweep's lambda0)")
    ap.add_argument("--reps", type=int, default=5, help="vs-least: paired repetitions")
    ap.add_argument("--proxies", default="envoy,haproxy")
    ap.add_argument("--refill", action="store_true", help="re-run the invalid runs of the last sweep, rewrite its report")
    ap.add_argument("--mid-reps", type=int, help="add runs at rho <= 0.8 to the last sweep, up to this many per point; rewrite its report")
    ap.add_argument("--report-only", action="store_true",
                    help="measure nothing: rewrite the sweep's, many proxies' and vs-least's reports and plots from their data")
    a = ap.parse_args()
    p = plan(a.quick)
    out = QUICK_OUT if a.quick else RESULTS
    if a.report_only:
        rewrite_reports(out, a.quick)
        return
    work = Path(tempfile.mkdtemp(prefix="huntlb-srlb-"))
    b = Bench(work, a.proxies.split(","), a.quick)
    t0 = time.monotonic()
    try:
        if a.refill or a.mid_reps:
            data = load(data_path("srlb-poisson", out))
            if a.refill:
                print(f"refill: {refill(b, data)} runs still invalid", flush=True)
            if a.mid_reps:
                data["runs"] += mid_reps(b, data["plan"], data["probe"]["lambda0"], data["runs"], a.mid_reps)
                data["plan"]["mid_reps"] = a.mid_reps
            plots.srlb(data, out)
            write_result("srlb-poisson", data, report_sweep(data, data["plan"], a.quick), out)
            return
        if a.only == "own":
            data = load(data_path("srlb-poisson", out))
            data["runs"] = [r for r in data["runs"] if not (r.policy == OWN and r.proxy in b.proxies)] + own(b, data, 3)
            plots.srlb(data, out)
            write_result("srlb-poisson", data, report_sweep(data, data["plan"], a.quick), out)
            return
        if a.only == "vs-least":
            lam0 = last_lambda0()
            runs = vs_least(b, lam0, a.reps, [1, 4])
            # the proxies not measured this time keep their last runs (and machine note)
            machines = {p: machine() for p in b.proxies}
            if data_path("vs-least", out).exists():
                old = load(data_path("vs-least", out))
                runs += [r for r in old["runs"] if r.proxy not in b.proxies]
                machines = {**{r.proxy: old.get("machines", {}).get(r.proxy, old["machine"]) for r in old["runs"]}, **machines}
            data = {"machine": machine(), "machines": machines, "lambda0": lam0, "runs": runs}
            write_result("vs-least", data, report_vs_least(data), out)
            return
        if a.only != "many":
            data = sweep(b, p)
            data.update({"machine": machine(), "plan": p, "quick": a.quick, "setup": {
                "servers": SERVERS, "workers": WORKERS, "cores": CORES, "backlog": BACKLOG, "mean_ms": MEAN_MS}})
            md = report_sweep(data, p, a.quick)
            plots.srlb(data, out)
            write_result("srlb-poisson", data, md, out)
            lam0 = data["probe"]["lambda0"]
        else:
            lam0 = last_lambda0(out)
        if a.only != "sweep":
            data = {"machine": machine(), "lambda0": lam0, "runs": many(b, p, lam0)}
            plots.many(data["runs"], out)
            write_result("many-proxies", data, report_many(data, a.quick), out)
    finally:
        b.close()
    print(f"done in {time.monotonic() - t0:.0f} s")


def rewrite_reports(out: Path, quick: bool) -> None:
    """Each of the sweep's, many proxies' and vs-least's results found for `out`,
    re-rendered from its data: report, plots, and the data itself (unchanged)."""
    if data_path("srlb-poisson", out).exists():
        data = load(data_path("srlb-poisson", out))
        plots.srlb(data, out)
        write_result("srlb-poisson", data, report_sweep(data, data["plan"], data.get("quick", quick)), out)
    if data_path("many-proxies", out).exists():
        data = load(data_path("many-proxies", out))
        plots.many(data["runs"], out)
        write_result("many-proxies", data, report_many(data, quick), out)
    if data_path("vs-least", out).exists():
        data = load(data_path("vs-least", out))
        write_result("vs-least", data, report_vs_least(data), out)


if __name__ == "__main__":
    main()
