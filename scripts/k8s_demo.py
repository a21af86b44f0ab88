#!/usr/bin/env python3
"""huntlb on a real Kubernetes, under load, through what an orchestrator does
to it: a three-node cluster built here (harness/k8scluster.py), the chart
installed with `helm install` (12 apps with agents), 4 Envoy and 4 HAProxy
fronts (the proxies' own least-request; agents with fleet_pass_plain), a load
generator pod; then a rolling restart, a pod deleted, a node drained, a
scale-out 12 -> 16 -> 12, a key rotation by `helm upgrade` and two fronts
restarted, each under open-loop load through both proxies, counted at the
client and at the apps.

  make demo-k8s                        (docs/kubernetes.md, "A real cluster here"; --build)
  scripts/k8s_demo.py --events rollout,scale --rate 50 --json out.json --keep
  scripts/k8s_demo.py --json bench/data/kubernetes/events.json   (then bench/k8s_events_report.py:
                                                                  docs/results/kubernetes-events.md)

Exits 1 if any event cost a client error, processed a request twice, or
answered one that no app saw. The cluster is removed at the end (--keep
leaves it up for kubectl: `python -m harness.k8scluster down` removes it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the harness package, run from anywhere
from harness import k8scluster as k8s  # noqa: E402
from harness import k8sevents  # noqa: E402
from harness.k8sfleet import Fleet  # noqa: E402


def clean(row: dict) -> bool:
    return not row["error"] and not row["outlasted_load"] and all(
        r["errors"] == 0 and not r["twice"] and not r["answered_not_arrived"] for r in row["proxies"].values())


def table(rows: list[dict]) -> str:
    out = ["| event | took | Envoy fronts: errors / requests | HAProxy fronts: errors / requests | processed twice | answered, never at an app |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        e, h = r["proxies"]["envoy"], r["proxies"]["haproxy"]
        out.append(f"| {r['event']} | {r['took_s']:.0f} s | {e['errors']} / {e['sent']} | {h['errors']} / {h['sent']} | "
                   f"{len(e['twice']) + len(h['twice'])} | {len(e['answered_not_arrived']) + len(h['answered_not_arrived'])} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", default=",".join(k8sevents.EVENTS), help="comma-separated, in order (default: all)")
    ap.add_argument("--rate", type=float, default=50, help="requests/s to each proxy's fronts")
    ap.add_argument("--apps", type=int, default=12)
    ap.add_argument("--fronts", type=int, default=4, help="front pods of each proxy")
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up")
    ap.add_argument("--build", action="store_true", help="build the images afresh (make image, compose/build.sh)")
    args = ap.parse_args()
    names = [n for n in args.events.split(",") if n]
    unknown = [n for n in names if n not in k8sevents.EVENTS]
    if unknown:
        ap.error(f"--events: unknown {unknown}; known: {list(k8sevents.EVENTS)}")
    t0 = time.monotonic()
    rows = []
    try:
        c = k8s.up(3)
        print(f"cluster: 3 nodes up in {time.monotonic() - t0:.0f} s", flush=True)
        if args.build:  # with the cluster's dockerd up
            for cmd in (ROOT / "scripts/image.sh", ROOT / "compose/build.sh"):
                subprocess.run([str(cmd)], check=True, timeout=3600)
        with tempfile.TemporaryDirectory(prefix="huntlb-k8s-demo-") as tmp:
            f = Fleet(c, Path(tmp))
            f.install(apps=args.apps, fronts=args.fronts)
            print(f"installed: {args.apps} apps with agents, {args.fronts} Envoy and {args.fronts} HAProxy fronts, "
                  f"{time.monotonic() - t0:.0f} s in; {args.rate:g} req/s to each proxy's fronts", flush=True)
            rows = k8sevents.run(f, names, rate=args.rate)
    finally:
        if not args.keep:
            left = k8s.down()
            if any(left.values()):
                print(f"left behind: {left}", file=sys.stderr)
    print("\n" + table(rows))
    print(f"\n{time.monotonic() - t0:.0f} s in all")
    if args.json:
        # what bench/k8s_events_report.py renders docs/results/kubernetes-events.md from:
        # each list of paths as its count (the paths are in the run's printout)
        load = os.getloadavg()
        doc = {"machine": f"{os.cpu_count()} cores, the cluster of harness/k8scluster.py (3 node containers), "
                          f"load average {load[0]:.1f} at the end",
               "command": "scripts/k8s_demo.py --json (make demo-k8s)", "rate_per_proxy": args.rate, "apps": args.apps,
               "fronts_per_proxy": args.fronts, "whole_run_s": round(time.monotonic() - t0),
               "rows": [{**r, "proxies": {p: {"sent": x["sent"], "errors": x["errors"], "twice": len(x["twice"]),
                                              "answered_not_arrived": len(x["answered_not_arrived"]), "pods": len(x["pods"])}
                                          for p, x in r["proxies"].items()}} for r in rows]}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if rows and all(clean(r) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
