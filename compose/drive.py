#!/usr/bin/env python3
"""The demo's load: huntlb-loadgen driving every strategy with the same open-loop
schedule, window after window, and what the clients saw as Prometheus metrics.

A strategy (`envoy-hunting`, `haproxy-least`, ...) is one port on every replica
of a proxy service: several independent fronts, each counting only its own
requests, as a service runs several proxies. Each window of LOAD_WINDOW_S
seconds runs one huntlb-loadgen per strategy, sending to its fronts in turn
(every address its service name resolves to, looked up again each window), all
with the same rate, seed and job sizes (--work DEMAND): every strategy meets the
same Poisson arrivals and the same jobs. Then it publishes their reports on
:9100/metrics (label `front`: the strategy):

  huntlb_demo_fronts{front}                  fronts (proxy replicas) the window spread over
  huntlb_demo_requests_total{front}          requests completed
  huntlb_demo_errors_total{front}            client errors: transport errors, timeouts, non-2xx
  huntlb_demo_served_total{front,backend}    who served (the hunt-served-by header)
  huntlb_demo_latency_ms{front,quantile}     last window's percentiles (CO-corrected)
  huntlb_demo_latency_mean_ms{front}         last window's mean
  huntlb_demo_rate{front}                    requests/s sent
  huntlb_demo_windows_total                  windows finished

POST /rate?factor=F multiplies the rate from the next window on (a load step;
F=1 undoes it). Env: FRONTS ("name=url ...", a url's host a service name),
RATE (per strategy), LOAD_WINDOW_S, DEMAND (job sizes, as the apps').
Standard library only (the image has Debian's python3).
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

FRONTS = [tuple(f.split("=", 1)) for f in os.environ["FRONTS"].split()]
RATE = float(os.environ.get("RATE", "40"))
WINDOW = float(os.environ.get("LOAD_WINDOW_S", "5"))
DEMAND = os.environ.get("DEMAND", "")
QUANTILES = (50.0, 90.0, 99.0)

lock = threading.Lock()
state = {"factor": 1.0, "windows": 0, "requests": {}, "errors": {}, "served": {}, "lat": {}, "mean": {}, "fronts": {}}


def replicas(url: str) -> list[str]:
    """url on every address its host resolves to (Docker's DNS names each
    replica of a service), in a fixed order; url itself if it resolves to none."""
    u = urlparse(url)
    try:
        ips = sorted({a[4][0] for a in socket.getaddrinfo(u.hostname, u.port or 80, type=socket.SOCK_STREAM)})
    except OSError:
        return [url]
    return [u._replace(netloc=f"{ip}:{u.port or 80}").geturl() for ip in ips] or [url]


def window(seed: int, rate: float, work: str) -> None:
    procs = []
    for name, url in FRONTS:
        out = os.path.join(work, f"{name}.json")
        targets = replicas(url)
        argv = ["huntlb-loadgen", "--rate", f"{rate:.2f}", "--duration", str(WINDOW), "--arrival", "poisson",
                "--seed", str(seed), "--timeout-ms", "10000", "--json", out]
        if DEMAND:  # the generator draws each job's size from the seed: every strategy meets the same jobs
            argv += ["--work", DEMAND]
        for t in targets:
            argv += ["--target", t]
        with lock:
            state["fronts"][name] = len(targets)
        procs.append((name, out, subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    for name, out, p in procs:
        try:
            _, err = p.communicate(timeout=WINDOW + 30)
            rep = json.load(open(out))
        except Exception as e:  # a report we cannot read: say so, count the window's requests as lost
            p.kill()
            print(f"drive: {name}: no report ({e})", file=sys.stderr, flush=True)
            with lock:
                state["errors"][name] = state["errors"].get(name, 0) + rate * WINDOW
            continue
        bad = rep["errors"] + sum(n for s, n in rep["status"].items() if not 200 <= int(s) < 300)
        pct = {q: v / 1000 for q, v in rep["latency"]["percentiles"]}
        with lock:
            state["requests"][name] = state["requests"].get(name, 0) + rep["completed"]
            state["errors"][name] = state["errors"].get(name, 0) + bad
            for b, n in rep.get("served_by", {}).items():
                state["served"][(name, b)] = state["served"].get((name, b), 0) + n
            state["lat"][name] = {q: pct.get(q, 0.0) for q in QUANTILES}
            state["mean"][name] = rep["latency"]["mean_us"] / 1000
        if bad:
            print(f"drive: {name}: {bad} client errors in window {seed}: {rep['status']} errors={rep['errors']}",
                  file=sys.stderr, flush=True)


def render() -> str:
    with lock:
        s = json.loads(json.dumps({k: v for k, v in state.items() if k != "served"}))
        served = dict(state["served"])
        rate = RATE * state["factor"]
    lines = ["# TYPE huntlb_demo_requests_total counter", "# TYPE huntlb_demo_errors_total counter",
             "# TYPE huntlb_demo_served_total counter", "# TYPE huntlb_demo_latency_ms gauge",
             "# TYPE huntlb_demo_latency_mean_ms gauge", "# TYPE huntlb_demo_rate gauge",
             "# TYPE huntlb_demo_windows_total counter", "# TYPE huntlb_demo_fronts gauge",
             f"huntlb_demo_windows_total {s['windows']}"]
    for name, _ in FRONTS:
        lines.append(f'huntlb_demo_rate{{front="{name}"}} {rate}')
        if name in s["fronts"]:
            lines.append(f'huntlb_demo_fronts{{front="{name}"}} {s["fronts"][name]}')
        lines.append(f'huntlb_demo_requests_total{{front="{name}"}} {s["requests"].get(name, 0)}')
        lines.append(f'huntlb_demo_errors_total{{front="{name}"}} {s["errors"].get(name, 0)}')
        if name in s["lat"]:
            for q, v in s["lat"][name].items():
                lines.append(f'huntlb_demo_latency_ms{{front="{name}",quantile="{float(q) / 100}"}} {v}')
            lines.append(f'huntlb_demo_latency_mean_ms{{front="{name}"}} {s["mean"][name]}')
    for (name, b), n in sorted(served.items()):
        lines.append(f'huntlb_demo_served_total{{front="{name}",backend="{b}"}} {n}')
    return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    def _send(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("content-type", "text/plain; version=0.0.4")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, render()) if self.path.startswith("/metrics") else self._send(404, "not found\n")

    def do_POST(self):
        u = urlparse(self.path)
        if u.path != "/rate":
            return self._send(404, "not found\n")
        try:
            factor = float(parse_qs(u.query)["factor"][0])
            assert 0 <= factor <= 10
        except Exception:
            return self._send(400, "want /rate?factor=F, 0 <= F <= 10\n")
        with lock:
            state["factor"] = factor
        print(f"drive: rate x{factor} from the next window", file=sys.stderr, flush=True)
        self._send(200, f"rate {RATE * factor:.1f} req/s per front from the next window\n")

    def log_message(self, *a):
        pass


def wait_ready(timeout: float = 120.0) -> None:
    """Load starts once every front (each replica of each strategy) has answered
    200 three times in a row: the proxies have found the backends and passed
    their first health checks."""
    import urllib.request
    t0, ok = time.monotonic(), {}
    while time.monotonic() - t0 < timeout and (not ok or min(ok.values()) < 3):
        for name, url in FRONTS:
            for u in replicas(url):
                try:
                    ok[u] = ok.get(u, 0) + 1 if urllib.request.urlopen(u, timeout=2).status == 200 else 0
                except OSError:
                    ok[u] = 0
        time.sleep(0.2)
    waiting = [n for n, k in ok.items() if k < 3]
    print(f"drive: fronts ready after {time.monotonic() - t0:.1f} s" + (f", still not: {waiting}" if waiting else ""),
          file=sys.stderr, flush=True)


def main() -> int:
    srv = ThreadingHTTPServer(("0.0.0.0", 9100), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    wait_ready()
    work = tempfile.mkdtemp(prefix="drive-")
    print(f"drive: {len(FRONTS)} strategies x {RATE} req/s, each over {', '.join(str(len(replicas(u))) for _, u in FRONTS)} fronts, "
          f"{WINDOW} s windows, jobs {DEMAND or 'drawn by the apps'}; metrics on :9100", file=sys.stderr, flush=True)
    seed = 0
    while True:
        seed += 1
        with lock:
            rate = RATE * state["factor"]
        t0 = time.monotonic()
        if rate > 0:
            window(seed, rate, work)
        else:
            time.sleep(WINDOW)
        with lock:
            state["windows"] += 1
        time.sleep(max(0.0, 0.05 - (time.monotonic() - t0)))


if __name__ == "__main__":
    sys.exit(main())
