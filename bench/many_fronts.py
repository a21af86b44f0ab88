#!/usr/bin/env python3
"""Many fronts, for real: what the forwarding tier buys over each proxy's
strongest least-request at 1, 4, 8 and 16 fronts, and what it costs
(docs/results/many-fronts.md).

Each configuration is one `bench/pairs.py` run (paired repetitions, shared
seeds): the baseline (HAProxy leastconn, Envoy LEAST_REQUEST with a full scan),
the shipped tier (FWD: each agent hears 8 peers), the tier with every member
(FWDall), and the baseline through one front (`@1`: one front's least is the
fleet's, the ideal this testbed can reach, on the same arrivals and jobs).

  # every configuration below (about 100 minutes), filed and rendered:
  PYTHONPATH=.:bench HUNTLB_PROFILE=release .venv/bin/python bench/many_fronts.py run   # make bench-many-fronts
  # or one configuration (about 9 minutes), then file its runs and render:
  PYTHONPATH=.:bench HUNTLB_PROFILE=release .venv/bin/python bench/pairs.py haproxy leastconn \\
      FWD/least FWDall/least leastconn@1 --fronts 8 --reps 10 --json bench/out/many-fronts/haproxy-8.jsonl
  PYTHONPATH=.:bench .venv/bin/python bench/many_fronts.py collect bench/out/many-fronts/haproxy-8.jsonl
  PYTHONPATH=.:bench .venv/bin/python bench/many_fronts.py report

`collect` replaces the configuration's runs in bench/data/many-fronts.json
(one run per line); `report` writes docs/results/many-fronts.md from them
alone, through bench/reports/many-fronts.md, and adds to the data what the
report shows (a line `{"shown": PLACEHOLDER, "line": TEXT}` per line of each
value, after the runs), so that a ratio greps to its data too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchlib.render import render
from benchlib.stats import ci95

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "many-fronts.json"
REPORT = ROOT / "docs" / "results" / "many-fronts.md"
SETUP = ("proxy", "baseline", "fronts", "servers", "demand")
OUT = ROOT / "bench" / "out" / "many-fronts"
# name -> bench/pairs.py arguments: 10 paired repetitions each.
GRID = {
    **{f"haproxy-{n}": ["haproxy", "leastconn", "FWD/least", "FWDall/least", "leastconn@1", "--fronts", str(n)] for n in (4, 8, 16)},
    **{f"envoy-{n}": ["envoy", "LR/full", "FWD/full", "FWDall/full", "LR/full@1", "--fronts", str(n)] for n in (4, 8, 16)},
    "haproxy-1": ["haproxy", "leastconn", "FWD/least", "--fronts", "1"],
    "envoy-1": ["envoy", "LR/full", "FWD/full", "--fronts", "1"],
    "haproxy-16-lognormal": ["haproxy", "leastconn", "FWD/least", "FWDall/least", "leastconn@1", "--fronts", "16",
                             "--demand", "lognormal:1.5"],
    "haproxy-16-48": ["haproxy", "leastconn", "FWD/least", "leastconn@1", "--fronts", "16", "--servers", "48"],
}


def run(only: list[str], reps: int) -> None:
    """Each configuration of GRID (or `only`) through bench/pairs.py, one at a
    time, its runs filed as it ends; then the report."""
    import subprocess
    unknown = [n for n in only if n not in GRID]
    if unknown:
        raise SystemExit(f"unknown configuration {', '.join(unknown)}: expected some of {', '.join(GRID)}")
    OUT.mkdir(parents=True, exist_ok=True)
    for name in only or GRID:
        out = OUT / f"{name}.jsonl"
        argv = [sys.executable, str(ROOT / "bench" / "pairs.py"), *GRID[name], "--reps", str(reps), "--json", str(out)]
        print(f"{name}: {' '.join(argv[2:])}", flush=True)
        subprocess.run(argv, check=True, timeout=3 * 3600)
        collect([out])
    report()


def lines() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()] if DATA.exists() else []


def load() -> list[dict]:
    """The runs (not the lines of what the report shows)."""
    return [r for r in lines() if "shown" not in r]


def stored_shown() -> dict:
    """What the report showed when the data was last written: render's "shown"
    dict, put back together from its lines."""
    shown: dict = {}
    for r in lines():
        if "shown" in r:
            shown.setdefault(r["shown"], []).append(r["line"])
    return {k: v if len(v) > 1 else v[0] for k, v in shown.items()}


def write(runs: list[dict], shown: dict) -> None:
    """The runs, a line each, then what the report shows, a line per line."""
    out = [json.dumps(r, sort_keys=True) for r in runs]
    out += [json.dumps({"shown": k, "line": line}, ensure_ascii=False)
            for k, v in shown.items() for line in (v if isinstance(v, list) else [v])]
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text("".join(line + "\n" for line in out))


def collect(files: list[Path]) -> None:
    runs = load()
    for f in files:
        new = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        if not new:
            raise SystemExit(f"{f}: no runs")
        keys = {tuple(r.get(k) for k in SETUP) for r in new}
        if len(keys) != 1 or None in next(iter(keys)):
            raise SystemExit(f"{f}: runs of one configuration, each naming {', '.join(SETUP)} (bench/pairs.py --json)")
        runs = [r for r in runs if tuple(r.get(k) for k in SETUP) not in keys] + new
        print(f"{f}: {len(new)} runs of {dict(zip(SETUP, next(iter(keys))))}")
    runs.sort(key=lambda r: (r["proxy"], r["demand"], r["servers"], r["fronts"], r["rep"], r["policy"]))
    # what the report showed is stale now: `report` writes it again
    write(runs, {})


def ratio(runs: list[dict], cand: str, base: str, key: str) -> tuple[float, float, float, int] | None:
    """Median, mean and 95% CI half-width of cand/base over the repetitions
    where both ran without client errors and valid; and how many."""
    xs = []
    for rep in sorted({r["rep"] for r in runs}):
        pair = {r["policy"]: r for r in runs if r["rep"] == rep and not r["errors"] and r["valid"]}
        if cand in pair and base in pair:
            xs.append(pair[cand][key] / pair[base][key])
    if not xs:
        return None
    m, h = ci95(xs) if len(xs) > 1 else (xs[0], float("nan"))
    return statistics.median(xs), m, h, len(xs)


def rows(runs: list[dict]) -> str:
    out = ["| proxy | demand | backends | fronts | strategy | mean / baseline | p99 / baseline | pairs | "
           "agents' CPU (cores, all agents) | tier datagrams per request | client errors |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    configs = sorted({tuple(r[k] for k in SETUP) for r in runs}, key=lambda c: (c[0], c[4], c[3], c[2]))
    for proxy, base, fronts, servers, demand in configs:
        mine = [r for r in runs if (r["proxy"], r["baseline"], r["fronts"], r["servers"], r["demand"]) == (proxy, base, fronts, servers, demand)]
        for name in sorted({r["policy"] for r in mine}, key=lambda n: (n != base, n.endswith("@1"), n)):
            these = [r for r in mine if r["policy"] == name]
            errors = sum(r["errors"] for r in these)
            cpu = statistics.median(r["agents_cpu"] for r in these if r.get("agents_cpu") is not None)
            dg = [r["datagrams"] / r["achieved_rate"] for r in these if r.get("datagrams") is not None and r["achieved_rate"]]
            if name == base:
                mean_cell = f"1 ({statistics.median(r['mean_ms'] for r in these):.1f} ms)"
                p99_cell = f"1 ({statistics.median(r['p99_ms'] for r in these):.0f} ms)"
                n = len(these)
            else:
                cells = [ratio(mine, name, base, k) for k in ("mean_ms", "p99_ms")]
                mean_cell, p99_cell = (f"**{c[0]:.3f}** ({c[1]:.3f} ± {c[2]:.3f})" if c else "-" for c in cells)
                n = cells[0][3] if cells[0] else 0
            out.append(f"| {proxy} | {demand} | {servers} | {fronts} | {name} | {mean_cell} | {p99_cell} | {n} | {cpu:.2f} | "
                       f"{statistics.median(dg):.1f} | {errors}{' (FLAGGED)' if errors else ''} |" if dg else
                       f"| {proxy} | {demand} | {servers} | {fronts} | {name} | {mean_cell} | {p99_cell} | {n} | {cpu:.2f} | - | "
                       f"{errors}{' (FLAGGED)' if errors else ''} |")
    return "\n".join(out)


def findings(runs: list[dict]) -> str:
    """One line per configuration: the tier's mean ratio, as sampled and with
    every member, beside the one-front ideal's; and the datagrams each cost."""
    out = []
    configs = sorted({tuple(r[k] for k in SETUP) for r in runs}, key=lambda c: (c[0], c[4], c[3], c[2]))
    for proxy, base, fronts, servers, demand in configs:
        mine = [r for r in runs if (r["proxy"], r["baseline"], r["fronts"], r["servers"], r["demand"]) == (proxy, base, fronts, servers, demand)]
        names = {r["policy"] for r in mine}
        fwd = next((n for n in names if n.startswith("FWD/")), None)
        every = next((n for n in names if n.startswith("FWDall/")), None)
        ideal = f"{base}@1" if f"{base}@1" in names else None
        parts = []
        for name, what in ((fwd, "the tier as shipped"), (every, "with every member"), (ideal, "the one-front ideal")):
            c = ratio(mine, name, base, "mean_ms") if name else None
            if c:
                parts.append(f"{what} {c[0]:.3f}x")
        dg = {n: statistics.median(r["datagrams"] / r["achieved_rate"] for r in mine if r["policy"] == n and r.get("datagrams") is not None)
              for n in (fwd, every) if n}
        cost = ", ".join(f"{n.split('/')[0]} {v:.1f} datagrams per request" for n, v in dg.items())
        out.append(f"* {proxy}, {fronts} front{'s' if fronts > 1 else ''}, {servers} backends, {demand}: mean over {base}'s: "
                   f"{'; '.join(parts)}{f' ({cost})' if cost else ''}.")
    return "\n".join(out)


def text(runs: list[dict], shown: dict | None = None) -> str:
    """The report, from the runs alone; what it shows into `shown`."""
    return render("many-fronts", {"table": rows(runs), "findings": findings(runs), "runs": str(len(runs))}, shown=shown)


def report() -> None:
    runs = load()
    if not runs:
        raise SystemExit(f"{DATA}: no runs yet (collect some)")
    shown: dict = {}
    REPORT.write_text(text(runs, shown))
    write(runs, shown)
    print(f"wrote {REPORT} and {DATA}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure GRID's configurations (bench/pairs.py), file them and render")
    r.add_argument("only", nargs="*", help=f"these configurations only, of: {', '.join(GRID)}")
    r.add_argument("--reps", type=int, default=10)
    c = sub.add_parser("collect", help="file bench/pairs.py --json runs into bench/data/many-fronts.json")
    c.add_argument("files", nargs="+", type=Path)
    sub.add_parser("report", help="write docs/results/many-fronts.md from bench/data/many-fronts.json")
    a = ap.parse_args()
    if a.cmd == "run":
        run(a.only, a.reps)
    elif a.cmd == "collect":
        collect(a.files)
    else:
        report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
