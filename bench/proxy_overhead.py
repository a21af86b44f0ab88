#!/usr/bin/env python3
"""Proxy overhead: the hunting front vs the same proxy plain (make bench-proxies).

Three measurements, each side by side in one run, repetitions alternating the
variants; tiny page, HTTP/1.1 keep-alive, one proxy worker (Envoy
`--concurrency 1`, HAProxy `nbthread 1`):

1. The proxy alone is the bottleneck (this decides the ">= 95% of plain req/s"
   targets). The proxy is pinned to CPU 0 with nothing else on it; the backends
   (one static HAProxy responder listening on N addresses: a backend without an
   agent, so every offer is accepted) and wrk run on CPU 1. The proxy's CPU use
   is recorded to show that it, not CPU 1, was the limit.
2. HAProxy's user-space instructions per request, counted by callgrind: free of
   this machine's noise, the same on any x86-64. The background task is slowed
   to one run a minute here (valgrind stretches time) and its own cost is
   measured natively instead: idle CPU per second, hunting minus plain.
3. Through real agents on this 2-core machine: the hunting front's latency when
   the offer is accepted first vs refused then accepted (agents that refuse
   every offer), and the whole chain's req/s (agents' offer handling included).
"""

from __future__ import annotations

import argparse
import re
import shutil
import time

from benchlib.fronts import BACKENDS, Bed, overhead_bed, pin
from benchlib.render import render, shown_in
from benchlib.reports import flag, machine, parse_or_rewrite, write_result
from benchlib.stats import ci95, median, paired_ratio
from benchlib.tools import BROWSER_HEADERS, REQUESTS, instructions_per_request, proc_cpu_seconds, wrk, wrk_errors
from harness import start_backends

def no_l7_retries(text: str) -> str:
    """Plain HAProxy as it comes: no `retry-on` (only connection failures are
    retried) and no request buffering, so no copy of each request is kept."""
    return "\n".join(l for l in text.splitlines() if "retry-on" not in l and "http-buffer-request" not in l) + "\n"


VARIANTS = (("envoy", "plain", False, None), ("envoy", "hunting", True, None),
            ("haproxy", "plain, no L7 retries", False, no_l7_retries),
            ("haproxy", "plain", False, None), ("haproxy", "hunting", True, None))


def bottleneck(bed: Bed, reps: int, seconds: int, proxies=("envoy", "haproxy")) -> dict:
    fronts = {}
    for proxy, label, hunting, edit in [v for v in VARIANTS if v[0] in proxies]:
        name = f"{proxy} {label}"
        fronts[name] = bed.front(proxy, hunting, re.sub(r"[^a-z0-9]+", "-", name), edit=edit)
        pin(fronts[name].pid, 0)
    runs = {f"{name}, {kind}": [] for kind in REQUESTS for name in fronts}
    for rep in range(reps):
        order = list(fronts.items())
        if rep % 2:
            order.reverse()  # ABBA: no variant always runs first
        for kind, headers in REQUESTS.items():
            for name, f in order:
                c0, t0 = proc_cpu_seconds(f.pid), time.monotonic()
                r = wrk(f.url, 32, seconds, headers=headers)
                used, wall = proc_cpu_seconds(f.pid) - c0, time.monotonic() - t0
                r["cpu_us_per_req"] = used / max(r["rps"] * seconds, 1) * 1e6
                r["proxy_cpu_util"] = used / wall
                runs[f"{name}, {kind}"].append(r)
        print(f"bottleneck rep {rep + 1}/{reps}: " + ", ".join(f"{n}: {runs[n][-1]['rps']:.0f}" for n in runs), flush=True)
    for f in fronts.values():
        f.proc.stop()
    return runs


def instructions(bed: Bed, requests: int) -> dict:
    """User-space instructions per request of HAProxy plain vs hunting (callgrind)."""
    if not shutil.which("valgrind") or not shutil.which("ab"):
        print("instructions: valgrind or ab missing (make bench-setup); skipped")
        return {}
    out = {}
    for label, hunting, edit in (("plain, no L7 retries", False, no_l7_retries), ("plain", False, None), ("hunting", True, None)):
        out[label] = {"instructions_per_request": instructions_per_request(bed, label, hunting, edit, requests),
                      "requests": requests}
    return out


def idle_task_cost(bed: Bed, seconds: int = 10) -> dict:
    """CPU per second of an idle HAProxy front, plain vs hunting: the module's
    background task (and the same health checks in both)."""
    out = {}
    for hunting in (False, True):
        name = "haproxy-idle-" + ("hunting" if hunting else "plain")
        f = bed.front("haproxy", hunting, name)
        c0 = proc_cpu_seconds(f.pid)
        time.sleep(seconds)
        out["hunting" if hunting else "plain"] = (proc_cpu_seconds(f.pid) - c0) / seconds * 1000  # ms per s
        f.proc.stop()
    return out


def through_agents(bed: Bed, reps: int, seconds: int) -> dict:
    app_opts = {"cores": 1000, "workers": 1000, "backlog": 100000, "demand": "const:0"}
    accept = start_backends(bed.procs, bed.addrs, 2, "always", app_opts=app_opts)
    refuse = start_backends(bed.procs, bed.addrs, 2, "static:0", app_opts=app_opts)
    variants = {}
    for proxy in ("envoy", "haproxy"):
        for label, bs, hunting in (("plain", accept, False), ("hunting", accept, True), ("hunting, refused first", refuse, True)):
            name = f"{proxy} {label}"
            variants[name] = bed.front(proxy, hunting, name.replace(" ", "-").replace(",", ""), backends=bs)
    runs = {k: {"lat": [], "tput": [], "cpu_us_per_req": []} for k in variants}
    for rep in range(reps):
        for name, f in variants.items():
            runs[name]["lat"].append(wrk(f.url, 1, seconds))
            c0 = proc_cpu_seconds(f.pid)
            t = wrk(f.url, 32, seconds)
            runs[name]["tput"].append(t)
            runs[name]["cpu_us_per_req"].append((proc_cpu_seconds(f.pid) - c0) / max(t["rps"] * seconds, 1) * 1e6)
        print(f"agents rep {rep + 1}/{reps}: " + ", ".join(f"{n}: {runs[n]['tput'][-1]['rps']:.0f} req/s" for n in variants), flush=True)
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30, help="repetitions of the bottleneck runs")
    ap.add_argument("--seconds", type=int, default=1, help="seconds per bottleneck run (short: the variants "
                    "alternate faster than this VM's speed drifts)")
    ap.add_argument("--agent-reps", type=int, default=5, help="repetitions of the through-agents runs")
    ap.add_argument("--agent-seconds", type=int, default=4, help="seconds per through-agents run")
    ap.add_argument("--requests", type=int, default=3000, help="requests counted under callgrind")
    ap.add_argument("--only-envoy", action="store_true",
                    help="only Envoy's bottleneck runs, to docs/results/envoy-front-cost.md (about 3 min)")
    a = parse_or_rewrite(ap, {"proxy-overhead": report, "envoy-front-cost": report_envoy})
    if a is None:
        return
    with overhead_bed("huntlb-bench-") as bed:
        if a.only_envoy:
            data = {"machine": machine(), "reps": a.reps, "seconds": a.seconds,
                    "bottleneck": bottleneck(bed, a.reps, a.seconds, proxies=("envoy",)), "ratios": {}}
            write_result("envoy-front-cost", data, report_envoy(data))
            return
        data = {"machine": machine(), "reps": a.reps, "seconds": a.seconds, "agent_reps": a.agent_reps,
                "agent_seconds": a.agent_seconds}
        data["bottleneck"] = bottleneck(bed, a.reps, a.seconds)
        data["instructions"] = instructions(bed, a.requests)
        data["idle_cpu_ms_per_s"] = idle_task_cost(bed)
        data["through_agents"] = through_agents(bed, a.agent_reps, a.agent_seconds)
        md = report(data)
        write_result("proxy-overhead", data, md)
        print(md)


def report_envoy(data: dict) -> str:
    """Envoy alone on a core: the native hunting front against the same config
    without its hunting parts. Adds the paired ratios to `data`."""
    b, rows, lines = data["bottleneck"], [], []
    for name, rs in b.items():
        cpu, h = ci95([r["cpu_us_per_req"] for r in rs])
        rows.append(f"| {name} | {median([r['rps'] for r in rs]):.0f} | {cpu:.1f} ± {h:.1f} | {flag(wrk_errors(rs))} |")
    for kind in REQUESTS:
        pr = paired_ratio(b[f"envoy hunting, {kind}"], b[f"envoy plain, {kind}"])
        data["ratios"][kind] = pr
        lo, hi = pr["median_ci95"]
        lines.append(f"* {kind} request: hunting / plain req/s **{pr['median']:.3f}** (median of {len(pr['ratios'])} "
                     f"paired repetitions, 95% CI {lo:.3f}-{hi:.3f}; mean {pr['mean']:.3f} ± {pr['ci95']:.3f}).")
    return render("envoy-front-cost", {"machine": data["machine"], "backends": BACKENDS, "reps": data["reps"],
                                       "seconds": data["seconds"], "ratio_lines": "\n".join(lines), "rows": "\n".join(rows)}, shown=shown_in(data))


def report(data: dict) -> str:
    """The report of a whole run; adds the paired ratios to `data`."""
    b, agents = data["bottleneck"], data["through_agents"]
    rows1, summary = [], []
    for name, rs in b.items():
        cpu, h = ci95([r["cpu_us_per_req"] for r in rs])
        rows1.append(f"| {name} | {median([r['rps'] for r in rs]):.0f} | {cpu:.1f} ± {h:.1f} "
                     f"| {min(r['proxy_cpu_util'] for r in rs):.2f}-{max(r['proxy_cpu_util'] for r in rs):.2f} "
                     f"| {flag(wrk_errors(rs))} |")
    for proxy, base in (("envoy", "plain"), ("haproxy", "plain"), ("haproxy", "plain, no L7 retries")):
        for kind in REQUESTS:
            pr = paired_ratio(b[f"{proxy} hunting, {kind}"], b[f"{proxy} {base}, {kind}"])
            data.setdefault("ratios", {})[f"{proxy} hunting / {base}, {kind}"] = pr
            lo, hi = pr["median_ci95"]
            summary.append(f"* **{proxy}**, {kind} request: hunting / {base} req/s **{pr['median']:.3f}** (median of "
                           f"{len(pr['ratios'])} paired repetitions, 95% CI {lo:.3f}-{hi:.3f}; mean {pr['mean']:.3f} ± "
                           f"{pr['ci95']:.3f}).")
    ins = data["instructions"]
    if ins:
        p0, p, h = (ins[k]["instructions_per_request"] for k in ("plain, no L7 retries", "plain", "hunting"))
        ins_line = render("proxy-overhead.instructions", {
            "requests": ins["plain"]["requests"], "plain_no_retries": f"{p0:.0f}", "plain": f"{p:.0f}", "hunting": f"{h:.0f}",
            "added": f"{h - p:.0f}", "retries_cost": f"{p - p0:+.0f}"}, part=True)
    else:
        ins_line = render("proxy-overhead.no-instructions", {}, part=True)
    idle = data["idle_cpu_ms_per_s"]
    rows3 = []
    for name, r in agents.items():
        rows3.append(f"| {name} | {median([x['rps'] for x in r['tput']]):.0f} | {median([x['p50_us'] for x in r['lat']]):.0f} "
                     f"| {median([x['p99_us'] for x in r['lat']]):.0f} | {median(r['cpu_us_per_req']):.1f} "
                     f"| {flag(wrk_errors(r['tput'] + r['lat']))} |")
    summary3 = []
    for proxy in ("envoy", "haproxy"):
        plain, hunt, refd = agents[f"{proxy} plain"], agents[f"{proxy} hunting"], agents[f"{proxy} hunting, refused first"]
        ratio = paired_ratio(hunt["tput"], plain["tput"])
        (ma, ha) = ci95([h["p50_us"] - p["p50_us"] for h, p in zip(hunt["lat"], plain["lat"])])
        (mf, hf) = ci95([r["p50_us"] - h["p50_us"] for r, h in zip(refd["lat"], hunt["lat"])])
        summary3.append(f"* **{proxy}**: whole chain hunting / plain req/s {ratio['median']:.3f} ({ratio['mean']:.3f} ± "
                        f"{ratio['ci95']:.3f}); p50 added when accepted first **{ma:.0f} ± {ha:.0f} µs**; refused then "
                        f"accepted adds **{mf:.0f} ± {hf:.0f} µs** p50 over accepted first.")
    return render("proxy-overhead", {
        "machine": data["machine"],
        "backends": BACKENDS,
        "reps": data["reps"],
        "seconds": data["seconds"],
        "browser_headers": len(BROWSER_HEADERS),
        "browser_bytes": sum(len(k) + len(v) + 4 for k, v in BROWSER_HEADERS.items()),
        "bottleneck_rows": "\n".join(rows1),
        "ratio_lines": "\n".join(summary),
        "instructions": ins_line,
        "idle_hunting": f"{idle['hunting']:.1f}",
        "idle_plain": f"{idle['plain']:.1f}",
        "agent_reps": data["agent_reps"],
        "agent_seconds": data.get("agent_seconds", data["seconds"]),
        "agent_rows": "\n".join(rows3),
        "agent_lines": "\n".join(summary3),
    }, shown=shown_in(data))


if __name__ == "__main__":
    main()
