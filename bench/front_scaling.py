#!/usr/bin/env python3
"""What a hunting front costs as the fleet grows (docs/results/front-scaling.md):
req/s and CPU per
request of each front over the same front with every hunting line removed, at
3, 12, 48 and 128 servers, bare and browser-like requests.

Usage (after `make release` and `make bench-setup`):
  PYTHONPATH=.:bench HUNTLB_PROFILE=release .venv/bin/python bench/front_scaling.py haproxy --reps 10 [--json F]
  .venv/bin/python bench/front_scaling.py --page   (the page from its runs: measures nothing)

The fronts: `plainpass` (the plain front agents with `fleet_pass_plain`
serve: the tier front with no hunting line, its "hunting" variant bound to a
source address of its own), `tier` (HAProxy `front-tier.cfg`: leastconn plus hunt-pass and
hunt-front; Envoy `front-tier.yaml`: FULL_SCAN plus the same two headers; both
over a forwarding tier) and `refusing` (HAProxy `front.cfg`: one pick rule per
server, a buffered copy of each request for the busy retry; Envoy
`front.yaml`: the offer and its retry policy), each against the same file with
every hunting line removed (plain: the same balancing). As in `make
bench-proxies`: one proxy worker pinned to CPU 0, a static responder (on 128
addresses, the first N of them the servers) and wrk on CPU 1, 1 s runs, the
variants' order reversed every other repetition, health checks every 10 s in
every variant (the idle fronts' checks of 128 servers shared the measured
core); ratios are per repetition
(side by side), then median with its 95% CI. A run with non-2xx answers or
socket errors is flagged.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
from pathlib import Path

from benchlib.fronts import MEASURED, Bed, overhead_bed, pin, slow_checks
from benchlib.render import TEMPLATES, render
from benchlib.reports import write_json
from benchlib.stats import ci95, median, paired_ratio
from benchlib.tools import REQUESTS, instructions_per_request, paired_wrk, wrk_errors
from harness import haproxy_runtime, start_front, wait_all_up


def templated(n: int):
    """A config edit: the backend's servers as `server-template` slots with no
    address (disabled), as a user sizes a backend for DNS or the runtime API
    to fill; `fill` then fills them."""
    def edit(text: str) -> str:
        text = re.sub(r"^\s*server web\d+ .*\n", "", text, flags=re.M)
        return text.rstrip("\n") + f"\n    server-template web 1-{n} 127.0.0.1:8080 disabled weight 100\n"
    return edit


def from_eds(work: Path, name: str, backends):
    """A config edit (Envoy): the cluster's hosts from a file Envoy watches
    (EDS, as envoy-filter/examples/discovery-eds.yaml), written here with
    `backends`, instead of a static list."""
    path = work / f"{name}.eds.yaml"
    eps = [{"endpoint": {"address": {"socket_address": {"address": b.agent.rsplit(":", 1)[0],
                                                        "port_value": int(b.agent.rsplit(":", 1)[1])}}}} for b in backends]
    path.write_text(json.dumps({"resources": [{"@type": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
                                               "cluster_name": "backends", "endpoints": [{"lb_endpoints": eps}]}]}))

    def edit(cfg):
        c = cfg["static_resources"]["clusters"][0]
        c.pop("load_assignment", None)
        c["type"] = "EDS"
        c["eds_cluster_config"] = {"eds_config": {"resource_api_version": "V3", "path_config_source": {"path": str(path)}}}
        c["ignore_health_on_host_removal"] = True
        return cfg
    return edit


def fill(front, backends) -> None:
    """Each slot given its backend's address and enabled through the runtime
    API (`set server ... addr`, `state ready`), then every one UP."""
    for i, b in enumerate(backends, 1):
        host, port = b.agent.rsplit(":", 1)
        for cmd in (f"set server hunt/web{i} addr {host} port {port}", f"set server hunt/web{i} state ready"):
            out = haproxy_runtime(front.admin, cmd)
            assert "No such" not in out and "Require" not in out, (cmd, out)
    wait_all_up(front, len(backends), timeout=60)


FRONTS = {"haproxy": {"tier": "front-tier.cfg", "refusing": "front.cfg", "plainpass": "front-tier.cfg"},
          "envoy": {"tier": "front-tier.yaml", "refusing": "front.yaml", "plainpass": "front-tier.yaml"}}
# `plainpass`: the front agents with fleet_pass_plain serve, the tier front with
# every hunting line removed; its "hunting" variant differs from plain only by
# the source address its connections leave from (what several fronts on one
# host need to be told apart; fronts on hosts of their own need not even that).


def rows(data: dict) -> list[str]:
    """One table row per (servers, front, request kind) of a run's JSON."""
    out = []
    for n, runs in data["runs"].items():
        fronts = sorted({k.split(" ")[0] for k in runs})
        for f in fronts:
            for kind in REQUESTS:
                h, p = runs[f"{f} hunting, {kind}"], runs[f"{f} plain, {kind}"]
                pr = paired_ratio(h, p)
                cpu_h, cpu_p = median([r["cpu_us_per_req"] for r in h]), median([r["cpu_us_per_req"] for r in p])
                errs = wrk_errors(h) + wrk_errors(p)
                out.append(f"| {n} | {f} | {kind} | **{pr['median']:.3f}** ({pr['median_ci95'][0]:.3f}-{pr['median_ci95'][1]:.3f}) "
                           f"| {cpu_p:.1f} | {cpu_h:.1f} | {cpu_h / cpu_p:.3f} | {len(h)} | {errs or 'none'} |")
    return out


def report(files: list[Path]) -> str:
    """docs/results/front-scaling.md's tables, from the runs' JSON files."""
    head = ("| servers | front | request | hunting / plain req/s, median (95% CI) | plain CPU us/req | hunting CPU us/req "
            "| CPU ratio | reps | client errors |\n|---|---|---|---|---|---|---|---|---|")
    parts = []
    for path in files:
        d = json.loads(path.read_text())
        if "variants" in d:  # bench/refusing_ablation.py's run: its own tables
            from refusing_ablation import table
            parts.append(f"### {d['proxy']}, the refusing front part by part (`{path.name}`)\n{table(d)}")
            continue
        if "runs" in d and d["runs"]:
            d.setdefault("proxy", f"haproxy {d.get('haproxy')}")
            how = {"runtime": "servers from EDS" if d["proxy"] == "envoy" else "tier front's servers filled through the runtime API",
                   "static": "static server lists"}[d.get("fill", "static")]
            parts.append(f"### {d['proxy']}, {how} (`{path.name}`)\n\n{head}\n" + "\n".join(rows(d)))
        if d.get("instructions"):
            lines = [f"| {n} | {v['plain']:.0f} | {v['hunting']:.0f} | {v['hunting'] - v['plain']:+.0f} | {v['hunting'] / v['plain']:.3f} |"
                     for n, v in d["instructions"].items()]
            front = {"tier": "the tier front", "plainpass": "the plain front"}[d.get("instructions_front", "tier")]
            parts.append(f"### {d['proxy']}, {front}: user-space instructions per request, callgrind (`{path.name}`)\n\n"
                         "| servers | plain | hunting | hunting - plain | hunting / plain |\n|---|---|---|---|---|\n" + "\n".join(lines))
    return "\n\n".join(parts) + "\n"


# The page's runs (bench/data/front-scaling/NAME.json) and its prose
# (bench/reports/front-scaling.md, a table placed by each run's name, - and .
# as _: ${haproxy_2_6_tier_30_reps}); what it says of them is written there.
RUNS = Path(__file__).resolve().parent / "data" / "front-scaling"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "results" / "front-scaling.md"


def page() -> str:
    """docs/results/front-scaling.md: the template with each named run's tables."""
    names = {re.sub(r"\W", "_", p.stem): p for p in sorted(RUNS.glob("*.json"))}
    wanted = string.Template((TEMPLATES / "front-scaling.md").read_text()).get_identifiers()
    missing = [w for w in wanted if w not in names]
    if missing:
        raise KeyError(f"bench/reports/front-scaling.md: no run bench/data/front-scaling/NAME.json for {missing}")
    return render("front-scaling", {w: report([names[w]]).rstrip("\n") for w in wanted})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("proxy", nargs="?", choices=["envoy", "haproxy"])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=1)
    ap.add_argument("--servers", default="3,12,48,128")
    ap.add_argument("--fronts", default="tier,refusing")
    ap.add_argument("--haproxy", default="2.6", choices=["2.6", "3.0"])
    ap.add_argument("--fill", default="runtime", choices=["runtime", "static"],
                    help="runtime: HAProxy's tier front over server-template slots filled through the runtime API (the "
                    "refusing front always has its server lines: its pick rules name them), Envoy's hosts from EDS (a "
                    "file it watches); static: server lines, a static host list")
    ap.add_argument("--instructions", type=int, metavar="REQUESTS",
                    help="HAProxy only: instead, user-space instructions per request (callgrind) of the tier front (or, with "
                    "--fronts plainpass, the plain front), "
                    "hunting and plain, at each number of servers")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--report", nargs="+", type=Path, metavar="JSON",
                    help="measure nothing: print the tables of these runs (docs/results/front-scaling.md quotes them)")
    ap.add_argument("--page", action="store_true",
                    help=f"measure nothing: write {PAGE.relative_to(PAGE.parents[2])} from its runs and its template")
    a = ap.parse_args()
    if a.report:
        print(report(a.report), end="")
        return 0
    if a.page:
        PAGE.write_text(page())
        print(f"wrote {PAGE.relative_to(PAGE.parents[2])}")
        return 0
    if a.proxy is None:
        ap.error("the proxy to measure: envoy or haproxy (or --report, --page)")
    counts = [int(x) for x in a.servers.split(",")]
    label = f"haproxy {a.haproxy}" if a.proxy == "haproxy" else "envoy"
    out = {"proxy": label, "fill": a.fill, "reps": a.reps, "seconds": a.seconds, "runs": {}}
    with overhead_bed("huntlb-front-scaling-", a.haproxy, max(counts)) as bed:
        work, procs, addrs, hr, backends = bed.work, bed.procs, bed.addrs, bed.hr, bed.backends
        if a.instructions:
            # the tier front (its hunting lines against none), or with --fronts
            # plainpass the plain front (its source address against none)
            front = "plainpass" if a.fronts == "plainpass" else "tier"
            out["instructions"], out["instructions_front"] = {}, front
            for n in counts:
                bed = Bed(work, procs, addrs, hr, backends[:n])
                per = {("hunting" if h else "plain"): instructions_per_request(
                           bed, f"{front} {n} {'hunting' if h else 'plain'}", h and front == "tier", slow_checks("haproxy"),
                           a.instructions, example=FRONTS["haproxy"][front], source=h and front == "plainpass")
                       for h in (False, True)}
                out["instructions"][str(n)] = per
                print(f"{label}, {n:3d} servers, {front}: instructions per request, hunting {per['hunting']:.0f}, plain "
                      f"{per['plain']:.0f}, hunting/plain {per['hunting'] / per['plain']:.3f}", flush=True)
            counts = []
        for n in counts:
            fronts = {}
            for f in a.fronts.split(","):
                for hunting in (False, True):
                    name = f"{f} {'hunting' if hunting else 'plain'}"
                    slots = a.proxy == "haproxy" and a.fill == "runtime" and f in ("tier", "plainpass")
                    proc_name = f"{f}-{n}-{int(hunting)}"
                    then = templated(n) if slots else from_eds(work, proc_name, backends[:n]) if a.proxy == "envoy" and a.fill != "static" else None
                    fr = start_front(a.proxy, procs, addrs, [] if slots else backends[:n], hunting and f != "plainpass", hr=hr,
                                     name=proc_name, served_by=False, threads=1, example=FRONTS[a.proxy][f],
                                     edit=slow_checks(a.proxy, then), source=hunting and f == "plainpass", **MEASURED)
                    if slots:
                        fill(fr, backends[:n])
                    pin(fr.pid, 0)
                    fronts[name] = fr
            runs = paired_wrk(fronts, REQUESTS, a.reps, a.seconds)
            for fr in fronts.values():
                fr.proc.stop()
            out["runs"][str(n)] = runs
            for f in a.fronts.split(","):
                for kind in REQUESTS:
                    h, p = runs[f"{f} hunting, {kind}"], runs[f"{f} plain, {kind}"]
                    pr = paired_ratio(h, p)
                    cpu = ci95([r["cpu_us_per_req"] for r in h])
                    errs = wrk_errors(h) + wrk_errors(p)
                    print(f"{label}, {n:3d} servers, {f:8s} {kind:12s}: hunting/plain req/s median "
                          f"{pr['median']:.3f} (95% CI {pr['median_ci95'][0]:.3f}-{pr['median_ci95'][1]:.3f}; mean "
                          f"{pr['mean']:.3f} ± {pr['ci95']:.3f}), hunting {median([r['rps'] for r in h]):.0f} req/s, "
                          f"CPU {cpu[0]:.1f} ± {cpu[1]:.1f} us/req (plain "
                          f"{median([r['cpu_us_per_req'] for r in p]):.1f})"
                          f"{f', FLAGGED: {errs} client errors' if errs else ''}", flush=True)
    write_json(a.json, json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
