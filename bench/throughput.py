#!/usr/bin/env python3
"""Scenario 5: proxy throughput on a tiny page (seeds 004 and 000).

Max req/s (Debian wrk, closed loop, 32 connections, on CPU 1) straight to an
agent and through each proxy, plain vs hunting, with client keep-alive on and
off, and for HAProxy with `option tcp-smart-accept` / `tcp-smart-connect` on and
off. TCP segments per request come from the kernel's counters (/proc/net/snmp
OutSegs: every segment on loopback, client, proxy and backend sides together),
proxy CPU per request from /proc. Variants alternate within each repetition.

Usage: python3 bench/throughput.py [--reps 10] [--seconds 3]
Writes docs/results/proxy-throughput.{md,png} and bench/data/proxy-throughput.json.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchlib import plots
from benchlib.fleet import Fleet
from benchlib.render import render, shown_in
from benchlib.reports import RESULTS, flag, machine, parse_or_rewrite, write_result
from benchlib.stats import ci95, median, paired_ratio
from benchlib.tools import proc_cpu_seconds, wrk, wrk_errors
from harness import Addrs, HaproxyRoot, Procs

CLOSE = {"Connection": "close"}


def no_smart(text: str) -> str:
    """HAProxy without tcp-smart-accept and tcp-smart-connect, to measure what they save."""
    return text.replace("    option tcp-smart-", "    no option tcp-smart-")


def tcp_out_segs() -> int:
    lines = [l.split() for l in open("/proc/net/snmp") if l.startswith("Tcp:")]
    return int(lines[1][lines[0].index("OutSegs")])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=3)
    a = parse_or_rewrite(ap, {"proxy-throughput": report}, plot=lambda d: plots.throughput(d, RESULTS))
    if a is None:
        return
    work = Path(tempfile.mkdtemp(prefix="huntlb-tput-"))
    procs, addrs = Procs(work), Addrs()
    hr = HaproxyRoot("2.6")
    try:
        fleet = Fleet(procs, addrs, [1000.0] * 2, workers=1000, backlog=10000, mean_ms=0.0001, policy="always").start()
        targets = {"direct to agent": (f"http://{fleet.backends[0].agent}/", None)}
        for proxy in ("envoy", "haproxy"):
            for label, hunting in (("plain", False), ("hunting", True)):
                lb = "RANDOM" if proxy == "envoy" else "random"
                f = fleet.front(proxy, hunting, lb, hr, name=f"tput-{label}")
                targets[f"{proxy} {label}"] = (f.url, f.pid)
                if proxy == "haproxy":
                    f = fleet.front(proxy, hunting, lb, hr, name=f"tput-{label}-nosmart", edit=no_smart)
                    targets[f"haproxy {label}, no smart-accept/connect"] = (f.url, f.pid)
        variants = {f"{name}, keep-alive {ka}": (url, pid, ka) for name, (url, pid) in targets.items() for ka in ("on", "off")}
        runs = {k: [] for k in variants}
        for rep in range(a.reps):
            for name, (url, pid, ka) in variants.items():
                c0 = proc_cpu_seconds(pid) if pid else 0.0
                s0 = tcp_out_segs()
                r = wrk(url, 32, a.seconds, headers=None if ka == "on" else CLOSE)
                n = max(r["rps"] * a.seconds, 1)
                r["segs_per_req"] = (tcp_out_segs() - s0) / n
                r["proxy_cpu_us_per_req"] = (proc_cpu_seconds(pid) - c0) / n * 1e6 if pid else None
                runs[name].append(r)
            print(f"rep {rep + 1}/{a.reps}: " + ", ".join(f"{n}: {runs[n][-1]['rps']:.0f}" for n in variants), flush=True)
        summary = {}
        for name, rs in runs.items():
            m, h = ci95([r["rps"] for r in rs])
            cpu = [r["proxy_cpu_us_per_req"] for r in rs if r["proxy_cpu_us_per_req"] is not None]
            summary[name] = {"rps_median": median([r["rps"] for r in rs]), "rps_mean": m, "rps_ci95": h,
                             "segs_per_req": median([r["segs_per_req"] for r in rs]),
                             "proxy_cpu_us_per_req": median(cpu) if cpu else None,
                             "errors": wrk_errors(rs)}
        ratios = {}
        for proxy in ("envoy", "haproxy"):
            for ka in ("on", "off"):
                ratios[f"{proxy} hunting/plain, keep-alive {ka}"] = paired_ratio(
                    runs[f"{proxy} hunting, keep-alive {ka}"], runs[f"{proxy} plain, keep-alive {ka}"])
        for label in ("plain", "hunting"):
            for ka in ("on", "off"):
                ratios[f"haproxy {label} smart/no smart, keep-alive {ka}"] = paired_ratio(
                    runs[f"haproxy {label}, keep-alive {ka}"], runs[f"haproxy {label}, no smart-accept/connect, keep-alive {ka}"])
        data = {"machine": machine(), "reps": a.reps, "seconds": a.seconds, "runs": runs, "summary": summary, "ratios": ratios}
        plots.throughput(data, RESULTS)
        write_result("proxy-throughput", data, report(data))
    finally:
        procs.stop_all()
        hr.cleanup()


def report(d: dict) -> str:
    def cpu(s):
        return "" if s["proxy_cpu_us_per_req"] is None else f"{s['proxy_cpu_us_per_req']:.1f}"

    rows = "\n".join(f"| {n} | {s['rps_median']:.0f} | {s['rps_mean']:.0f} ± {s['rps_ci95']:.0f} | {s['segs_per_req']:.1f} | "
                     f"{cpu(s)} | {flag(s['errors'])} |" for n, s in d["summary"].items())
    rat = "\n".join(f"| {n} | **{r['median']:.3f}** | {r['mean']:.3f} ± {r['ci95']:.3f} |" for n, r in d["ratios"].items())
    return render("proxy-throughput", {"machine": d["machine"], "seconds": f"{d['seconds']:.0f}", "reps": d["reps"], "rows": rows,
                                       "ratio_rows": rat}, shown=shown_in(d))


if __name__ == "__main__":
    main()
