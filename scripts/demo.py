#!/usr/bin/env python3
"""huntlb demo: hunting vs the proxies' own least-request, through real Envoy and HAProxy.

Starts 4 workload apps (8 workers, 2 emulated cores, exponential 20 ms jobs),
each behind a huntlb agent (dynamic:slack=1), and four fronts over the same backends:
Envoy hunting (the shipped front: offers to FULL_SCAN's pick), Envoy
LEAST_REQUEST with FULL_SCAN (its strongest least-request: the least loaded of
all hosts), HAProxy hunting (offers to its least-loaded server), HAProxy
leastconn: the strongest each proxy offers without huntlb. Drives each front
in turn with the same open-loop Poisson load at about 85% of capacity, prints a
table, and stops everything it started. Takes about a minute.

It also starts Prometheus on loopback over the same agents and fronts, with the
compose demo's rules and dashboard (compose/config/huntlb.rules.yml,
compose/dashboard/), and prints where the dashboard is; --hold keeps everything
up that many seconds after the table. The Prometheus is the one on PATH, else
the binary `make setup` unpacks from Debian's package into .cache/prometheus/.

Usage: make demo   (or: PYTHONPATH=. .venv/bin/python scripts/demo.py [--seconds 15] [--rho 0.85] [--hold 0])
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from harness.envoy import FULL_SCAN
from harness import (ROOT, Addrs, HaproxyRoot, Procs, binary, front_config, haproxy_front_text,
                     haproxy_server_states, start_backends, start_envoy, start_haproxy, wait_http, wait_tcp, wait_until)

BACKENDS, WORKERS, CORES, MEAN_MS = 4, 8, 2, 20.0
# make setup's Prometheus when none is on PATH (scripts/setup.sh: Debian's
# binary alone, not installed, so no service of its own on :9090)
SETUP_PROMETHEUS = ROOT / ".cache" / "prometheus" / "prometheus"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="load per front (4 fronts)")
    ap.add_argument("--rho", type=float, default=0.85, help="offered load / capacity")
    ap.add_argument("--hold", type=float, default=0, help="seconds to keep everything (and the dashboard) up after the table")
    a = ap.parse_args()
    # each line as it comes, also into a pipe or a log: the dashboard's address
    # is worth having while the demo runs, not after it
    sys.stdout.reconfigure(line_buffering=True)
    capacity = BACKENDS * CORES / (MEAN_MS / 1000)  # requests/s the apps can serve
    rate = a.rho * capacity
    work = Path(tempfile.mkdtemp(prefix="huntlb-demo-"))
    procs, addrs = Procs(work), Addrs()
    hr = None
    try:
        print(f"huntlb demo: {BACKENDS} backends x {WORKERS} workers x {CORES} emulated cores, exp({MEAN_MS:.0f} ms) jobs; "
              f"capacity {capacity:.0f} req/s; load {rate:.0f} req/s Poisson (rho {a.rho}) for {a.seconds:.0f} s per front")
        bs = start_backends(procs, addrs, BACKENDS, "dynamic:slack=1",
                            app_opts={"workers": WORKERS, "cores": CORES, "demand": f"exp:{MEAN_MS}", "backlog": 1024},
                            agent_opts={"workers": WORKERS})
        fronts, scrape = [], {"agents": [b.admin for b in bs], "envoy": [], "haproxy": []}
        for name, kw in (("envoy hunting", {}), ("envoy least-req", {"hunting": False, "lb_policy": FULL_SCAN})):
            host = addrs.host()
            listen, admin = f"{host}:10000", f"{host}:9902"
            start_envoy(procs, name.replace(" ", "-"), front_config(listen, admin, [b.agent for b in bs], **kw))
            fronts.append((name, listen))
            scrape["envoy"].append(admin)
        hr = HaproxyRoot("2.6")
        for name, kw in (("haproxy hunting", {}), ("haproxy leastconn", {"hunting": False, "balance": "leastconn"})):
            host = addrs.host()
            listen, stats = f"{host}:10000", f"{host}:9999"
            # weight 100: HAProxy's random hashes onto a ring of 16 points per unit of
            # weight, visibly uneven over a few weight-1 servers (docs/bench.md).
            text = haproxy_front_text(hr, listen, stats, bs, server_opts="weight 100", **kw)
            # HAProxy's own Prometheus exporter, for the dashboard
            text += f"\nfrontend metrics\n    bind {host}:8404\n    http-request use-service prometheus-exporter if {{ path /metrics }}\n"
            scrape["haproxy"].append(f"{host}:8404")
            p = start_haproxy(procs, hr, name.replace(" ", "-"), text)
            wait_tcp(stats, p)
            wait_until(lambda: all(s == "UP" for s in haproxy_server_states(stats).values()), timeout=15, what="servers UP")
            fronts.append((name, listen))
        clients = Clients()
        dashboard = start_dashboard(procs, addrs, work, scrape, clients)
        print(f"  dashboard: {dashboard}" if dashboard.startswith("http") else f"  ({dashboard})")
        time.sleep(0.5)
        rows = []
        for name, listen in fronts:
            refused0 = sum(b.refused() for b in bs)
            out = work / f"{name.replace(' ', '-')}.json"
            subprocess.run([binary("huntlb-loadgen"), "--target", f"http://{listen}/", "--rate", f"{rate:.1f}",
                                "--duration", str(a.seconds), "--arrival", "poisson", "--json", str(out)],
                               capture_output=True, text=True, timeout=a.seconds + 120)
            rep = json.loads(out.read_text())
            clients.add(name.replace(" ", "-"), rep)
            refused = sum(b.refused() for b in bs) - refused0
            rows.append((name, rep, refused))
            print(f"  {name:17s} done: {rep['completed']} requests" + ("" if rep["valid"] else f" (INVALID: {rep['invalid_reason']})"))
        print()
        print_table(rows, bs)
        if a.hold > 0:
            print(f"\nholding {a.hold:.0f} s: {dashboard}")
            time.sleep(a.hold)
        return 0
    finally:
        procs.stop_all()
        if hr:
            hr.cleanup()


class Clients:
    """What the load generator saw, per front, as the compose demo's loadgen
    exports it (compose/drive.py: huntlb_demo_*), for the same dashboard."""

    def __init__(self):
        self.lock, self.reports = threading.Lock(), {}

    def add(self, front: str, rep: dict) -> None:
        with self.lock:
            self.reports[front] = rep

    def render(self) -> str:
        with self.lock:
            reports = dict(self.reports)
        lines = [f"huntlb_demo_windows_total {len(reports)}"]
        for front, rep in reports.items():
            bad = rep["errors"] + sum(n for st, n in rep["status"].items() if not 200 <= int(st) < 300)
            lines.append(f'huntlb_demo_requests_total{{front="{front}"}} {rep["completed"]}')
            lines.append(f'huntlb_demo_errors_total{{front="{front}"}} {bad}')
            lines.append(f'huntlb_demo_latency_mean_ms{{front="{front}"}} {rep["latency"]["mean_us"] / 1000}')
            for q, v in rep["latency"]["percentiles"]:
                if q in (50.0, 90.0, 99.0):
                    lines.append(f'huntlb_demo_latency_ms{{front="{front}",quantile="{q / 100}"}} {v / 1000}')
            for b, n in rep.get("served_by", {}).items():
                lines.append(f'huntlb_demo_served_total{{front="{front}",backend="{b}"}} {n}')
        return "\n".join(lines) + "\n"


def prometheus_binary(local: Path = SETUP_PROMETHEUS) -> str | None:
    """The Prometheus the dashboard runs on: PATH's, else make setup's."""
    return shutil.which("prometheus") or (str(local) if os.access(local, os.X_OK) else None)


def start_dashboard(procs: Procs, addrs: Addrs, work: Path, scrape: dict, clients: Clients) -> str:
    """Prometheus on loopback over the agents, the fronts and the clients, with
    the compose demo's rules and dashboard. Returns the dashboard's URL, or why
    there is none."""
    prom = prometheus_binary()
    if not prom:
        return "no dashboard: no prometheus on PATH or in .cache/prometheus/ (make setup puts one there), or run the compose demo (docs/demo.md)"
    host = addrs.host()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = clients.render().encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain; version=0.0.4")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer((host, 9100), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    procs.cleanups.append(srv.shutdown)
    rules = ROOT / "compose" / "config" / "huntlb.rules.yml"
    cfg = {"global": {"scrape_interval": "2s", "evaluation_interval": "2s"}, "rule_files": [str(rules)],
           "scrape_configs": [{"job_name": "agents", "static_configs": [{"targets": scrape["agents"]}]},
                              {"job_name": "envoy", "metrics_path": "/stats/prometheus", "static_configs": [{"targets": scrape["envoy"]}]},
                              {"job_name": "haproxy", "static_configs": [{"targets": scrape["haproxy"]}]},
                              {"job_name": "loadgen", "static_configs": [{"targets": [f"{host}:9100"]}]}]}
    (work / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    p = procs.start("prometheus", [prom, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
                                   f"--web.listen-address={host}:9090", f"--web.user-assets={ROOT / 'compose' / 'dashboard'}"])
    procs.cleanups.append(lambda: shutil.rmtree(work / "tsdb", ignore_errors=True))  # its data goes with it
    wait_http(f"{host}:9090", "/-/ready", proc=p, timeout=20)
    return f"http://{host}:9090/user/index.html"


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
