#!/usr/bin/env python3
"""docs/results/tier-cost.md from the tier-cost runs (bench/data/tier-cost/):
what the per-backend hop costs beside the fronts, at the vs-least load, 4
HAProxy fronts: the agents relaying, the tier's datagrams alone (FWDnone), the
tier (FWD, and FWDp under plain fronts), and a plain HAProxy or Envoy beside
each backend in the agent's place (the sidecar yardstick), each agent build in
one `bench/pairs.py` invocation.

  PYTHONPATH=.:bench .venv/bin/python bench/tier_cost_report.py

The prose is bench/reports/tier-cost.md. A set is NAME.jsonl, as
`pairs.py --json` writes it: its idle readings (lines with an "idle" key),
then its runs; NAME.txt beside it is the run's printout.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from benchlib.render import render
from benchlib.stats import ci95

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "tier-cost"
REPORT = ROOT / "docs" / "results" / "tier-cost.md"
# set name -> what the agents were (the HAProxy sets: the two builds; the Envoy set: the later one)
SETS = {"haproxy-4-fronts-reader-thread": "a reader thread (before)", "haproxy-4-fronts-reader-task": "the reader on the agent's thread",
        "envoy-4-fronts-reader-task": "4 Envoy fronts"}
# row -> what it is, in the table's order; each proxy's strategy names for it
ROWS = {"relay": "agents relaying (the proxy's own least)",
        "sc": "HAProxy beside each backend instead",
        "esc": "Envoy beside each backend instead",
        "none": "the tier's datagrams, no forward",
        "tier": "the tier (tier fronts)",
        "plain": "the tier under plain fronts (shipped path)"}
NAMES = {"haproxy": {"relay": "leastconn", "sc": "leastconn+sc", "esc": "leastconn+esc", "none": "FWDnone/least",
                     "tier": "FWD/least", "plain": "FWDp/plain"},
         "envoy": {"relay": "LR/full", "sc": "LR/full+sc", "esc": "LR/full+esc", "none": "FWDnone/full",
                   "tier": "FWD/full", "plain": "FWDp/plain"}}


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines() if line.strip()]


def runs(name: str) -> list[dict]:
    return [r for r in rows(name) if "idle" not in r]


def idle(name: str) -> dict[str, float]:
    """strategy -> each agent's CPU at idle, % of a core (the median agent)."""
    return {r["idle"]: 100 * statistics.median(r["per_agent"]) for r in rows(name) if "idle" in r}


def med(xs: list[float], f: str = ".3f") -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):{f}}" + (f" ({min(xs):{f}}-{max(xs):{f}})" if len(xs) > 1 else "")


def paired(rs: list[dict], cand: str, base: str, fn) -> list[float]:
    """fn(candidate run, baseline run) per repetition where both ran valid and error-free."""
    out = []
    for rep in sorted({r["rep"] for r in rs}):
        pair = {r["policy"]: r for r in rs if r["rep"] == rep and r["valid"] and not r["errors"]}
        if cand in pair and base in pair:
            out.append(fn(pair[cand], pair[base]))
    return out


def table(name: str) -> tuple[str, list[str], dict]:
    """The set's table, its flagged runs, and its medians by row (ROWS' keys)."""
    rs, idl = runs(name), idle(name)
    names = NAMES[rs[0]["proxy"]]
    base = names["relay"]
    flagged = [f"{r['policy']} rep {r['rep']}" for r in rs if r["errors"] or not r["valid"]]
    lines, keep = [], {}
    for row, what in ROWS.items():
        s = names[row]
        mine = [r for r in rs if r["policy"] == s and r["valid"] and not r["errors"]]
        if not mine:
            continue
        cpu = [r["agents_cpu"] for r in mine]
        us = [r["agents_cpu"] / r["achieved_rate"] * 1e6 for r in mine]
        per_front = [r["agents_cpu"] / r["fronts_cpu"] for r in mine if r["fronts_cpu"]]
        dg = [r["datagrams"] / r["achieved_rate"] for r in mine if r.get("datagrams") is not None]
        over = paired(rs, s, base, lambda c, b: (c["agents_cpu"] - b["agents_cpu"]) / c["achieved_rate"] * 1e6) if s != base else []
        mean = paired(rs, s, base, lambda c, b: c["mean_ms"] / b["mean_ms"]) if s != base else []
        mean_txt = "1" if s == base else (f"{statistics.median(mean):.3f} (± {ci95(mean)[1]:.3f})" if len(mean) > 1 else med(mean))
        keep[row] = {"cpu": statistics.median(cpu), "us": statistics.median(us), "per_front": statistics.median(per_front),
                   "over": statistics.median(over) if over else 0.0, "idle": idl.get(s)}
        lines.append(f"| {what} (`{s}`) | {med(cpu)} | {med(us, '.0f')} | {med(per_front, '.2f')} | "
                     f"{med(over, '.0f') if over else '-'} | {med(dg, '.1f') if dg else '-'} | {mean_txt} | "
                     f"{f'{idl[s]:.2f}%' if s in idl else '-'} | {len(mine)} |")
    fronts = [r["fronts_cpu"] for r in rs if r["valid"] and not r["errors"] and r["policy"] == base]
    head = ("| per-backend hop | its CPU, cores (median, range) | µs a request | / the 4 fronts' CPU | µs a request over "
            "relaying (paired) | datagrams a request | mean / relaying (± 95% CI) | each at idle, % of a core | runs |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    return head + "\n".join(lines) + f"\n\nThe 4 fronts in use: {med(fronts)} cores (relaying runs).", flagged, keep


def report() -> str:
    values, keeps, flagged = {}, {}, []
    for i, (name, what) in enumerate(SETS.items()):
        t, bad, keep = table(name)
        values[f"table{i}"] = t
        keeps[name] = keep
        flagged += [f"{what}: {b}" for b in bad]
    before, after, envoy = (keeps[n] for n in SETS)

    def change(s: str, k: str, f: str = ".0f") -> str:
        return f"{before[s][k]:{f}} → {after[s][k]:{f}}"
    for arm, field, f in (("tier", "over", ".0f"), ("plain", "over", ".0f"), ("none", "over", ".0f"), ("tier", "per_front", ".2f")):
        values[f"{arm}_{field}"] = change(arm, field, f)
    values["idle_tier"] = change("plain", "idle", ".2f")  # the tier's idle cost is read on the plain front's run
    # the rest from one set each, named after the arm and the field
    for arm in ("relay", "sc", "esc"):
        values[f"{arm}_per_front"] = f"{after[arm]['per_front']:.2f}"
    for arm in ("relay", "sc", "esc", "plain"):
        values[f"{arm}_us"] = f"{after[arm]['us']:.0f}"
    for arm in ("relay", "sc"):
        values[f"idle_{arm}"] = f"{after[arm]['idle']:.2f}"
    for arm in ("relay", "plain", "tier", "esc"):
        values[f"envoy_{arm}_per_front"] = f"{envoy[arm]['per_front']:.2f}"
    values["envoy_plain_over"] = f"{envoy['plain']['over']:.0f}"
    for a, b, f in (("relay", "sc", ".1f"), ("relay", "esc", ".2f"), ("plain", "esc", ".2f")):
        values[f"{a}_vs_{b}"] = f"{after[a]['us'] / after[b]['us']:{f}}"
    values["flagged"] = ("Runs flagged (client errors or invalid) and left out: " + "; ".join(flagged) + ".") if flagged else \
        "No run had a client error or was flagged invalid."
    return render("tier-cost", values)


def main() -> int:
    REPORT.write_text(report())
    print(f"wrote {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
