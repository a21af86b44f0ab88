#!/usr/bin/env python3
"""Under the endpoint pickers users already run: GIE-style pickers, one per
gateway, naming agents with `fleet_pass_plain` beside the model servers
(make bench-llm-pickers).

The bed is bench/llm_gateways.py's (8 emulated model servers at its
TIME_SCALE, its workloads, calibrations and server flags; the calibrations
are copied from its data, so the load is the same), and so are the arms
(its ARMS table): the picker alone (eppN: `huntlb-epp` straight to the
servers; epppN: with GIE's prefix-cache-scorer), the same pickers over the
agents (eppaN, epppaN: the picker names the agent beside each server and
reads the engine's /metrics, `huntlb-epp --metrics-port`; the agents run
load = "llm" with `fleet_pass_plain`, so a pick whose server is full is passed
on to a less loaded member of the tier), least-request straight (lrN) and
hunting alone (huntN, huntpN), at 1, 2 and 4 gateways, each gateway with its
own picker and its own source IP.

A repetition is one seed shared by every arm (the arms' order turning with
the repetition); each invocation runs the repetitions it is given on one
workload and adds its runs to bench/data/llm-pickers.json, and the report
(docs/results/llm-pickers.md) is rewritten from the data: per arm its
medians, the paired ratios with 95% CIs (the median's distribution-free CI
from 6 repetitions, else the mean's t CI), the prefix-cache hit share, the
agents' CPU per request, requests the servers served against what the
clients received (a request processed twice would show as more), and the
verdicts against the acceptance bounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchlib import data as rundata
from benchlib.llmfleet import llm_agents, model_fleet
from benchlib.render import render, shown_in
from benchlib.reports import RESULTS, data_path, flag, machine, write_result
from benchlib.stats import ci95, median_ci95
from harness import Addrs, Procs
from llm_gateways import (AGENTS, ARMS, NAME as GATEWAYS, SEATS, SERVER_FLAGS, SERVERS, TIME_SCALE, WORKLOADS, fleet_name,
                          fleet_of, fmt_ratio, load_data, params, ratios, run_arm)

NAME = "llm-pickers"
# The arms each workload runs by default: on sharegpt the picker without its
# prefix scorer (the scorer scores nothing on prompts that share no prefix);
# on shared-prefix both, and least-request at each count, which the
# prefix-scoring picker over agents at that count is held to
DEFAULT_ARMS = {
    "sharegpt": ["epp1", "epp4", "eppa1", "eppa2", "eppa4", "hunt4"],
    "shared-prefix": ["epp4", "eppa1", "eppa2", "eppa4", "eppp4", "epppa1", "epppa2", "epppa4", "epppx1", "epppx2", "epppx4",
                      "lr1", "lr2", "lr4"],
}
# N active pickers over agents are held to one picker over agents, TTFT p50
# and p90, within this
BOUND = 1.10
# The pairs the report shows, per workload: (arm, against), when both ran
PAIRS = [
    # several active pickers over agents, against one
    ("eppa2", "eppa1"), ("eppa4", "eppa1"), ("epppa2", "epppa1"), ("epppa4", "epppa1"), ("epppx2", "epppx1"), ("epppx4", "epppx1"),
    # the same pickers alone
    ("epp2", "epp1"), ("epp4", "epp1"), ("eppp2", "eppp1"), ("eppp4", "eppp1"),
    # over agents against alone, at the same count
    ("eppa1", "epp1"), ("eppa2", "epp2"), ("eppa4", "epp4"), ("epppa1", "eppp1"), ("epppa2", "eppp2"), ("epppa4", "eppp4"),
    # the prefix-scoring picker over agents against least-request, and against the picker without the scorer over agents
    ("epppa1", "lr1"), ("epppa2", "lr2"), ("epppa4", "lr4"), ("epppa1", "eppa1"), ("epppa2", "eppa2"), ("epppa4", "eppa4"),
    ("epppx4", "epppa4"), ("epppx4", "lr4"),
    # hunting alone against the pickers over agents
    ("hunt4", "eppa4"), ("huntp4", "epppa4"), ("huntp4", "eppa4"),
]
KEYS = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_mean_ms")


def interval(xs: list[float]) -> tuple[float, float, str]:
    """The 95% CI of the ratios: the median's (6 or more), else the mean's t CI."""
    lo, hi = median_ci95(xs)
    if hi == hi:
        return lo, hi, "the median's CI"
    m, h = ci95(xs)
    return m - h, m + h, "the mean's CI"


def verdicts(runs: list[dict]) -> list[str]:
    """Each acceptance point on this workload's runs, from the paired ratios."""
    out = []
    have = {r["arm"] for r in runs}

    def within(arm: str, one: str, keys: tuple[str, ...], bound: float) -> None:
        for k in keys:
            xs = ratios(runs, arm, k, one)
            if not xs:
                continue
            med = statistics.median(xs)
            lo, hi, which = interval(xs)
            held = "missed" if med > bound else "holds" if hi <= bound else f"holds at the median, not at the upper end of {which}"
            out.append(f"* {arm} / {one}, TTFT {k.split('_')[1]}: {med:.3f}, {which} [{lo:.3f}, {hi:.3f}]: within {bound:.2f}x {held}")

    for arm, one in [("eppa2", "eppa1"), ("eppa4", "eppa1"), ("epppa2", "epppa1"), ("epppa4", "epppa1")]:
        if arm in have and one in have:
            within(arm, one, ("ttft_p50_ms", "ttft_p90_ms"), BOUND)
    for arm, alone in [("eppa4", "epp4"), ("epppa4", "eppp4")]:
        xs = ratios(runs, arm, "ttft_p90_ms", alone) if arm in have and alone in have else []
        if xs:
            m, h = ci95(xs)
            word = "better: the mean's CI below 1" if m + h < 1 else "worse: the mean's CI above 1" if m - h > 1 else "the mean's CI spans 1"
            out.append(f"* {arm} / {alone}, TTFT p90: mean {m:.3f} ± {h:.3f} ({word})")
    for n in (1, 2, 4):
        if f"epppa{n}" in have and f"lr{n}" in have:
            within(f"epppa{n}", f"lr{n}", ("ttft_p90_ms",), BOUND)
    # what the scorer buys, kept or lost under the agents: the hit shares side by side
    hits = [f"{arm} {100 * statistics.median(r['prefix_hit_share'] for r in runs if r['arm'] == arm):.1f}%"
            for arm in ARMS if arm in have and ARMS[arm].kind in ("eppp", "lr")]
    if hits:
        out.append("* prefix-cache hits (median share of prompt tokens): " + ", ".join(hits))
    errors = sum(r["errors"] for r in runs)
    # every request the clients had answered was served once: the servers
    # finished exactly as many (a request processed twice would be one more)
    extra = sum(sum(r["served_per_server"]) - r["ok"] for r in runs)
    out.append(f"* client errors over every run: {errors}; requests the servers finished minus answers the clients received: {extra:g}"
               + (" (nothing processed twice)" if extra == 0 else ""))
    return out


def tables(runs: list[dict], arms: list[str]) -> dict:
    def med(rs: list[dict], k: str) -> float:
        xs = [r[k] for r in rs if r.get(k) is not None and r[k] == r[k]]
        return statistics.median(xs) if xs else float("nan")
    rows = []
    for arm in arms:
        rs = [r for r in runs if r["arm"] == arm]
        if not rs:
            continue
        x = ARMS[arm]
        over = f"agents ({fleet_name(arm)})" if x.via_agents or x.kind == "hunt" else "servers"
        extra = sum(sum(r["served_per_server"]) - r["ok"] for r in rs)
        rows.append(f"| {arm} | {x.kind} | {x.gateways} | {over} | {len(rs)} | {med(rs, 'ttft_p50_ms'):.1f} | {med(rs, 'ttft_p90_ms'):.1f} | "
                    f"{med(rs, 'ttft_p99_ms'):.1f} | {med(rs, 'e2e_mean_ms'):.1f} | {100 * med(rs, 'prefix_hit_share'):.1f} | "
                    f"{med(rs, 'forwards_per_s'):.2f} | {med(rs, 'agents_cpu_ms_per_req'):.3f} | {med(rs, 'gateways_cpu'):.2f} | "
                    f"{med(rs, 'scrapes_per_s'):.0f} | {flag(sum(r['errors'] for r in rs))} | {extra:g} |")
    pairs = []
    for arm, other in PAIRS:
        if any(r["arm"] == arm for r in runs) and any(r["arm"] == other for r in runs):
            pairs.append(f"| {arm} / {other} | " + " | ".join(fmt_ratio(ratios(runs, arm, k, other)) for k in KEYS) + " |")
    per_run = [f"| {r['rep']} | {r['arm']} | {r['scheduled']} | {r['ttft_p50_ms']:.1f} | {r['ttft_p90_ms']:.1f} | {r['ttft_p99_ms']:.1f} | "
               f"{100 * r['prefix_hit_share']:.1f} | {r['forwards_per_s']:.2f} | {r['agents_cpu_ms_per_req']:.3f} | {flag(r['errors'])} | "
               f"{sum(r['served_per_server']) - r['ok']:g} |"
               for r in sorted(runs, key=lambda r: (r["rep"], list(ARMS).index(r["arm"])))]
    return {"rows": "\n".join(rows), "pairs": "\n".join(pairs), "verdicts": "\n".join(verdicts(runs)),
            "reps": str(len({r["rep"] for r in runs})), "per_run": "\n".join(per_run)}


def report(data: dict) -> str:
    shown = shown_in(data)
    parts = []
    for w in WORKLOADS:
        runs = [r for r in data["runs"] if r["workload"] == w]
        if not runs:
            continue
        p = data["workloads"][w]
        flags = SERVER_FLAGS.get(w, {})
        values = {"workload": w, "rate": f"{p['rate']:.2f}", "rho": f"{p['rho']:.2f}", "seconds": f"{p['seconds']:g}",
                  "capacity": f"{p['calibration']['per_server_rps'] * SERVERS:.2f}",
                  "server_flags": ", ".join(f"`--{k.replace('_', '-')} {v}`" for k, v in flags.items()) or "the emulator's defaults",
                  **tables(runs, [a for a in ARMS if any(r["arm"] == a for r in runs)])}
        parts.append(render(f"{NAME}.workload", values, part=True))
    values = {"machine": data["machine"], "servers": str(SERVERS), "seats": str(SEATS), "time_scale": str(TIME_SCALE),
              "bound": f"{BOUND:.2f}", "workloads": "\n\n".join(parts)}
    return render(NAME, values, shown=shown)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="sharegpt", choices=list(DEFAULT_ARMS))
    ap.add_argument("--reps", type=int, default=1, help="repetitions this invocation runs")
    ap.add_argument("--first-rep", type=int, default=0)
    ap.add_argument("--arms", default=None, help="arms to run, comma separated (default: the workload's, DEFAULT_ARMS)")
    ap.add_argument("--rho", type=float, default=0.85, help="load, as a fraction of the fleet's calibrated throughput")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of arrivals a run")
    ap.add_argument("--out", type=Path, default=RESULTS, help="data and report to this directory (a smoke run), not bench/data and docs/results")
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    w = a.workload
    path = data_path(NAME, a.out)
    data = rundata.read(path) if path.exists() else {"machine": machine(), "runs": [], "workloads": {}}
    if a.report_only:
        write_result(NAME, data, report(data), a.out)
        return 0
    arms = a.arms.split(",") if a.arms else DEFAULT_ARMS[w]
    unknown = [x for x in arms if x not in ARMS or ARMS[x].proxy != "envoy"]
    if unknown:
        ap.error(f"--arms: no Envoy arm {unknown}; the arms: {', '.join(x for x in ARMS if ARMS[x].proxy == 'envoy')}")
    # the load is llm_gateways' on this workload: its calibration, copied
    cal = params(load_data() or {}, w)
    if cal is None or "calibration" not in cal:
        raise SystemExit(f"no calibration of {w} in bench/data/{GATEWAYS}.json: run bench/llm_gateways.py --workload {w} --calibrate first")
    p = data["workloads"].setdefault(w, {})
    if p.get("calibration", cal["calibration"]) != cal["calibration"]:
        # another capacity makes another rate: the workload's runs at the old one go
        data["runs"] = [r for r in data["runs"] if r["workload"] != w]
    p.update(calibration=cal["calibration"], rho=a.rho, seconds=a.seconds, rate=a.rho * cal["calibration"]["per_server_rps"] * SERVERS)
    work = Path(tempfile.mkdtemp(prefix="huntlb-llm-pickers-"))
    procs, addrs = Procs(work), Addrs()
    try:
        fleet = model_fleet(procs, addrs, SERVERS, SEATS, TIME_SCALE, **SERVER_FLAGS.get(w, {}))
        fleets = {"counts": fleet}
        for name, opts in AGENTS.items():
            if opts is not None and any(fleet_name(x) == name for x in arms):
                if opts.get("kv_busy_at") == "default":
                    raise SystemExit("the kv agents are bench/llm_gateways.py's")
                fleets[name] = llm_agents(procs, fleet, SEATS, **opts)
        for rep in range(a.first_rep, a.first_rep + a.reps):
            seed = 1 + rep * 1_000_003
            order = arms[rep % len(arms):] + arms[:rep % len(arms)]
            for arm in order:
                res = run_arm(work, addrs, fleet_of(arm, fleets), arm, p["rate"], a.seconds, seed, rep, workload=w)
                data["runs"] = [r for r in data["runs"] if not (r["workload"] == w and r["rep"] == rep and r["arm"] == arm)] + [res]
                rundata.write(path, data)
    finally:
        procs.stop_all()
    write_result(NAME, data, report(data), a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
