#!/usr/bin/env python3
"""huntlb demo: hunting vs the proxies' own least-request, through real Envoy and HAProxy.

Starts 4 workload apps (8 workers, 2 emulated cores, exponential 20 ms jobs),
each behind a huntlb agent (SR_dyn), and four fronts over the same backends:
Envoy hunting (the shipped front: offers to LEAST_REQUEST's pick), Envoy
LEAST_REQUEST, HAProxy hunting (random offers), HAProxy leastconn: what users
run without huntlb. Drives each front
in turn with the same open-loop Poisson load at about 85% of capacity, prints a
table, and stops everything it started. Takes about a minute.

Usage: make demo   (or: python3 scripts/demo.py [--seconds 15] [--rho 0.85])
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import (Addrs, HaproxyRoot, Procs, binary, front_config, haproxy_front_text,
                     haproxy_server_states, start_backends, start_envoy, start_haproxy, wait_tcp, wait_until)

BACKENDS, WORKERS, CORES, MEAN_MS = 4, 8, 2, 20.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="load per front (4 fronts)")
    ap.add_argument("--rho", type=float, default=0.85, help="offered load / capacity")
    a = ap.parse_args()
    capacity = BACKENDS * CORES / (MEAN_MS / 1000)  # requests/s the apps can serve
    rate = a.rho * capacity
    work = Path(tempfile.mkdtemp(prefix="huntlb-demo-"))
    procs, addrs = Procs(work), Addrs()
    hr = None
    try:
        print(f"huntlb demo: {BACKENDS} backends x {WORKERS} workers x {CORES} emulated cores, exp({MEAN_MS:.0f} ms) jobs; "
              f"capacity {capacity:.0f} req/s; load {rate:.0f} req/s Poisson (rho {a.rho}) for {a.seconds:.0f} s per front")
        bs = start_backends(procs, addrs, BACKENDS, "dynamic",
                            app_opts={"workers": WORKERS, "cores": CORES, "demand": f"exp:{MEAN_MS}", "backlog": 1024},
                            agent_opts={"workers": WORKERS})
        fronts = []
        for name, kw in (("envoy hunting", {}), ("envoy least-req", {"hunting": False, "lb_policy": "LEAST_REQUEST"})):
            host = addrs.host()
            listen, admin = f"{host}:10000", f"{host}:9902"
            start_envoy(procs, name.replace(" ", "-"), front_config(listen, admin, [b.agent for b in bs], **kw))
            fronts.append((name, listen))
        hr = HaproxyRoot("2.6")
        for name, kw in (("haproxy hunting", {}), ("haproxy leastconn", {"hunting": False, "balance": "leastconn"})):
            host = addrs.host()
            listen, stats = f"{host}:10000", f"{host}:9999"
            # weight 100: HAProxy's random hashes onto a ring of 16 points per unit of
            # weight, visibly uneven over a few weight-1 servers (docs/bench.md).
            p = start_haproxy(procs, hr, name.replace(" ", "-"), haproxy_front_text(hr, listen, stats, bs, server_opts="weight 100", **kw))
            wait_tcp(stats, p)
            wait_until(lambda: all(s == "UP" for s in haproxy_server_states(stats).values()), timeout=15, what="servers UP")
            fronts.append((name, listen))
        time.sleep(0.5)
        rows = []
        for name, listen in fronts:
            refused0 = sum(b.refused() for b in bs)
            out = work / f"{name.replace(' ', '-')}.json"
            subprocess.run([binary("huntlb-loadgen"), "--target", f"http://{listen}/", "--rate", f"{rate:.1f}",
                                "--duration", str(a.seconds), "--arrival", "poisson", "--json", str(out)],
                               capture_output=True, text=True, timeout=a.seconds + 120)
            rep = json.loads(out.read_text())
            refused = sum(b.refused() for b in bs) - refused0
            rows.append((name, rep, refused))
            print(f"  {name:17s} done: {rep['completed']} requests" + ("" if rep["valid"] else f" (INVALID: {rep['invalid_reason']})"))
        print()
        print_table(rows, bs)
        return 0
    finally:
        procs.stop_all()
        if hr:
            hr.cleanup()


def print_table(rows, bs):
    pct = lambda rep, p: dict((q, v) for q, v in rep["latency"]["percentiles"])[p] / 1000
    ids = [b.id for b in bs]
    head = f"{'front':17s} {'mean ms':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'errors':>6s} {'refused':>8s}  requests per backend"
    print(head)
    print("-" * len(head))
    for name, rep, refused in rows:
        non2xx = sum(n for s, n in rep["status"].items() if not 200 <= int(s) < 300) + rep["errors"]
        per = " ".join(f"{rep['served_by'].get(i, 0):5d}" for i in ids)
        ref = f"{100 * refused / max(rep['completed'], 1):.0f}%"
        print(f"{name:17s} {rep['latency']['mean_us'] / 1000:8.1f} {pct(rep, 50.0):8.1f} {pct(rep, 99.0):8.1f} {non2xx:6d} {ref:>8s}  {per}")
    by = {n: r for n, r, _ in rows}
    for proxy, base in (("envoy", "least-req"), ("haproxy", "leastconn")):
        h, r = by[f"{proxy} hunting"], by[f"{proxy} {base}"]
        print(f"{proxy}: hunting/{base} mean {h['latency']['mean_us'] / r['latency']['mean_us']:.2f}x, "
              f"p99 {pct(h, 99.0) / pct(r, 99.0):.2f}x (below 1: hunting is faster)")
    print("(one run each, not a benchmark: see docs/results/ for repeated runs with confidence intervals)")


if __name__ == "__main__":
    sys.exit(main())
