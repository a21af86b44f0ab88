#!/usr/bin/env python3
"""Offer latency at a forwarding-tier agent with and without junk on its fleet
port: does a flood of unauthenticated datagrams cost an offer
anything? Paired runs, shared seeds.

Four backends whose agents form a tier; huntlb-loadgen offers straight to the
first agent (`hunt-offer` = `hunt-target`, no `hunt-seen`: every offer decides
by the peers' counts, and some are forwarded), Poisson at --rate for --seconds.
In the junk run of each pair, this script also sends --junk datagrams a second
to that agent's fleet port for the whole run: half from a stranger's address,
half from the address of a member in `fleet_peers` that does not run, sealed
under a wrong key (so each costs the agent a MAC check). The two runs of a pair
share the generator's seed (arrivals and job sizes); the order alternates.

Usage (after `make release`):
  PYTHONPATH=.:bench HUNTLB_PROFILE=release .venv/bin/python bench/fleet_junk.py --reps 6

Prints every run, then junk / none for p50 and p99: the median over pairs and
the mean with its 95% CI. A run with client errors is flagged and its pair left
out. Writes nothing but bench/out/fleet-junk/ (the generator's reports).
"""

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time

from benchlib.stats import ci95
from harness import start_fleet
from harness.testbed import FLEET_PORT
from harness.procs import ROOT, Addrs, Procs, binary

OUT = ROOT / "bench" / "out" / "fleet-junk"


def junk_sender(stop: threading.Event, target: tuple[str, int], stranger: str, member: str, per_second: int) -> list[int]:
    """Send `per_second` junk datagrams a second to `target` until `stop`."""
    sent = [0]

    def run():
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        a.bind((stranger, 0))
        b.bind((member, FLEET_PORT))
        forged = f"hunt-fleet/2 {member}:{FLEET_PORT} {{}} 0 1 1 {'ab' * 16}"
        batch = max(per_second // 200, 1)
        t0 = time.monotonic()
        while not stop.is_set():
            for _ in range(batch):
                n = sent[0]
                try:
                    (a if n % 2 else b).sendto(forged.format(n + 1).encode(), target)
                except OSError:
                    pass
                sent[0] += 1
            ahead = sent[0] / per_second - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        a.close()
        b.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return sent, t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--rate", type=float, default=300.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--junk", type=int, default=10_000)
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    procs, addrs = Procs(OUT), Addrs()
    absent = addrs.host()
    try:
        bs = start_fleet(procs, addrs, 4, policy="dynamic", absent=[absent],
                         app_opts={"workers": 8, "demand": "exp:5"})
        first = bs[0]
        stranger = addrs.host()
        rows = []
        for rep in range(a.reps):
            for junk in ([False, True] if rep % 2 == 0 else [True, False]):
                before = first.metrics()
                stop = threading.Event()
                sender = junk_sender(stop, (first.host, FLEET_PORT), stranger, absent, a.junk) if junk else None
                out = OUT / f"run-{rep}-{int(junk)}.json"
                subprocess.run([binary("huntlb-loadgen"), "--target", f"http://{first.agent}/offer", "--rate", str(a.rate),
                                "--duration", str(a.seconds), "--seed", str(100 + rep), "--work", "exp:5",
                                "--header", "hunt-offer:1", "--header", "hunt-target:1", "--json", str(out)],
                               check=True, capture_output=True, timeout=a.seconds + 60)
                if sender:
                    stop.set()
                    sender[1].join(timeout=5)
                after = first.metrics()
                r = json.loads(out.read_text())
                pct = {float(q): us for q, us in r["latency"]["percentiles"]}
                bad = sum(after[k] - before[k] for k in after if k.startswith("huntlb_fleet_reports_bad_total"))
                fwd = after['huntlb_forwards_total{outcome="sent"}'] - before['huntlb_forwards_total{outcome="sent"}']
                row = {"rep": rep, "junk": junk, "p50_ms": pct[50.0] / 1000, "p99_ms": pct[99.0] / 1000,
                       "errors": r["errors"], "completed": r["completed"], "dropped": bad, "forwarded": fwd,
                       "junk_sent": sender[0][0] if sender else 0}
                rows.append(row)
                flag = f"  ERRORS {row['errors']}" if row["errors"] else ""
                print(f"  rep {rep} junk {'on ' if junk else 'off'}: p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms, "
                      f"{row['completed']} offers, {fwd:.0f} forwarded, {row['junk_sent']} junk sent, {bad:.0f} dropped{flag}",
                      flush=True)
    finally:
        procs.stop_all()
    bad_reps = {r["rep"] for r in rows if r["errors"]}
    if bad_reps:
        print(f"FLAGGED: client errors in repetitions {sorted(bad_reps)}; their pairs are left out", file=sys.stderr)
    for key in ("p50_ms", "p99_ms"):
        xs = []
        for rep in range(a.reps):
            if rep in bad_reps:
                continue
            pair = {r["junk"]: r for r in rows if r["rep"] == rep}
            xs.append(pair[True][key] / pair[False][key])
        m, h = ci95(xs)
        print(f"junk / none, {key[:-3]}: median {statistics.median(xs):.3f}, mean {m:.3f} ± {h:.3f} ({len(xs)} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
