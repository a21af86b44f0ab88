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
# set name -> its fronts, in the page's order (make bench-tier-cost writes both)
SETS = {"haproxy-4-fronts": "4 HAProxy fronts", "envoy-4-fronts": "4 Envoy fronts"}
# What a peer's forward costs the peer beyond a plain request's hop: the head,
# `100 Continue` and the go byte (docs/agent.md § Cost, "One hop, taken apart").
HANDSHAKE_US = 13
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


def idle(name: str) -> dict[str, tuple[float, float]]:
    """strategy -> each agent's CPU at idle, % of a core: (the median agent, the busiest)."""
    return {r["idle"]: (100 * statistics.median(r["per_agent"]), 100 * max(r["per_agent"])) for r in rows(name) if "idle" in r}


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
                     f"{f'{idl[s][0]:.2f}% ({idl[s][1]:.2f}%)' if s in idl else '-'} | {len(mine)} |")
    fronts = [r["fronts_cpu"] for r in rs if r["valid"] and not r["errors"] and r["policy"] == base]
    head = ("| per-backend hop | its CPU, cores (median, range) | µs a request | / the 4 fronts' CPU | µs a request over "
            "relaying (paired) | datagrams a request | mean / relaying (± 95% CI) | each at idle, % of a core (the busiest) | runs |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    return head + "\n".join(lines) + f"\n\nThe 4 fronts in use: {med(fronts)} cores (relaying runs).", flagged, keep


def shares(name: str, row: str) -> list[float]:
    """The forwarded share of offers (1 - acceptance) in each valid run of a tier row."""
    rs = runs(name)
    s = NAMES[rs[0]["proxy"]][row]
    return [1 - r["acceptance"] for r in rs if r["policy"] == s and r["valid"] and not r["errors"] and r.get("acceptance") is not None]


def datagrams(name: str, row: str) -> float:
    rs = runs(name)
    s = NAMES[rs[0]["proxy"]][row]
    return statistics.median(r["datagrams"] / r["achieved_rate"] for r in rs if r["policy"] == s and r["valid"] and not r["errors"])


def report() -> str:
    values, keeps, flagged = {}, {}, []
    for i, (name, what) in enumerate(SETS.items()):
        t, bad, keep = table(name)
        values[f"table{i}"] = t
        keeps[name] = keep
        flagged += [f"{what}: {b}" for b in bad]
    h, envoy = (keeps[n] for n in SETS)
    hname = next(iter(SETS))
    for k in ("tier", "plain", "none"):
        values[f"{k}_over"] = f"{h[k]['over']:.0f}"
    for k in ("relay", "sc", "esc"):
        values[f"{k}_per_front"] = f"{h[k]['per_front']:.2f}"
        values[f"{k}_us"] = f"{h[k]['us']:.0f}"
    values["plain_us"] = f"{h['plain']['us']:.0f}"
    values["relay_vs_sc"] = f"{h['relay']['us'] / h['sc']['us']:.1f}"
    values["relay_vs_esc"] = f"{h['relay']['us'] / h['esc']['us']:.2f}"
    values["plain_vs_esc"] = f"{h['plain']['us'] / h['esc']['us']:.2f}"
    for k in ("plain", "relay", "sc"):
        values[f"idle_{k}"] = f"{h[k]['idle'][0]:.2f}"
    # the busiest agent at idle under any tier row, either proxy's fronts: the 0.2% bar is per agent
    values["idle_tier_max"] = f"{max(x[k]['idle'][1] for x in (h, envoy) for k in ('none', 'tier', 'plain')):.2f}"
    for k in ("relay", "plain", "tier", "esc"):
        values[f"envoy_{k}_per_front"] = f"{envoy[k]['per_front']:.2f}"
    values["envoy_plain_over"] = f"{envoy['plain']['over']:.0f}"
    # The floor: what the tier's own cost would be were every hop a plain
    # HAProxy's and every datagram free, from this set's own measurements.
    share = statistics.median(shares(hname, "plain"))
    dg = datagrams(hname, "plain")
    per_dg = h["none"]["over"] / dg
    per_fwd = (h["plain"]["over"] - h["none"]["over"]) / share
    floor = share * (h["sc"]["us"] + HANDSHAKE_US)
    fronts_us = h["plain"]["us"] / h["plain"]["per_front"]
    # The kernel's own cost of a datagram, both ends, batched and warm (huntlb-udpfloor): no tier's
    # datagram costs less, so the tier's datagrams cost at least this many times as many.
    kernel = statistics.median(json.loads(x)["both_us"] for x in (DATA / "udp-floor.jsonl").read_text().splitlines() if x.strip())
    dg_floor = dg * kernel
    tier_floor = floor + dg_floor
    values.update(share=f"{100 * share:.0f}", dg=f"{dg:.1f}", per_dg=f"{per_dg:.1f}", per_fwd=f"{per_fwd:.0f}",
                  handshake=f"{HANDSHAKE_US}", floor=f"{floor:.0f}", fronts_us=f"{fronts_us:.0f}",
                  floor_all=f"{h['sc']['us'] + floor:.0f}", floor_all_per_front=f"{(h['sc']['us'] + floor) / fronts_us:.2f}",
                  kernel_us=f"{kernel:.2f}", dg_floor=f"{dg_floor:.0f}", tier_floor=f"{tier_floor:.0f}",
                  whole_floor=f"{h['sc']['us'] + tier_floor:.0f}", whole_floor_per_front=f"{(h['sc']['us'] + tier_floor) / fronts_us:.2f}",
                  tier_now=f"{h['plain']['over']:.0f}", tier_fronts_now=f"{h['tier']['over']:.0f}")
    values["flagged"] = ("Runs flagged (client errors or invalid) and left out: " + "; ".join(flagged) + ".") if flagged else \
        "No run had a client error or was flagged invalid."
    return render("tier-cost", values)


def main() -> int:
    REPORT.write_text(report())
    print(f"wrote {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
