#!/usr/bin/env python3
"""Proxy overhead: the hunting front vs the same proxy plain (make bench-proxies).

For Envoy and HAProxy, side by side in one run over the same backends (agents
with zero-demand apps): plain `RANDOM`/`balance random` vs the hunting front,
req/s (32 connections) and p50/p99 (1 connection) on a tiny page with keep-alive;
and the hunting front's latency when the offer is accepted first vs refused then
accepted (agents that refuse every offer). HAProxy's own CPU per request is read
from /proc. wrk runs on CPU 1. Repetitions alternate the variants.
"""

import argparse
import tempfile
from pathlib import Path

from benchlib import ci95, machine, median, proc_cpu_seconds, wrk, write_result
from testkit import (Addrs, HaproxyRoot, Procs, front_config, haproxy_front_text, haproxy_server_states, start_backends,
                     start_envoy, start_haproxy, wait_tcp, wait_until)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="huntlb-bench-"))
    procs, addrs = Procs(work), Addrs()
    hr = HaproxyRoot("2.6")
    try:
        app_opts = {"cores": 1000, "workers": 1000, "backlog": 100000, "demand": "const:0"}
        accept = start_backends(procs, addrs, 2, "always", app_opts=app_opts)
        refuse = start_backends(procs, addrs, 2, "static:0", app_opts=app_opts)
        variants = {}  # name -> (url, pid of the proxy)
        for proxy in ("envoy", "haproxy"):
            for label, bs, hunting in (("plain", accept, False), ("hunting", accept, True), ("hunting, refused first", refuse, True)):
                host = addrs.host()
                listen = f"{host}:10000"
                name = f"{proxy} {label}"
                if proxy == "envoy":
                    p = start_envoy(procs, name.replace(" ", "-").replace(",", ""),
                                    front_config(listen, f"{host}:9902", [b.agent for b in bs], hunting=hunting, keep_response_headers=False),
                                    concurrency=1)
                else:
                    stats = f"{host}:9999"
                    p = start_haproxy(procs, hr, name.replace(" ", "-").replace(",", ""),
                                      haproxy_front_text(hr, listen, stats, bs, hunting=hunting, keep_served_by=False)
                                      .replace("defaults\n", "    nbthread 1\ndefaults\n", 1))
                    wait_tcp(stats, p)
                    wait_until(lambda: all(s == "UP" for s in haproxy_server_states(stats).values()), timeout=15, what="UP")
                variants[name] = (f"http://{listen}/", p.pid)
        runs = {k: {"lat": [], "tput": [], "cpu_us_per_req": []} for k in variants}
        for rep in range(a.reps):
            for name, (url, pid) in variants.items():
                runs[name]["lat"].append(wrk(url, 1, a.seconds))
                c0 = proc_cpu_seconds(pid)
                t = wrk(url, 32, a.seconds)
                runs[name]["tput"].append(t)
                runs[name]["cpu_us_per_req"].append((proc_cpu_seconds(pid) - c0) / max(t["rps"] * a.seconds, 1) * 1e6)
            print(f"rep {rep + 1}/{a.reps}: " + ", ".join(f"{n}: {runs[n]['tput'][-1]['rps']:.0f} req/s" for n in variants))
        report(runs, a)
    finally:
        procs.stop_all()
        hr.cleanup()


def report(runs, a):
    rows, summary, data = [], [], {"machine": machine(), "reps": a.reps, "seconds": a.seconds, "runs": runs}
    for name, r in runs.items():
        rows.append(f"| {name} | {median([x['rps'] for x in r['tput']]):.0f} | {median([x['p50_us'] for x in r['lat']]):.0f} "
                    f"| {median([x['p99_us'] for x in r['lat']]):.0f} | {median(r['cpu_us_per_req']):.1f} "
                    f"| {sum(x['non2xx'] + x['socket_errors'] for x in r['tput'] + r['lat'])} |")
    for proxy in ("envoy", "haproxy"):
        plain, hunt, refd = runs[f"{proxy} plain"], runs[f"{proxy} hunting"], runs[f"{proxy} hunting, refused first"]
        ratio = [h["rps"] / p["rps"] for h, p in zip(hunt["tput"], plain["tput"])]
        added = [h["p50_us"] - p["p50_us"] for h, p in zip(hunt["lat"], plain["lat"])]
        refused_added = [r["p50_us"] - h["p50_us"] for r, h in zip(refd["lat"], hunt["lat"])]
        (mr, hr), (ma, ha), (mf, hf) = ci95(ratio), ci95(added), ci95(refused_added)
        data[proxy] = {"rps_ratio": ratio, "added_p50_us": added, "refused_added_p50_us": refused_added}
        summary.append(f"* **{proxy}**: hunting/plain req/s **{mr:.3f} ± {hr:.3f}**; p50 added when accepted first "
                       f"**{ma:.1f} ± {ha:.1f} us**; a refused-then-accepted request adds {mf:.1f} ± {hf:.1f} us p50 "
                       f"over accepted-first.")
    md = f"""# Proxy overhead: hunting front vs plain

`make bench-proxies` ({machine()}). Tiny page (workload app, zero demand) through
agents, HTTP/1.1 keep-alive, Debian's `wrk` (closed loop) on CPU 1: req/s with 32
connections, latency with 1. Each proxy runs one worker (Envoy `--concurrency 1`,
HAProxy `nbthread 1`); agents and apps share the machine, so req/s is the whole
chain's and the ratio is what matters. `plain` is the same committed config with
hunting removed (no filter, no marks, no busy retry); `hunting, refused first` runs
over agents that refuse every offer. {a.reps} repetitions of {a.seconds:.0f} s, variants
alternated; medians, and mean ± 95% CI of paired per-repetition differences.

| variant | req/s | p50 us | p99 us | proxy CPU us/req | errors |
|---------|------:|-------:|-------:|-----------------:|-------:|
{chr(10).join(rows)}

{chr(10).join(summary)}

Targets (issues 3, 4): hunting >= 95% of plain req/s; Envoy <= 50 us p50 added
when accepted first.
"""
    write_result("proxy-overhead", data, md)
    print(md)


if __name__ == "__main__":
    main()
