#!/usr/bin/env python3
"""The shipped Grafana dashboard's queries, drawn without Grafana.

packaging/monitoring/huntlb-dashboard.json is a Grafana dashboard; Grafana has
no Debian package, so to see it against a live fleet on a machine with only
Prometheus, this turns its panels into the demo's own page (compose/dashboard:
a few canvas calls over Prometheus' HTTP API, served by Prometheus with
--web.user-assets). Every query runs as written, the variables set to All
(`.*`) and $__rate_interval to --rate-interval; time series become line
charts, stat panels bars. Only the look differs from Grafana's.

    python3 scripts/dashboard_preview.py OUT_DIR [--rate-interval 30s]
    prometheus ... --web.user-assets=OUT_DIR    # then open /user/index.html

scripts/monitoring_screenshot.py does both against a small live fleet and
writes docs/img/fleet-dashboard.png.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "packaging" / "monitoring" / "huntlb-dashboard.json"
PAGE = ROOT / "compose" / "dashboard"
# Grafana's units, as the page writes them
UNITS = {"reqps": "req/s", "pps": "/s", "s": "s", "percentunit": "", "none": ""}


def queries(grafana: dict, rate_interval: str) -> list[tuple[dict, list[tuple[str, str]]]]:
    """Each drawn panel with its (expr, legend) pairs, variables substituted.
    Raises on a variable it does not know, so a new one cannot go unrendered."""
    known = {v["name"] for v in grafana["templating"]["list"]}
    out = []
    for p in grafana["panels"]:
        if p["type"] == "row":
            continue
        qs = []
        for t in p["targets"]:
            expr = t["expr"].replace("$__rate_interval", rate_interval)
            for name in re.findall(r"\$(\w+)", expr):
                if name not in known:
                    raise ValueError(f"panel {p['title']!r}: unknown variable ${name}")
                expr = expr.replace(f"${name}", ".*")
            qs.append((expr, t.get("legendFormat", "")))
        out.append((p, qs))
    return out


def panels(grafana: dict, rate_interval: str = "30s", range_s: int = 300) -> dict:
    """The page's panels.json for `grafana`."""
    drawn = []
    for p, qs in queries(grafana, rate_interval):
        kind = {"timeseries": "lines", "stat": "bars"}.get(p["type"])
        if kind is None:
            raise ValueError(f"panel {p['title']!r}: type {p['type']} is not drawn by the preview")
        unit = UNITS.get(p["fieldConfig"]["defaults"].get("unit", "none"), "")
        drawn.append({"id": str(p["id"]), "title": p["title"], "kind": kind, "unit": unit,
                      "queries": [{"expr": e, "legend": legend} for e, legend in qs]})
    return {"title": grafana["title"] + " (the Grafana dashboard's queries, drawn by the demo's page)",
            "refresh_s": 5, "range_s": range_s, "panels": drawn}


def write(out: Path, rate_interval: str = "30s", range_s: int = 300) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for f in ("index.html", "dashboard.css", "dashboard.js"):
        shutil.copy(PAGE / f, out / f)
    spec = panels(json.loads(DASHBOARD.read_text()), rate_interval, range_s)
    (out / "panels.json").write_text(json.dumps(spec, indent=1) + "\n")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--rate-interval", default="30s", help="what $__rate_interval stands for (4 scrape intervals or more)")
    ap.add_argument("--range", type=int, default=300, help="seconds of history drawn")
    args = ap.parse_args()
    write(args.out, args.rate_interval, args.range)
    return 0


if __name__ == "__main__":
    sys.exit(main())
