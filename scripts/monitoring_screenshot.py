#!/usr/bin/env python3
"""The shipped fleet dashboard over a live fleet, in headless Chromium.

Starts, on loopback: 4 workload apps each behind an agent, the agents in one
forwarding tier with a fifth member in fleet_peers where no agent runs
(unheard); two HAProxy hunting fronts (offers) and one HAProxy tier front
(passes); Prometheus scraping the agents every second with the shipped rules
(packaging/monitoring/huntlb-alerts.yml) and serving the dashboard's queries
drawn by the demo's page (scripts/dashboard_preview.py). Then a load that
rises (2, 6, then 16 clients), one app frozen with SIGSTOP for 20 s, and a
datagram a second from a stranger on one agent's fleet port; the shot is
taken under the last step, then everything it started is stopped. About 2.5
minutes.

    PYTHONPATH=. .venv/bin/python scripts/monitoring_screenshot.py [--out docs/img/fleet-dashboard.png]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from harness import ROOT, Addrs, Procs, closed_loop, start_fleet, start_front, wait_http, wait_until
from harness.testbed import FLEET_PORT

import dashboard_preview  # beside this script: on sys.path when it runs

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def prometheus_binary() -> str:
    local = ROOT / ".cache" / "prometheus" / "prometheus"
    found = shutil.which("prometheus") or (str(local) if local.exists() else None)
    if not found:
        raise SystemExit("no prometheus on PATH or in .cache/prometheus/: run make setup")
    return found


def load(fronts: list[str], clients: int, seconds: float, counts: dict) -> None:
    for status, n in closed_loop(fronts, clients, seconds, "/shot").items():
        counts[status] = counts.get(status, 0) + n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "fleet-dashboard.png")
    ap.add_argument("--phase", type=float, default=30.0, help="seconds per load step")
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if not chromium:
        raise SystemExit("no chromium: apt-get install chromium")
    work = Path(tempfile.mkdtemp(prefix="huntlb-shot-"))
    procs, addrs = Procs(work), Addrs()
    stranger = None
    try:
        absent = addrs.host()
        bs = start_fleet(procs, addrs, 4, policy="static:3", absent=[absent], wanting=False,
                         app_opts={"workers": 4, "demand": "exp:40", "cores": 4}, agent_opts={"workers": 4})
        fronts = [start_front("haproxy-2.6", procs, addrs, bs, source=True) for _ in range(2)]
        fronts.append(start_front("haproxy-2.6", procs, addrs, bs, example="front-tier.cfg", source=True))
        host = addrs.host()
        page = dashboard_preview.write(work / "page", rate_interval="10s", range_s=int(3.5 * args.phase) + 30)
        cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
               "rule_files": [str(ROOT / "packaging" / "monitoring" / "huntlb-alerts.yml")],
               "scrape_configs": [{"job_name": "huntlb", "static_configs": [{"targets": [b.admin for b in bs]}]}]}
        (work / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        prom = f"{host}:9090"
        p = procs.start("prometheus", [prometheus_binary(), f"--config.file={work / 'prometheus.yml'}",
                                       f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address={prom}",
                                       f"--web.user-assets={page}"])
        wait_http(prom, "/-/ready", proc=p, timeout=30, want=200)

        # a stranger's datagrams on one agent's fleet port: dropped, counted by reason
        stop = threading.Event()
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stranger.bind((addrs.host(), 0))

        def junk():
            while not stop.wait(1.0):
                stranger.sendto(b"hunt-fleet/3 junk", (bs[0].host, FLEET_PORT))
        threading.Thread(target=junk, daemon=True).start()

        counts: dict = {}
        listens = [f.listen for f in fronts]
        load(listens, 2, args.phase, counts)
        load(listens, 6, args.phase, counts)
        # the last step runs 40 s longer, so the shot is taken under it, after the app froze and thawed
        frozen = bs[3].app_proc
        threading.Timer(5, frozen.signal, args=(signal.SIGSTOP,)).start()
        threading.Timer(25, frozen.signal, args=(signal.SIGCONT,)).start()
        last = threading.Thread(target=load, args=(listens, 16, args.phase + 40, counts), daemon=True)
        last.start()
        time.sleep(args.phase + 10)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shot = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={work / 'chromium'}", "--window-size=1280,2200",
                               "--virtual-time-budget=3000", f"--screenshot={args.out}", f"http://{prom}/user/index.html"],
                              capture_output=True, text=True, timeout=120)
        if shot.returncode != 0 or not args.out.exists():
            raise SystemExit(f"chromium failed: {shot.stderr[-2000:]}")
        wait_until(lambda: args.out.stat().st_size > 0, timeout=5)
        last.join(120)
        stop.set()
        print(f"screenshot: {args.out}; requests by status {dict(sorted(counts.items()))}")
        return 0
    finally:
        if stranger:
            stranger.close()
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
