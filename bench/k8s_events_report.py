#!/usr/bin/env python3
"""docs/results/kubernetes-events.md from a run of scripts/k8s_demo.py --json
(bench/data/kubernetes/events.json) and bench/reports/kubernetes-events.md.

  PYTHONPATH=.:bench .venv/bin/python bench/k8s_events_report.py [DATA]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchlib.render import render

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "kubernetes" / "events.json"
REPORT = ROOT / "docs" / "results" / "kubernetes-events.md"
# what each event does, as the table says it (harness/k8sevents.py does it)
WHAT = {"steady": "nothing", "rollout": "`kubectl rollout restart`: every pod new",
        "delete": "one app pod deleted (its grace: the agent's drain)",
        "drain": "`kubectl drain` of a node, then uncordoned", "scale": "12 -> 16 -> 12",
        "rotate": "the key rotated by `helm upgrade`, three steps", "front": "an Envoy and a HAProxy front pod deleted"}


def table(rows: list[dict]) -> str:
    out = []
    for r in rows:
        e, h = r["proxies"]["envoy"], r["proxies"]["haproxy"]
        what = WHAT[r["event"]]
        if r["event"] == "drain":
            what = f"`kubectl drain` of a node: {r['found'].get('evicted', '?')} pods evicted, then uncordoned"
        what += f", {r['took_s']:.0f} s" + (f"; ERROR {r['error']}" if r["error"] else "")
        fwd = "(every pod new)" if r["event"] == "rollout" else f"{r['found'].get('forwards_sent', 0):,}"
        out.append(f"| {r['event']} | {what} | {e['errors']:,} / {e['sent']:,} | {h['errors']:,} / {h['sent']:,} | "
                   f"{e['twice'] + h['twice']} | {e['answered_not_arrived'] + h['answered_not_arrived']} | {fwd} |")
    return "\n".join(out)


def report(data: Path = DATA) -> str:
    d = json.loads(data.read_text())
    by = {r["event"]: r["found"] for r in d["rows"]}
    rot, sc = by.get("rotate", {}), by.get("scale", {})
    return render("kubernetes-events", {
        "data": f"[{data.relative_to(ROOT)}](../../{data.relative_to(ROOT)})", "apps": d["apps"],
        "fronts": d["fronts_per_proxy"], "rate": f"{d['rate_per_proxy']:g}", "machine": d["machine"],
        "table": table(d["rows"]), "whole_run_s": d["whole_run_s"], "members_s": sc.get("members_s", "n/a"),
        "views": rot.get("views", "n/a"), "view_short": rot.get("view_short", "n/a"),
        "unauthenticated": f"{rot['unauthenticated']:g}" if "unauthenticated" in rot else "n/a"})


def main() -> int:
    data = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DATA
    REPORT.write_text(report(data))
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
