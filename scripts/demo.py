#!/usr/bin/env python3
"""huntlb demo: hunting vs the proxies' own least-request, several fronts over shared backends.

The case hunting exists for: independent fronts (4 per strategy, each counting
only its own requests) over one fleet, the load spread over them in turn as
clients spread over a service's proxies. The fleet and fronts are the vs-least
bench's (bench/benchlib/testbed.py): 12 workload apps (32 workers, 2 emulated cores,
exponential 20 ms jobs), each behind a huntlb agent, at the bench's load
(rho 0.92 of the apps' capacity). Per proxy, its strongest least-request
(Envoy LEAST_REQUEST with FULL_SCAN; HAProxy leastconn) against the shipped hunting front over agents
that form the forwarding tier (FWD/full, FWD/least in the bench). Every
strategy meets the same arrivals and the same job sizes (the generator's
--seed and --work, as the bench pairs its runs). Then, briefly, one front of
each: there hunting ties by construction (its offer is least-request's own
pick, which no agent refuses). Prints mean / p50 / p99 / client errors and the
agents' refusals and forwards per strategy, the ratios with what one run can
and cannot say, and stops everything it started. After each proxy's runs with
several fronts, its hunting fronts run once more while one backend is SIGKILLed
(app and agent): the client errors that cost, beside the requests that were
inside it. About 1.5 minutes.

It also starts Prometheus on loopback over the same agents and fronts, with the
compose demo's rules and dashboard (packaging/monitoring/huntlb-alerts.yml,
compose/config/huntlb.rules.yml, compose/dashboard/), and prints where the dashboard is; --hold keeps everything
up that many seconds after the table. The Prometheus is the one on PATH, else
the binary `make setup` unpacks from Debian's package into .cache/prometheus/.

Usage: make demo   (or: PYTHONPATH=.:bench .venv/bin/python scripts/demo.py [--seconds 10] [--hold 0] [--json out.json])
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from benchlib import testbed
from benchlib.fleet import FORWARDING, drive, summary
from harness import ROOT, Addrs, Procs, wait_all_up, wait_http

# make setup's Prometheus when none is on PATH (scripts/setup.sh: Debian's
# binary alone, not installed, so no service of its own on :9090)
SETUP_PROMETHEUS = ROOT / ".cache" / "prometheus" / "prometheus"
# Per proxy: its strongest least-request, then the shipped hunting front over
# agents with the forwarding tier (bench/srlb.py's names, as in vs-least).
PAIRS = {"envoy": ("LR/full", "FWD/full"), "haproxy": ("leastconn", "FWD/least")}
LABELS = {"LR/full": "least-request", "leastconn": "leastconn", "FWD/full": "hunting", "FWD/least": "hunting"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="load per strategy with several fronts")
    ap.add_argument("--one-seconds", type=float, default=5.0, help="load per strategy with one front")
    ap.add_argument("--fronts", type=int, default=4, help="fronts per strategy")
    ap.add_argument("--kill-seconds", type=float, default=6.0,
                    help="a hunting run per proxy in which one backend is SIGKILLed halfway (0: none)")
    # 0.92 of the nominal capacity: the vs-least bench's load (0.88 of the
    # lambda0 it measured here, 1260 req/s, against 1200 nominal)
    ap.add_argument("--rho", type=float, default=0.92, help="offered load / the apps' capacity")
    ap.add_argument("--hold", type=float, default=0, help="seconds to keep everything (and the dashboard) up after the table")
    ap.add_argument("--json", type=Path, help="also write every run (seed, schedule digest, numbers) here")
    a = ap.parse_args()
    # each line as it comes, also into a pipe or a log: the dashboard's address
    # is worth having while the demo runs, not after it
    sys.stdout.reconfigure(line_buffering=True)
    t0 = time.monotonic()
    capacity = testbed.SERVERS * testbed.CORES / (testbed.MEAN_MS / 1000)  # requests/s the apps can serve
    rate = a.rho * capacity
    work = Path(tempfile.mkdtemp(prefix="huntlb-demo-"))
    print(f"huntlb demo: {testbed.SERVERS} backends x {testbed.WORKERS} workers x {testbed.CORES:g} emulated cores, "
          f"exp({testbed.MEAN_MS:g} ms) jobs, capacity {capacity:.0f} req/s;\n"
          f"  load {rate:.0f} req/s Poisson (rho {a.rho}), spread over the fronts in turn;\n"
          f"  {a.fronts} fronts per strategy for {a.seconds:g} s, then 1 front for {a.one_seconds:g} s; "
          f"every strategy meets the same arrivals and jobs")
    b = testbed.Bench(work, list(PAIRS), quick=False)
    try:
        for proxy, names in PAIRS.items():
            for name in names:
                for i in range(a.fronts):
                    b.front(proxy, b.policy_for(name)[0], i)
        print(f"  {len(b.fleet.backends)} backends and {len(b.fronts)} fronts up ({time.monotonic() - t0:.0f} s)")
        clients = Clients()
        envoy_admins = [f.url.removeprefix("http://").split(":")[0] + ":9902" for (p, _, _), f in b.fronts.items() if p == "envoy"]
        dashboard = start_dashboard(b.procs, b.addrs, work, {"agents": [x.admin for x in b.fleet.backends],
                                                             "envoy": envoy_admins, "haproxy": []}, clients)
        print(f"  dashboard: {dashboard}" if dashboard.startswith("http") else f"  ({dashboard})")
        runs, kills = [], []
        for n, seconds in ((a.fronts, a.seconds), (1, a.one_seconds)):
            for proxy, names in PAIRS.items():
                for name in names:
                    r = run(b, proxy, name, n, rate, seconds, work)
                    clients.add(f"{proxy}-x{n}-{LABELS[name]}", r.pop("report"))  # -hunting last: the table marks it
                    runs.append(r)
                    print(f"  {proxy:7s} {LABELS[name]:13s} x{n}: {r['completed']} requests"
                          + ("" if r["valid"] else f" (INVALID: {r['invalid_reason']})"))
                if n > 1 and a.kill_seconds > 0:  # the agents are still the tier of the hunting run just done
                    kills.append(kill_run(b, proxy, names[1], n, rate, a.kill_seconds, work))
        print()
        print_table(runs, a.fronts, a.seconds)
        for k in kills:
            print(f"\nkilled: {k['proxy']} {k['label']} x{k['fronts']}, backend {k['victim']} SIGKILLed (app and agent) "
                  f"{k['kill_at']:g} s into {k['seconds']:g} s: {k['errors']} client errors of {k['completed']} requests; "
                  f"{k['inside']} requests were inside it (the most its agent held over the last 0.5 s)"
                  + ("" if k["valid"] else f" (INVALID: {k['invalid_reason']})"), end="")
        print(f"\n\n(the demo took {time.monotonic() - t0:.0f} s)")
        if a.json:
            a.json.write_text(json.dumps({"rate": rate, "fronts": a.fronts, "runs": runs, "kills": kills}, indent=1))
        if a.hold > 0:
            print(f"\nholding {a.hold:.0f} s: {dashboard}")
            time.sleep(a.hold)
        return 0
    finally:
        b.close()


def run(b: "testbed.Bench", proxy: str, name: str, n: int, rate: float, seconds: float, work: Path) -> dict:
    """One strategy through n fronts, as testbed.Bench runs it (fresh agents for a
    hunting run, the seed every strategy shares at this rate and front count,
    job sizes drawn by the generator), with the agents' refusals and forwards
    counted apart. A run the generator flags is reported, not repeated."""
    strategy, policy = b.policy_for(name)
    if strategy.startswith("hunt"):
        tier = name.partition("/")[0]  # FWD: the tier as shipped, each agent hearing a sample of its peers
        b.fleet.set_policy(policy, forward=tier in FORWARDING, sample=FORWARDING.get(tier, 0))
    fronts = [b.front(proxy, strategy, i) for i in range(n)]
    for f in fronts:
        wait_all_up(f, testbed.SERVERS)
    refused0, forwarded0 = b.fleet.refused(), b.fleet.forwarded()
    seed, jobs = testbed.common_seed(rate, 0, n), f"exp:{testbed.MEAN_MS:g}"
    out = work / f"{proxy}-{name.replace('/', '-')}-x{n}.json"
    report = drive([f.url for f in fronts], rate, seconds, out, seed=seed, max_lateness_us=testbed.MAX_LATENESS_US, work=jobs)
    s = summary(report)
    return {"proxy": proxy, "strategy": name, "label": LABELS[name], "fronts": n, "hunting": strategy.startswith("hunt"),
            "seed": report["seed"], "work": jobs, "scheduled": report["scheduled"], "schedule_digest": report["schedule_digest"],
            "seconds": seconds, "rate": rate, "refused": round(b.fleet.refused() - refused0),
            "forwarded": round(b.fleet.forwarded() - forwarded0), "report": report,
            **{k: s[k] for k in ("completed", "errors", "mean_ms", "p50_ms", "p99_ms", "valid", "invalid_reason")}}


def paired(runs: list[dict]) -> str:
    """Whether these runs met the same arrivals and jobs, by the generator's own
    digest of what it was to send."""
    digests = {(r["seed"], r["schedule_digest"]) for r in runs}
    if len(digests) == 1:
        seed, digest = digests.pop()
        return f"same {runs[0]['scheduled']} arrivals and job sizes for all {len(runs)} (seed {seed}, schedule {digest})"
    return f"NOT PAIRED: {len(digests)} different schedules"


def kill_run(b: "testbed.Bench", proxy: str, name: str, n: int, rate: float, seconds: float, work: Path, victim: int = 0) -> dict:
    """The strategy just run (its agents as they are) again, with backend
    `victim`'s app and agent SIGKILLed halfway: what the clients lost, beside
    what was inside that backend just before (its agent's in-flight count,
    polled every 20 ms). The backend is started again afterwards. Not paired,
    not in the table: its errors are the kill's."""
    strategy, _ = b.policy_for(name)
    fronts = [b.front(proxy, strategy, i) for i in range(n)]
    for f in fronts:
        wait_all_up(f, testbed.SERVERS)
    gone = b.fleet.backends[victim]
    out = work / f"kill-{proxy}-x{n}.json"
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(report=drive([f.url for f in fronts], rate, seconds, out,
                                                                seed=testbed.common_seed(rate, 1, n), max_lateness_us=testbed.MAX_LATENESS_US,
                                                                work=f"exp:{testbed.MEAN_MS:g}")))
    t.start()
    samples, t0 = [], time.monotonic()
    while time.monotonic() - t0 < seconds / 2:  # bounded: half the run
        try:
            samples.append((time.monotonic(), gone.metrics().get("huntlb_inflight", 0.0)))
        except OSError:
            pass
        time.sleep(0.02)
    kill_at = time.monotonic() - t0
    b.fleet.kill(victim)
    t.join(timeout=seconds + 240)
    inside = max([v for at, v in samples if at >= t0 + kill_at - 0.5] or [0.0])
    b.fleet.revive(victim)
    s = summary(got["report"])
    print(f"  {proxy:7s} {LABELS[name]:13s} x{n}: {s['completed']} requests, backend {gone.host} killed at {kill_at:.1f} s")
    return {"proxy": proxy, "strategy": name, "label": LABELS[name], "fronts": n, "victim": gone.host, "kill_at": round(kill_at, 1),
            "seconds": seconds, "inside": round(inside), **{k: s[k] for k in ("completed", "errors", "valid", "invalid_reason")}}


def print_table(runs: list[dict], fronts: int, seconds: float) -> None:
    head = (f"{'fronts':>6s}  {'proxy':7s} {'strategy':13s} {'mean ms':>8s} {'p50 ms':>7s} {'p99 ms':>7s} "
            f"{'errors':>6s} {'refused':>8s} {'forwarded':>10s}")
    print(head)
    print("-" * len(head))
    pct = lambda x, r: f"{100 * x / max(r['completed'], 1):.0f}%" if r["hunting"] else "-"  # noqa: E731
    for r in runs:
        print(f"{r['fronts']:6d}  {r['proxy']:7s} {r['label']:13s} {r['mean_ms']:8.1f} {r['p50_ms']:7.1f} {r['p99_ms']:7.1f} "
              f"{r['errors']:6d} {pct(r['refused'], r):>8s} {pct(r['forwarded'], r):>10s}"
              + ("" if r["valid"] else "  INVALID") + ("  <- client errors" if r["errors"] else ""))
    print()
    for n in (fronts, 1):
        print(f"{n} front{'s' if n > 1 else ''}: {paired([r for r in runs if r['fronts'] == n])}")
    for n in (fronts, 1):
        for proxy, (base, hunt) in PAIRS.items():
            rb, rh = [next(r for r in runs if r["proxy"] == proxy and r["strategy"] == s and r["fronts"] == n) for s in (base, hunt)]
            line = (f"{proxy}, {n} front{'s' if n > 1 else ''}: hunting/{LABELS[base]} mean {rh['mean_ms'] / rb['mean_ms']:.2f}x, "
                    f"p99 {rh['p99_ms'] / rb['p99_ms']:.2f}x")
            if n == 1:
                line += f"  (a tie by construction: the offer is {LABELS[base]}'s own pick; refused {rh['refused']}, forwarded {rh['forwarded']})"
            if rb["errors"] or rh["errors"] or not (rb["valid"] and rh["valid"]):
                line += "  FLAGGED: client errors or an invalid run, not a comparison"
            print(line)
    print(f"""
What one run shows: with {fronts} fronts each counts only its own requests; the agents refuse or
forward what the fronts' picks got wrong (the refused and forwarded columns), and every strategy
met the same arrivals and job sizes. What it cannot show: how large the gain is. One {seconds:g}-s run
moves by several percent with the machine; with one front the ratio is that noise alone. The
bench repeats these pairs for medians with 95% CIs: docs/results/vs-least.md (make bench-vs-least),
or bench/pairs.py for one pair of strategies.""")


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
            lines.append(f'huntlb_demo_fronts{{front="{front}"}} {len(rep["targets"])}')
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
    # the shipped recording rule and alerts, and the demo's own rules, as the compose demo loads them
    rules = [ROOT / "packaging" / "monitoring" / "huntlb-alerts.yml", ROOT / "compose" / "config" / "huntlb.rules.yml"]
    cfg = {"global": {"scrape_interval": "2s", "evaluation_interval": "2s"}, "rule_files": [str(r) for r in rules],
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


if __name__ == "__main__":
    sys.exit(main())
