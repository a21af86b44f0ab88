#!/usr/bin/env python3
"""Many fronts at a bounded cost, by simulation (docs/results/many-fronts-sim.md).

huntlb-sim at rho 0.88 over 12 backends (1, 4, 16, 64 fronts) and 96 backends
(1, 16, 64, 256 fronts), exponential and lognormal (sigma 1.5) demand of the
same mean: JSQ (the limit), each front's own least-request and P2C, a Prequal
model (probes, a pool and the hot-cold rule), hunting as shipped (no tier), and
the agents' forwarding tier with counts to every peer or to a bounded sample of
K peers re-drawn every R ms keeping the B lowest. Counts reach an agent 0.2 ms
after the change (one datagram), a forward or a final reaches its server 0.2 ms
after the decision (one hop). Every mode's messages per request (refusals,
forwards, datagrams between agents, probes) are counted.

Usage: python3 bench/many_fronts_sim.py [--seeds 3] [--requests 200000] [--quick]
       python3 bench/many_fronts_sim.py --only "tier, K=4, B=2, biased" ...  (re-run these modes into the data)
       python3 bench/many_fronts_sim.py --frontier "tier, K=8, B=4, delta=2" ... [--requests 100000]
           (run these modes of SHARE over the frontier's grid, FRONTIER, into the data)
       python3 bench/many_fronts_sim.py --report-only
(after `cargo build --release -p huntlb-instruments`; one simulator process at a
time: wrap it in `flock /tmp/huntlb-heavy.lock nice -n 10`). Writes
docs/results/many-fronts-sim.md and .png, the runs to bench/data/many-fronts-sim.json.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

from benchlib import data as rundata
from benchlib.plots import pyplot, save
from benchlib.reports import RESULTS, ROOT, data_path, machine
from benchlib.stats import median
from benchlib.tools import huntlb_sim

SIM = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "huntlb-sim"
NAME = "many-fronts-sim"
DATA = data_path(NAME)

RHO, MEAN_MS, WORKERS, CORES, BACKLOG = 0.88, 20, 32, 2, 128
FRONTS = {12: [1, 4, 16, 64], 96: [1, 16, 64, 256]}
DEMANDS = {"exp": "exponential", "lognormal:1.5": "lognormal, sigma 1.5"}
DELAY_MS, HOP_MS, RESAMPLE_MS = 0.2, 0.2, 100
NET = ["--fleet-delay-ms", str(DELAY_MS), "--hop-ms", str(HOP_MS)]
TIER = ["--dispatch", "forward-least", *NET]  # the agent's forwarding knobs, at its defaults

# name -> huntlb-sim arguments. Hunting as shipped: the front's own least with
# hunt-seen, the agent's default policy `dynamic:seen_margin=1`, no tier.
MODES = {
    "JSQ": ["--dispatch", "jsq"],
    "least-request": ["--dispatch", "least"],
    "P2C": ["--dispatch", "p2c"],
    "Prequal, q 0.84": ["--dispatch", "prequal:pool=16,probes=3,q=0.84", "--hop-ms", str(HOP_MS)],
    "Prequal, q 0": ["--dispatch", "prequal:pool=16,probes=3,q=0", "--hop-ms", str(HOP_MS)],
    "hunting (shipped, no tier)": ["--dispatch", "hunt-least:dynamic:seen_margin=1", "--hop-ms", str(HOP_MS)],
    "tier, every peer": [*TIER, "--fleet-sample", "0"],
}
BOUNDED = {}
for k in (2, 4, 8):
    for b in (0, k // 2):
        BOUNDED[f"tier, K={k}, B={b}"] = [*TIER, "--fleet-sample", str(k), "--fleet-sample-keep", str(b), "--fleet-resample-ms", str(RESAMPLE_MS)]
MODES.update(BOUNDED)
BASELINES = ("least-request", "Prequal, q 0.84", "Prequal, q 0")
# The design question's bar.
MEAN_BAR, P99_BAR, MSG_BAR, GROWTH_BAR = 1.10, 1.15, 24, 1.10


def capped(args: list[str], backends: int) -> list[str]:
    """`args` with a sample or a pull of more peers than the fleet has cut to every other backend."""
    out = list(args)
    for flag in ("--fleet-sample", "--fleet-probe"):
        if flag in out:
            i = out.index(flag) + 1
            out[i] = str(min(int(out[i]), backends - 1))
    return out


def sim(args: list[str], backends: int, fronts: int, demand: str, seed: int, requests: int, rho: float = RHO) -> dict:
    args = capped(args, backends)
    fleet = ["--servers", str(backends), "--workers", str(WORKERS), "--cores", str(CORES), "--backlog", str(BACKLOG)]
    run = [*fleet, *args, "--mean-ms", str(MEAN_MS), "--rho", str(rho), "--proxies", str(fronts), "--demand", demand,
           "--requests", str(requests), "--seed", str(seed)]
    return huntlb_sim(str(SIM), run, timeout=1800)[0]


def record(name: str, args: list[str], backends: int, fronts: int, demand: str, seed: int, r: dict) -> dict:
    m, d = r["messages"], r["messages"]["datagrams"]
    return {"mode": name, "backends": backends, "fronts": fronts, "demand": demand, "seed": seed, "args": " ".join(capped(args, backends)),
            "mean_ms": round(r["mean_ms"], 4), "p50_ms": round(r["p50_ms"], 4), "p99_ms": round(r["p99_ms"], 4),
            "rejected": r["rejected"], "acceptance": r["acceptance"],
            "msg": {"per_request": round(m["per_request"], 4), "refusals": m["refusals"], "forwards": m["forwards"], "probes": m["probes"],
                    **{k: d.get(k, 0) for k in ("counts", "subscribes", "renewals", "unsubscribes", "heartbeats", "asks")},
                    **{k: d[k] for k in ("tokens", "piggybacked", "steals") if d.get(k)}}}


def grid(modes: dict, seeds: list[int], requests: int, t0: float) -> list[dict]:
    runs = []
    for name, args in modes.items():
        for backends, fronts_list in FRONTS.items():
            for fronts in fronts_list:
                for demand in DEMANDS:
                    runs += [record(name, args, backends, fronts, demand, s, sim(args, backends, fronts, demand, s, requests)) for s in seeds]
        print(f"{name} done ({time.monotonic() - t0:.0f} s)", flush=True)
    return runs


def cells(runs: list[dict]) -> dict:
    """(mode, backends, fronts, demand) -> medians over seeds, and ratios to JSQ's."""
    by: dict = {}
    for r in runs:
        by.setdefault((r["mode"], r["backends"], r["fronts"], r["demand"]), []).append(r)
    out = {}
    for key, rs in by.items():
        out[key] = {"mean": median([r["mean_ms"] for r in rs]), "p99": median([r["p99_ms"] for r in rs]),
                    "msgs": median([r["msg"]["per_request"] for r in rs]), "seeds": len(rs),
                    "rejected": sum(r["rejected"] for r in rs)}
    for (mode, b, f, d), c in out.items():
        j = out.get(("JSQ", b, f, d))
        c["mean_x"], c["p99_x"] = (c["mean"] / j["mean"], c["p99"] / j["p99"]) if j else (None, None)
    return out


def verdict(c: dict, mode: str, demands: list[str]) -> dict:
    """How `mode` does against the bar over every front count, both fleets, these demands."""
    keys = [(mode, b, f, d) for b, fs in FRONTS.items() for f in fs for d in demands if (mode, b, f, d) in c]
    if not keys:
        return {}
    worst_mean = max(keys, key=lambda k: c[k]["mean_x"])
    worst_p99 = max(keys, key=lambda k: c[k]["p99_x"])
    msgs = {b: max(c[k]["msgs"] for k in keys if k[1] == b) for b in FRONTS}
    growth = msgs[96] / msgs[12] if msgs[12] else (1.0 if not msgs[96] else float("inf"))
    beaten = [k for k in keys for base in BASELINES if (base, *k[1:]) in c and c[k]["mean"] > c[(base, *k[1:])]["mean"]]
    return {"mean_x": c[worst_mean]["mean_x"], "mean_at": worst_mean, "p99_x": c[worst_p99]["p99_x"], "p99_at": worst_p99,
            "msgs": msgs, "growth": growth, "beaten": beaten,
            "holds": c[worst_mean]["mean_x"] <= MEAN_BAR and c[worst_p99]["p99_x"] <= P99_BAR and max(msgs.values()) <= MSG_BAR
            and growth <= GROWTH_BAR}


def where(k: tuple) -> str:
    return f"{k[1]} backends, {k[2]} fronts, {DEMANDS[k[3]].split(',')[0]}"


def report(data: dict) -> str:
    c = cells(data["runs"])
    modes = list(dict.fromkeys(r["mode"] for r in data["runs"]))
    out = ["# Many fronts at a bounded cost: simulation\n",
           f"`{data['argv']}` (after `cargo build --release -p huntlb-instruments`; {data['seconds']:.0f} s on {data['machine']}, "
           f"one simulator process at a time). Simulator only: no real proxy, agent or network. Deterministic: the same command "
           f"gives the same numbers.\n",
           f"**Model.** {', '.join(f'{b} backends' for b in FRONTS)} × {WORKERS} workers × {CORES} cores (processor sharing), backlog "
           f"{BACKLOG}, demand of mean {MEAN_MS} ms of one core ({' or '.join(DEMANDS.values())}), Poisson arrivals at ρ {RHO} of the "
           f"nominal capacity, in turn to the fronts. Every cell is the **median of {len(data['seeds'])} seeds** of "
           f"**{data['requests']} requests**. A count reaches an agent {DELAY_MS} ms after it changed (one datagram); a forward "
           f"(agent to agent) or hunting's final reaches its server {HOP_MS} ms after the decision (one hop, the server's "
           f"count rises then); a Prequal probe's answer lands {HOP_MS} ms after it was sent.\n",
           "* **JSQ**: every request to the fewest in flight by the true state, the limit.",
           "* **least-request**, **P2C**: each front's own rule on its own counts (HAProxy `leastconn`, Envoy FULL_SCAN; Envoy's default `LEAST_REQUEST`).",
           "* **Prequal** (Wydrowski et al., NSDI 2024): each front keeps a pool of at most 16 probe answers (server, requests in "
           "flight, latency estimate, age: at most 50 ms, used once, a newer answer from the same server replaces the older); each "
           "query sends 3 probes to random servers; hot-cold rule: hot if the RIF is above the pool's q-quantile, pick the cold "
           "answer with the lowest latency (all hot: the lowest RIF), random when the pool is empty. The latency a server answers "
           "is an EWMA of recent response times of requests that arrived at the RIF it has now. q 0.84 is the paper's; q 0 "
           "(lowest RIF first) is what wins here.",
           "* **hunting (shipped, no tier)**: the front offers to its own least with its count there (`hunt-seen`); the agent "
           "(`dynamic:seen_margin=1`) refuses what other fronts loaded it with; the final goes to the front's next least.",
           "* **tier**: the agents' forwarding tier with the agent's defaults (`forward_peer_margin` 0, `forward_seen_margin` 1: "
           "`huntlb_policy::forward::route_with`). "
           "*every peer*: every change of a count goes to every agent that decides by counts (today). *K, B*: each agent "
           f"subscribes to a sample of K other backends and hears only their changes; every {RESAMPLE_MS} ms (agents staggered) "
           "it keeps the B members it sees lowest and draws the other K-B at random (a new member: a subscribe and its first "
           "count, two datagrams; a dropped one: an unsubscribe; a kept one: a renewal). An agent subscribes only while it "
           "decides offers by counts: with one front, nobody does.\n",
           "**Messages per request** (beyond the request itself): refusals (hunting), forwards and datagrams between agents "
           "(the tier: counts, subscribes, renewals, unsubscribes, heartbeats), probes and their answers (Prequal, 2 a probe).\n"]
    out += design_text(c, modes)
    out += findings_text(c)
    out.append("")
    out += verdict_text(c, modes)
    if data.get("plot"):
        out.append(f"\n![mean over JSQ's and messages per request vs fronts]({data['plot']})\n")
    for b, fronts in FRONTS.items():
        for d, dname in DEMANDS.items():
            out.append(f"\n## {b} backends, {dname}\n")
            out.append("Cells: mean / JSQ's mean · p99 / JSQ's p99 · messages per request. "
                       + "JSQ: " + ", ".join(f"{f} fronts {c[('JSQ', b, f, d)]['mean']:.1f} / {c[('JSQ', b, f, d)]['p99']:.0f} ms"
                                             for f in fronts if ("JSQ", b, f, d) in c) + ".\n")
            out.append("| mode | " + " | ".join(f"{f} fronts" for f in fronts) + " |")
            out.append("|---|" + "---:|" * len(fronts))
            for m in modes:
                row = []
                for f in fronts:
                    x = c.get((m, b, f, d))
                    row.append("" if x is None else f"{x['mean_x']:.2f} · {x['p99_x']:.2f} · {x['msgs']:.1f}"
                               + (f" ({x['rejected']} rejected)" if x["rejected"] else ""))
                out.append(f"| {m} | " + " | ".join(row) + " |")
    out.append(extra_text(data))
    out += frontier_text(data)
    text = "\n".join(out) + "\n"
    keep_shown(data, text)
    return text


# A decimal number (a ratio, a mean, messages per request): what a reader greps for.
DECIMAL = re.compile(r"\d\.\d")


def keep_shown(data: dict, text: str) -> None:
    """The report's lines with a decimal number into data["shown"]: this report
    has no template, every such line is computed, and so a number it shows
    greps to its data too."""
    data["shown"] = {"lines": [line for line in text.splitlines() if DECIMAL.search(line)]}


def write(data: dict, out: Path, plotted: str | None) -> None:
    """The report, then the data with what the report shows (whether a plot was
    drawn is this run's, not the data's)."""
    data["plot"] = plotted
    (out / f"{NAME}.md").write_text(report(data))
    rundata.write(data_path(NAME, out), {k: v for k, v in data.items() if k != "plot"})


def verdict_text(c: dict, modes: list[str]) -> list[str]:
    out = ["## Verdict\n",
           f"The bar set for the shipped tier: mean within {MEAN_BAR:.2f}× JSQ's and p99 within {P99_BAR:.2f}× at every front count on 12 and 96 "
           f"backends, with at most {MSG_BAR} messages per request, not growing with the number of backends (the most on 96 "
           f"backends at most {GROWTH_BAR:.2f}× the most on 12). Worst cell of each tier setting (and of the others, for scale):\n",
           "| mode | demand | worst mean / JSQ | worst p99 / JSQ | messages per request, 12 / 96 backends | growth | above least-request or Prequal | holds |",
           "|---|---|---:|---:|---:|---:|---|:--:|"]
    for m in modes:
        if m == "JSQ":
            continue
        for dl, ds in (("both", list(DEMANDS)), *((DEMANDS[d].split(",")[0], [d]) for d in DEMANDS)):
            v = verdict(c, m, ds)
            if not v:
                continue
            beaten = f"{len(v['beaten'])} cells" if v["beaten"] else "never"
            out.append(f"| {m} | {dl} | {v['mean_x']:.3f} ({where(v['mean_at'])}) | {v['p99_x']:.3f} ({where(v['p99_at'])}) | "
                       f"{v['msgs'][12]:.1f} / {v['msgs'][96]:.1f} | {v['growth']:.2f} | {beaten} | {'**yes**' if v['holds'] else 'no'} |")
    return out


def design_text(c: dict, modes: list[str]) -> list[str]:
    """The design question's answer, from the cells: which bounded setting
    meets the bar over both demands, or by how much each misses it."""
    bounded = [m for m in modes if m.startswith(("tier, K=", "pull, D="))]
    vs = {m: verdict(c, m, list(DEMANDS)) for m in bounded}
    vs = {m: v for m, v in vs.items() if v}
    if not vs:
        return []
    out = ["\n## The design question\n"]
    holds = [m for m, v in vs.items() if v["holds"]]
    cheap = [m for m, v in vs.items() if max(v["msgs"].values()) <= MSG_BAR and v["growth"] <= GROWTH_BAR]
    best = min(cheap or vs, key=lambda m: (vs[m]["mean_x"], vs[m]["p99_x"]))
    if holds:
        pick = min(holds, key=lambda m: max(vs[m]["msgs"].values()))
        out.append(f"**{pick}** meets the bar on both fleets and both demands: worst mean {vs[pick]['mean_x']:.3f}× JSQ's "
                   f"({where(vs[pick]['mean_at'])}), worst p99 {vs[pick]['p99_x']:.3f}× ({where(vs[pick]['p99_at'])}), at most "
                   f"{max(vs[pick]['msgs'].values()):.1f} messages per request ({vs[pick]['msgs'][12]:.1f} on 12 backends, "
                   f"{vs[pick]['msgs'][96]:.1f} on 96). Also holding: {', '.join(m for m in holds if m != pick) or 'none'}.\n")
    else:
        budget = "within the message budget" if cheap else "(none is within the message budget)"
        out.append(f"**No bounded setting meets the bar at every cell.** Closest {budget}: **{best}**, "
                   f"worst mean {vs[best]['mean_x']:.3f}× JSQ's ({where(vs[best]['mean_at'])}), worst p99 {vs[best]['p99_x']:.3f}× "
                   f"({where(vs[best]['p99_at'])}), {max(vs[best]['msgs'].values()):.1f} messages per request at most.\n")
    out.append("By how much each misses (mean over the 1.10× bar, p99 over the 1.15× bar, messages over 24 or growing; "
               "both demands; a dash: met):\n")
    out.append("| setting | mean: worst, cells above 1.10× | p99: worst, cells above 1.15× | messages, most (12 / 96 backends) | growth |")
    out.append("|---|---|---|---|---:|")
    for m, v in vs.items():
        keys = [(m, b, f, d) for b, fs in FRONTS.items() for f in fs for d in DEMANDS if (m, b, f, d) in c]
        over_mean = sum(c[k]["mean_x"] > MEAN_BAR for k in keys)
        over_p99 = sum(c[k]["p99_x"] > P99_BAR for k in keys)
        msgs = max(v["msgs"].values())
        out.append(f"| {m} | " + (f"{v['mean_x']:.3f} (+{(v['mean_x'] / MEAN_BAR - 1) * 100:.1f}%), {over_mean} of {len(keys)}" if over_mean else "-")
                   + " | " + (f"{v['p99_x']:.3f} (+{(v['p99_x'] / P99_BAR - 1) * 100:.1f}%), {over_p99} of {len(keys)}" if over_p99 else "-")
                   + f" | {v['msgs'][12]:.1f} / {v['msgs'][96]:.1f}" + (" **over**" if msgs > MSG_BAR else "")
                   + f" | {v['growth']:.2f}" + (" **grows**" if v["growth"] > GROWTH_BAR else "") + " |")
    return out


def worst(c: dict, mode: str, backends: int) -> tuple[float, float]:
    """(worst mean / JSQ, most messages per request) of `mode` on `backends`, both demands, every front count but 1."""
    ks = [(mode, backends, f, d) for f in FRONTS[backends][1:] for d in DEMANDS if (mode, backends, f, d) in c]
    return (max(c[k]["mean_x"] for k in ks), max(c[k]["msgs"] for k in ks)) if ks else (float("nan"), float("nan"))


def findings_text(c: dict) -> list[str]:
    w = lambda m, b: worst(c, m, b)  # noqa: E731
    out = ["\n## What the numbers say\n"]
    every12, every96 = w("tier, every peer", 12), w("tier, every peer", 96)
    k8_12, k8_96 = w("tier, K=8, B=4", 12), w("tier, K=8, B=4", 96)
    out.append(f"* **Every peer** (today's tier) is JSQ on 12 backends (at most {every12[0]:.2f}× past one front, {every12[1]:.0f} "
               f"messages per request) but not on 96 ({every96[0]:.2f}×, {every96[1]:.0f} messages): with counts {DELAY_MS} ms late "
               f"and forwards {HOP_MS} ms on the way, every agent sees the same least and the forwards of many agents land on it "
               f"together. One seed on 96 backends and 64 fronts (`huntlb-sim --servers 96 --proxies 64 --mean-ms 20 --rho 0.88 "
               f"--requests 200000 --dispatch forward-least --fleet-sample 0`, JSQ 20.25 ms): 20.17 ms with no latency, 21.35 with the "
               f"datagram's 0.2 ms alone, 21.43 with the hop's alone, 23.27 with both; a sample of 8 (B 4) is 21.65 ms with no "
               f"latency and 22.58 with both: a sample herds less than the whole fleet.")
    out.append(f"* **A pushed sample** costs what its K says, whatever the fleet: K=8, B=4 sends at most {k8_12[1]:.1f} messages per "
               f"request on 12 backends and {k8_96[1]:.1f} on 96, and is within {k8_12[0]:.2f}× JSQ on 12 backends but "
               f"{k8_96[0]:.2f}× on 96. Halving K doubles the miss (K=4: {w('tier, K=4, B=2', 96)[0]:.2f}× on 96 backends); keeping "
               f"the lowest half (B = K/2) gains 0-2%. Re-drawing every 20 ms instead of 100 gains about 1% for 5-8 more messages.")
    if ("tier, K=10, B=5", 96, 64, "exp") in c:
        k10 = (w("tier, K=10, B=5", 12), w("tier, K=10, B=5", 96))
        out.append(f"* **K=10, B=5**: {k10[0][0]:.3f}× / {k10[1][0]:.3f}× JSQ at worst (12 / 96 backends), {k10[0][1]:.1f} / {k10[1][1]:.1f} "
                   f"messages per request.")
    pulls = [m for m in ("pull, D=4", "pull, D=8", "pull, D=10", "pull, D=12") if ("tier", 0) and (m, 96, 64, "exp") in c]
    if pulls:
        out.append("* **Pulling counts on demand** (an agent about to decide by counts asks D random peers and decides when they "
                   f"answer, {2 * DELAY_MS:.1f} ms later; the request waits): nothing is sent while the front's count decides, so it "
                   "costs 2D datagrams per offer decided by counts, never more, and the counts are fresh (no herding on an old "
                   "least; a D or K above the other backends asks or samples all of them: 11 on 12 backends). " + "; ".join(f"{m.split(', ')[1]}: {w(m, 12)[0]:.3f}× / {w(m, 96)[0]:.3f}× JSQ at worst (12 / 96 "
                                          f"backends), {max(w(m, 12)[1], w(m, 96)[1]):.1f} messages" for m in pulls) + ".")
    pq = lambda b, f: c[("Prequal, q 0", b, f, "exp")]["mean_x"]  # noqa: E731
    hu = lambda b, f: c[("hunting (shipped, no tier)", b, f, "exp")]["mean_x"]  # noqa: E731
    out.append(f"* **Without messages between agents** nothing gets near: hunting as shipped is {w('hunting (shipped, no tier)', 96)[0]:.2f}× "
               f"JSQ at worst on 96 backends for 0.4 messages a request. Prequal's probes (6 messages a request; q 0, the better "
               f"here) beat it on 96 backends at 16 and 64 fronts ({pq(96, 16):.2f}× and {pq(96, 64):.2f}× against "
               f"{hu(96, 16):.2f}× and {hu(96, 64):.2f}×, exponential) but not at 256 ({pq(96, 256):.2f}× against {hu(96, 256):.2f}×) "
               f"nor on 12 backends: with many fronts each pool holds few fresh answers. With the paper's q 0.84 the latency "
               f"estimate decides, and on identical servers it only echoes load, late: {w('Prequal, q 0.84', 96)[0]:.2f}× at worst. "
               f"With one front every mode that starts from the front's own least is least-request, which is JSQ there.")
    out.append("* **Heavy tails** (lognormal, sigma 1.5) change no conclusion about the tier: its worst ratios are the same or "
               "lower than with exponential jobs (every peer on 96 backends: "
               f"{max(c[('tier, every peer', 96, f, 'lognormal:1.5')]['mean_x'] for f in FRONTS[96][1:]):.2f}× against "
               f"{max(c[('tier, every peer', 96, f, 'exp')]['mean_x'] for f in FRONTS[96][1:]):.2f}×).")
    return out


def extra_text(data: dict) -> str:
    return data.get("notes", "")


def plot(data: dict) -> str | None:
    plt = pyplot()
    if plt is None:
        return None
    c = cells(data["runs"])
    shown = [m for m in ("least-request", "P2C", "Prequal, q 0.84", "Prequal, q 0", "hunting (shipped, no tier)", "tier, every peer",
                         "tier, K=4, B=2", "tier, K=8, B=4") if any(k[0] == m for k in c)]
    shown += [m for m in ("tier, K=8, B=4, R=20 ms", "pull, D=8") if any(k[0] == m for k in c)]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for col, b in enumerate(FRONTS):
        for m in shown:
            xs = [f for f in FRONTS[b] if (m, b, f, "exp") in c]
            axes[0][col].plot(xs, [c[(m, b, f, "exp")]["mean_x"] for f in xs], marker="o", label=m)
            axes[1][col].plot(xs, [max(c[(m, b, f, "exp")]["msgs"], 0.01) for f in xs], marker="o", label=m)
        axes[0][col].axhline(MEAN_BAR, color="black", linestyle="--", linewidth=0.8)
        axes[1][col].axhline(MSG_BAR, color="black", linestyle="--", linewidth=0.8)
        for row, (yl, ys) in enumerate((("mean / JSQ's mean", "linear"), ("messages per request (none: drawn at 0.01)", "log"))):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            ax.set_yscale(ys)
            ax.set_xticks(FRONTS[b])
            ax.set_xticklabels([str(f) for f in FRONTS[b]])
            ax.set_title(f"{b} backends, exponential, ρ {RHO}")
            ax.set_xlabel("fronts")
            ax.set_ylabel(yl)
            ax.grid(True, alpha=0.3)
    axes[0][0].set_ylim(0.95, 3.2)
    axes[0][1].set_ylim(0.95, 4.0)
    axes[0][1].legend(fontsize=7)
    save(fig, RESULTS, f"{NAME}.png")
    return f"{NAME}.png"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds per cell (medians are reported)")
    ap.add_argument("--requests", type=int, default=200_000, help="requests per run")
    ap.add_argument("--quick", action="store_true", help="1 seed of 20000 requests, to bench/out/many-fronts-sim/")
    ap.add_argument("--only", nargs="+", metavar="MODE", help="re-run these modes (names of MODES or EXTRA) into the data")
    ap.add_argument("--report-only", action="store_true", help=f"rewrite the report from {DATA.relative_to(ROOT)}")
    ap.add_argument("--frontier", nargs="+", metavar="MODE", help="run these modes of SHARE (or `all`) over FRONTIER's grid into the data")
    a = ap.parse_args()
    if a.quick:
        a.seeds, a.requests = 1, 20_000
    if not a.report_only and not SIM.exists():
        raise SystemExit(f"{SIM} not built: run `cargo build --release -p huntlb-instruments` first")
    t0 = time.monotonic()
    if a.report_only:
        data = rundata.read(DATA)
    elif a.frontier:
        data = rundata.read(DATA)
        names = list(SHARE) if a.frontier == ["all"] else a.frontier
        unknown = [m for m in names if m not in SHARE]
        if unknown:
            raise SystemExit(f"--frontier: unknown modes {unknown} (known: {list(SHARE)})")
        f = data.setdefault("frontier", {"seeds": list(range(1, a.seeds + 1)), "requests": a.requests, "seconds": 0.0, "runs": []})
        f["runs"] = [r for r in f["runs"] if r["mode"] not in names] + frontier_grid(names, f["seeds"], f["requests"], t0)
        f["seconds"] += time.monotonic() - t0
        rundata.write(DATA, data)  # the runs first: the report is rendered from them below
    elif a.only:
        data = rundata.read(DATA)
        every = {**MODES, **EXTRA}
        unknown = [m for m in a.only if m not in every]
        if unknown:
            raise SystemExit(f"--only: unknown modes {unknown} (known: {list(every)})")
        data["runs"] = [r for r in data["runs"] if r["mode"] not in a.only] + grid({m: every[m] for m in a.only}, data["seeds"], data["requests"], t0)
        data["seconds"] += time.monotonic() - t0
    else:
        seeds = list(range(1, a.seeds + 1))
        data = {"machine": machine(), "seeds": seeds, "requests": a.requests,
                "argv": f"python3 bench/many_fronts_sim.py --seeds {a.seeds} --requests {a.requests}",
                "runs": grid({**MODES, **EXTRA}, seeds, a.requests, t0)}
        data["seconds"] = time.monotonic() - t0
    data.pop("plot", None)
    if a.quick:
        out = ROOT / "bench" / "out" / NAME
        out.mkdir(parents=True, exist_ok=True)
        write(data, out, None)
        print(f"wrote {out}/{NAME}.md", flush=True)
        return
    frontier_plot(data)
    write(data, RESULTS, plot(data))
    print(f"wrote docs/results/{NAME}.md, {DATA.relative_to(ROOT)} ({time.monotonic() - t0:.0f} s)", flush=True)


# Ideas beyond the grid: a larger sample (K 10), re-drawing 5 times as often (R 20 ms), and pulling
# counts on demand (an agent about to decide asks D random peers, and decides on
# their answers a round trip later) instead of pushing them.
EXTRA: dict[str, list[str]] = {
    "tier, K=8, B=4, R=20 ms": [*TIER, "--fleet-sample", "8", "--fleet-sample-keep", "4", "--fleet-resample-ms", "20"],
    "tier, K=6, B=3, R=20 ms": [*TIER, "--fleet-sample", "6", "--fleet-sample-keep", "3", "--fleet-resample-ms", "20"],
    "tier, K=10, B=5": [*TIER, "--fleet-sample", "10", "--fleet-sample-keep", "5", "--fleet-resample-ms", str(RESAMPLE_MS)],
    "pull, D=4": [*TIER, "--fleet-probe", "4"],
    "pull, D=8": [*TIER, "--fleet-probe", "8"],
    "pull, D=10": [*TIER, "--fleet-probe", "10"],
    "pull, D=12": [*TIER, "--fleet-probe", "12"],
}


# The frontier: the tier at the ideal with a fraction of the messages. Its own grid
# (every front count on both fleets, two loads, a third, heavier tail) and its
# own bar; the modes are `--fleet-share` over the pushed sample, or tokens.
FRONTIER = {"fronts": {12: [1, 4, 16, 64, 256], 96: [1, 4, 16, 64, 256]}, "rhos": [0.88, 0.95],
            "demands": {"exp": "exponential", "lognormal:1.5": "lognormal, sigma 1.5", "lognormal:2": "lognormal, sigma 2"}}
F_MEAN, F_P99, F_MSG, F_BEST, F_GROWTH = 1.05, 1.10, 12, 6, 1.10


def sampled(k: int, b: int, share: str = "") -> list[str]:
    return [*TIER, "--fleet-sample", str(k), "--fleet-sample-keep", str(b), "--fleet-resample-ms", str(RESAMPLE_MS),
            *(["--fleet-share", share] if share else [])]


# name -> (family, huntlb-sim arguments). The family names the idea (the plot's colour).
SHARE: dict[str, tuple[str, list[str]]] = {
    "JSQ": ("ideal", ["--dispatch", "jsq"]),
    "K=8, B=4 (shipped)": ("pushed sample", sampled(8, 4)),
    "K=10, B=5": ("pushed sample", sampled(10, 5)),
    "pull, D=4": ("pull", [*TIER, "--fleet-probe", "4"]),
    "pull, D=8": ("pull", [*TIER, "--fleet-probe", "8"]),
    "K=8, B=4, level=1": ("level", sampled(8, 4, "level=1")),
    "K=8, B=4, level=3": ("level", sampled(8, 4, "level=3")),
    "K=8, B=4, delta=2": ("delta", sampled(8, 4, "delta=2")),
    "K=16, B=8, delta=2": ("delta", sampled(16, 8, "delta=2")),
    "K=16, B=8, delta=3": ("delta", sampled(16, 8, "delta=3")),
    "K=8, B=4, batch=5 ms": ("batch", sampled(8, 4, "batch=5")),
    "K=8, B=4, batch=10 ms": ("batch", sampled(8, 4, "batch=10")),
    "K=8, B=4, piggy": ("piggyback", sampled(8, 4, "piggy")),
    "K=8, B=4, level=2, piggy": ("piggyback", sampled(8, 4, "level=2,piggy")),
    "K=8, B=4, delta=2, piggy": ("piggyback", sampled(8, 4, "delta=2,piggy")),
    "tokens, L=4": ("tokens", [*TIER, "--fleet-share", "tokens=4"]),
    "tokens, L=8": ("tokens", [*TIER, "--fleet-share", "tokens=8"]),
    "tokens, L=8, piggy": ("tokens", [*TIER, "--fleet-share", "tokens=8,piggy"]),
    # After the diagnosis at ρ 0.95 on 96 backends (herding on the few free cores within a
    # datagram's and a hop's delay, and the sample's size): against herding, a view larger
    # than the messages, and decisions made where the free core is.
    "K=8, B=4, spread=2": ("spread", sampled(8, 4, "spread=2")),
    "K=16, B=8, level=1, full": ("level, full", sampled(16, 8, "level=1,full")),
    "pull, D=4, memory=4": ("pull with memory", [*TIER, "--fleet-probe", "4", "--fleet-share", "memory=4"]),
    "steal, C=2, T=3": ("steal", [*TIER, "--fleet-sample", "0", "--fleet-share", "steal=2,tries=3"]),
    "steal, C=2, T=6": ("steal", [*TIER, "--fleet-sample", "0", "--fleet-share", "steal=2,tries=6"]),
    "steal, C=2, T=12": ("steal", [*TIER, "--fleet-sample", "0", "--fleet-share", "steal=2,tries=12"]),
}


def frontier_grid(names: list[str], seeds: list[int], requests: int, t0: float) -> list[dict]:
    runs = []
    for name in names:
        args = SHARE[name][1]
        for backends, fronts_list in FRONTIER["fronts"].items():
            for fronts in fronts_list:
                for rho in FRONTIER["rhos"]:
                    for demand in FRONTIER["demands"]:
                        for s in seeds:
                            r = record(name, args, backends, fronts, demand, s, sim(args, backends, fronts, demand, s, requests, rho))
                            runs.append({**r, "rho": rho})
        print(f"{name} done ({time.monotonic() - t0:.0f} s)", flush=True)
    return runs


def frontier_cells(runs: list[dict]) -> dict:
    """(mode, backends, fronts, rho, demand) -> medians over seeds, ratios to JSQ's on the same seeds' cell."""
    by: dict = {}
    for r in runs:
        by.setdefault((r["mode"], r["backends"], r["fronts"], r["rho"], r["demand"]), []).append(r)
    out = {k: {"mean": median([r["mean_ms"] for r in rs]), "p99": median([r["p99_ms"] for r in rs]),
               "msgs": median([r["msg"]["per_request"] for r in rs]), "rejected": sum(r["rejected"] for r in rs)} for k, rs in by.items()}
    for (mode, *cell), c in out.items():
        j = out.get(("JSQ", *cell))
        c["mean_x"], c["p99_x"] = (c["mean"] / j["mean"], c["p99"] / j["p99"]) if j else (None, None)
    return out


# The bar's demands; a third, heavier tail is shown beside them.
F_REQUIRED = ("exp", "lognormal:1.5")


def frontier_verdict(c: dict, mode: str, demands: tuple = F_REQUIRED) -> dict:
    keys = [k for k in c if k[0] == mode and c[k]["mean_x"] is not None and k[4] in demands]
    if not keys:
        return {}
    wm = max(keys, key=lambda k: c[k]["mean_x"])
    wp = max(keys, key=lambda k: c[k]["p99_x"])
    msgs = {b: max(c[k]["msgs"] for k in keys if k[1] == b) for b in FRONTIER["fronts"]}
    growth = msgs[96] / msgs[12] if msgs[12] else 1.0
    most = max(msgs.values())
    part = {(b, rho): max(c[k]["mean_x"] for k in keys if k[1] == b and k[3] == rho) for b in FRONTIER["fronts"] for rho in FRONTIER["rhos"]}
    over = sum(c[k]["mean_x"] > F_MEAN or c[k]["p99_x"] > F_P99 for k in keys)
    return {"mean_x": c[wm]["mean_x"], "mean_at": wm, "p99_x": c[wp]["p99_x"], "p99_at": wp, "msgs": msgs, "most": most,
            "growth": growth, "part": part, "over": over, "cells": len(keys),
            "holds": c[wm]["mean_x"] <= F_MEAN and c[wp]["p99_x"] <= F_P99 and most <= F_MSG and growth <= F_GROWTH}


def f_where(k: tuple) -> str:
    return f"{k[1]} backends, {k[2]} fronts, ρ {k[3]}, {FRONTIER['demands'][k[4]]}"


def frontier_text(data: dict) -> list[str]:
    f = data.get("frontier")
    if not f:
        return []
    c = frontier_cells(f["runs"])
    modes = [m for m in SHARE if m != "JSQ" and any(k[0] == m for k in c)]
    vs = {m: frontier_verdict(c, m) for m in modes}
    heavier = {m: frontier_verdict(c, m, tuple(FRONTIER["demands"])) for m in modes}
    fam = lambda m: SHARE[m][0]  # noqa: E731
    out = ["\n## The frontier: the tier's counts at a fraction of the messages\n",
           f"`python3 bench/many_fronts_sim.py --frontier all --seeds {len(f['seeds'])} --requests {f['requests']}` (run in chunks of "
           f"modes, {f['seconds']:.0f} s of runs in all). The grid: 12 and 96 backends, each at "
           f"{', '.join(str(x) for x in FRONTIER['fronts'][12])} fronts, ρ {' and '.join(str(r) for r in FRONTIER['rhos'])}, "
           f"{', '.join(FRONTIER['demands'].values())} jobs; the model above otherwise (counts and forwards 0.2 ms on the way). "
           f"Every cell is the median of {len(f['seeds'])} seeds of {f['requests']} requests, and its ratio is to JSQ's median on "
           f"the same seeds and cell. **The bar**, over the grid's first two demands (exponential, lognormal sigma 1.5; sigma 2 is shown "
           f"beside them, and is noisy at this length: a few jobs of seconds decide a cell's mean): mean within {F_MEAN:.2f}× "
           f"JSQ's and p99 within {F_P99:.2f}× at every cell, "
           f"at most {F_MSG} messages per request, the most on 96 backends at most {F_GROWTH:.2f}× the most on 12; and the best "
           f"at most {F_BEST}.\n",
           "Modes (`huntlb-sim --fleet-share`, each off by default): over the pushed sample of K (B kept), *level=H* sends a "
           "change only when it moves the count across 0..=H+1 (a count above H+1 goes out only in heartbeats, every 50 ms); "
           "*delta=D* only a change of D or more from the count last sent; *batch=T* at most one count every T ms (the last "
           "change of the interval); *piggy*: the forward's answer (`100 Continue`) carries the peer's count to the forwarder "
           "(no datagram). *pull, D*: an agent about to decide by counts asks D random peers (above). *tokens, L* (JIQ with a "
           "threshold): no sample and no heartbeat; a server below L in flight keeps L - count tokens out, each a datagram to "
           "one agent drawn among those deciding by counts; an agent forwards only on a token of a count below its own "
           "(the policy crate's rule over its tokens), using it up; a token lapses after 20 ms; *piggy* sends a token owed "
           "right after a forward on that forward's answer. After the diagnosis below: *spread=J* forwards at random "
           "among the J lowest peers below the own count; *level=H, full* forwards only to a peer known below the cap; "
           "*pull, D, memory=M* also decides over the M lowest answers of earlier pulls (at most 10 ms old, own forwards "
           "added); *steal, C, T* (late binding): no counts, no forward on arrival; an agent lets at most C requests into "
           "its app and holds the rest; a free slot with nothing held asks a random peer for its oldest held request "
           "(a datagram; the answer is the request, a forward, or \"none\", a datagram), up to T more peers.\n",
           "| setting | idea | worst mean / JSQ | worst p99 / JSQ | 12 backends ρ 0.88 / 0.95 | 96 backends ρ 0.88 / 0.95 | "
           "messages per request, most (12 / 96) | cells over the bar | holds | with sigma 2: worst mean, p99 |",
           "|---|---|---:|---:|---:|---:|---:|---:|:--:|---:|"]
    for m in modes:
        v = vs[m]
        p = v["part"]
        out.append(f"| {m} | {fam(m)} | {v['mean_x']:.3f} ({f_where(v['mean_at'])}) | {v['p99_x']:.3f} ({f_where(v['p99_at'])}) | "
                   f"{p[(12, 0.88)]:.3f} / {p[(12, 0.95)]:.3f} | {p[(96, 0.88)]:.3f} / {p[(96, 0.95)]:.3f} | "
                   f"{v['msgs'][12]:.1f} / {v['msgs'][96]:.1f} | {v['over']} of {v['cells']} | {'**yes**' if v['holds'] else 'no'} | "
                   f"{heavier[m]['mean_x']:.3f} ({f_where(heavier[m]['mean_at'])}), {heavier[m]['p99_x']:.3f} |")
    holds = [m for m in modes if vs[m]["holds"]]
    cheap = [m for m in modes if vs[m]["most"] <= F_MSG and vs[m]["growth"] <= F_GROWTH]
    best_cheap = min(cheap, key=lambda m: vs[m]["mean_x"]) if cheap else None
    six = [m for m in modes if vs[m]["most"] <= F_BEST]
    best_six = min(six, key=lambda m: vs[m]["mean_x"]) if six else None
    # The frontier: no other setting both cheaper and closer to JSQ at its worst cell.
    front = sorted((m for m in modes if not any(vs[o]["most"] <= vs[m]["most"] and vs[o]["mean_x"] < vs[m]["mean_x"]
                                                 and o != m for o in modes)), key=lambda m: vs[m]["most"])
    out.append("")
    if holds:
        out.append(f"**Meets the bar**: {', '.join(holds)}.")
    else:
        out.append("**No setting meets the bar.** " + (
            f"Best within {F_MSG} messages per request: **{best_cheap}**, worst mean {vs[best_cheap]['mean_x']:.3f}× JSQ's "
            f"({f_where(vs[best_cheap]['mean_at'])}), worst p99 {vs[best_cheap]['p99_x']:.3f}×, {vs[best_cheap]['most']:.1f} "
            f"messages per request at most. " if best_cheap else "") + (
            f"Best within {F_BEST}: **{best_six}**, {vs[best_six]['mean_x']:.3f}× at worst, {vs[best_six]['most']:.1f} messages. "
            if best_six else ""))
    sh = vs.get("K=8, B=4 (shipped)")
    if sh:
        out.append(f"The shipped sample itself is {sh['mean_x']:.3f}× at worst ({f_where(sh['mean_at'])}), "
                   f"{sh['part'][(96, 0.88)]:.3f}× at ρ 0.88 on 96 backends: the bar fails first on quality, at ρ 0.95, before "
                   f"any message is saved.")
    out.append("\nThe frontier (no other setting tried is both cheaper and closer to JSQ at its worst cell): "
               + "; ".join(f"{m} ({vs[m]['most']:.1f} messages, {vs[m]['mean_x']:.3f}×)" for m in front) + ".\n")
    if data.get("plot"):  # drawn with the report's other plot
        out.append(f"![worst mean and p99 over JSQ's against messages per request, one point a setting]({NAME}-frontier.png)\n")
    out += frontier_why(c, vs)
    out += frontier_agent_text(vs, holds, best_cheap)
    return out


def frontier_agent_text(vs: dict, holds: list[str], best_cheap: str | None) -> list[str]:
    """What the agent would need for the setting to carry over (the agent is not changed here)."""
    pick = min(holds, key=lambda m: vs[m]["most"]) if holds else best_cheap
    out = ["\n### What the agent would need\n"]
    if not pick:
        return out + ["Nothing: no setting tried is within the message budget."]
    rate = RHO * CORES / (MEAN_MS / 1e3)  # requests a backend serves per second at ρ 0.88
    v = vs[pick]
    out.append(("A setting meets the bar: " if holds else "No setting meets the bar, so nothing is proposed for the agent yet; "
                "the closest to JSQ within the budget, for the record: ") + f"**{pick}**.")
    out.append(f"* **Cost**: at most {v['most']:.1f} messages per request, i.e. about {v['most'] * rate:.0f} datagrams/s per agent at "
               f"{rate:.0f} requests/s a backend (ρ {RHO}, {CORES} cores, {MEAN_MS} ms jobs), the same at 10, 100 or 1000 backends "
               "(an agent hears, asks or is heard by a bounded number of peers whatever the fleet; growth "
               f"{v['growth']:.2f} from 12 to 96 backends); memory per peer heard: a count and when it was taken (a few words); "
               "CPU: one HMAC per datagram, as today (a pull also holds the offer a round trip).")
    out.append("* **Messages and fields**: `level`, `delta` and `batch` change when a member sends its count, not the "
               "`hunt-fleet/3` datagram (a count is a count; heartbeats stay the floor, so a silent member still proves "
               "liveness every `fleet_heartbeat_ms`); a new knob per rule (`fleet_report_level`, `fleet_report_delta`, "
               "`fleet_report_batch_ms`) and its timer (a coalesced send due at the batch's end). `piggy` adds a field to "
               "the forward's answer (the peer's count after taking it), under the forward's own connection, not a datagram; "
               "tokens would be a new datagram kind (`SUB` 3: a token, the sender's count, a lifetime).")
    out.append("* **Trust**: a lying member already draws forwards by reporting 0 (§ 8a); the filters give it nothing new, "
               "since what it sends is still its own count. A piggybacked count comes over the forward's connection from "
               "the member forwarded to, so it is that member's word about itself, bounded as today by the forwarder "
               "counting its own outstanding forwards there. A token is a standing invitation: a liar could hand out "
               "unlimited tokens, so an agent would cap what it accepts from one member (at most L tokens out, each used "
               "once) and keep the own-forward bound.")
    out.append("* **Stealing**, if its holding were fixed (it fails on the mean, not on p99 or messages): a new datagram "
               "kind (an ask, and \"none\"), the held request sent as today's forward but at the holder's initiative; "
               "new state per agent: a FIFO of held requests (bounded by the backlog) and its asks outstanding; no count "
               "is shared, so no sample, subscription or heartbeat. Trust: an asker can only take what is held for it, "
               "so a member that asks too much drains its peers' queues into its own (a cap of asks per peer per "
               "interval, and the asker's own count, which the holder cannot check, are the exposure).")
    return out


def frontier_why(c: dict, vs: dict) -> list[str]:
    """What won, what lost and why, each claim with its numbers from the cells."""
    def v(m, key="mean_x"):
        return vs[m][key] if m in vs and vs[m] else float("nan")

    def part(m, b, rho):
        return vs[m]["part"][(b, rho)] if m in vs and vs[m] else float("nan")
    sh = "K=8, B=4 (shipped)"
    out = ["### Where the shipped sample loses at ρ 0.95 on 96 backends\n",
           "Means over seeds 1 and 2 of `huntlb-sim --servers 96 --workers 32 --cores 2 --backlog 128 --mean-ms 20 --rho 0.95 "
           "--proxies 64 --demand exp --requests 100000 --seed S --dispatch forward-least ...` (JSQ 21.47 ms; the shipped K=8, "
           "B=4 with counts and forwards 0.2 ms on the way 26.51 ms):",
           "* **The sample's size**: K=8, B=4 with no delay at all (`--fleet-delay-ms 0 --hop-ms 0`) 25.16 ms; every peer with no "
           "delay 21.58 ms (JSQ's: the front's pick and the single forward cost nothing when the view is live and whole).",
           "* **Herding within the delay**: every peer with 0.2 ms counts and hops 25.97 ms (0.05 ms each: 22.58; the hop alone "
           "23.92; the datagram alone 23.92). At ρ 0.95 on 192 cores there are a handful of free cores, and one changes every "
           "~0.1 ms fleet-wide: agents that see the same free core send to it within the 0.4 ms the news and the forward take. "
           "Spreading every peer's forwards over the 8 lowest (`spread=8`) recovers a third (24.60 ms); pulling all 95 peers "
           "and spreading over 8, 24.43 ms.",
           "* So the shipped sample loses about 3.7 ms to seeing 8 of 95 and 1.4 ms to the delay. A larger pushed view pays both "
           "ways (K=32, B=16: 22.10 ms live, 24.55 ms at 0.2 ms, 71.6 messages); `peer_margin=1` forwards less and is worse "
           "(29.80 ms). Nothing that decides at the offer's agent on counts 0.2-0.4 ms old reaches 1.05× there; what does not "
           "herd is a decision taken where the free core is, by its own count (`steal` below).\n",
           "### What won, what lost, and why\n"]
    if sh in vs:
        out.append(f"* **Quality before cost.** The shipped sample (K=8, B=4, {vs[sh]['most']:.1f} messages) is "
                   f"{part(sh, 12, 0.88):.3f}× / {part(sh, 12, 0.95):.3f}× JSQ at worst on 12 backends (ρ 0.88 / 0.95) and "
                   f"{part(sh, 96, 0.88):.3f}× / {part(sh, 96, 0.95):.3f}× on 96; K=10, B=5 ({v('K=10, B=5', 'most'):.1f} "
                   f"messages) {part('K=10, B=5', 96, 0.88):.3f}× / {part('K=10, B=5', 96, 0.95):.3f}× on 96. At ρ 0.95 the "
                   f"miss is the sample's (K of 95 peers, an agent's view fresh to 0.2 ms only), so every mode below that "
                   f"only thins the sample's messages starts from it and cannot reach {F_MEAN:.2f}×.")
    for m, why in (("K=8, B=4, level=1", "a third fewer messages on 12 backends but a sixth on 96, and worse at ρ 0.95, where the "
                    "counts sit above the level: a peer's rise past H+1 is heard only at its next heartbeat, so agents keep "
                    "forwarding to a peer that has filled"),
                   ("K=8, B=4, level=3", "H at the counts ρ 0.95 holds: nearly every change still goes out, nothing saved"),
                   ("K=8, B=4, delta=2", "the cheapest pushed setting (about half the changes skipped) and the cost is "
                    "quality: a count one off is wrong about exactly the margin (0) the rule decides on"),
                   ("K=16, B=8, delta=2", "a larger sample buys back a little of what delta loses, at twice the messages on "
                    "96 backends (a sample of 16 is capped at 11 on 12: its cost grows with the fleet up to K)"),
                   ("K=8, B=4, batch=5 ms", "a server changes every ~6 ms at ρ 0.88 (an arrival and a completion a request), "
                    "so 5 ms coalesces a third of the messages and makes every count up to 5 ms old: herding on a stale least"),
                   ("K=8, B=4, batch=10 ms", "half the messages, counts up to 10 ms old: the worst of the pushed settings"),
                   ("K=8, B=4, piggy", "free, and exact about the one peer just forwarded to; but the forwarder already counts "
                    "its own forwards there, so it changes nothing measurable (it is the shipped sample's numbers within noise)"),
                   ("tokens, L=4", "herding-free and the cheapest, but an agent forwards only on a token, tokens go to "
                    "agents drawn at random (most hold no busy offer while the token lives), and a fixed L fits one load"),
                   ("tokens, L=8", "more tokens reach more busy agents, yet most still lapse where they are not needed; "
                    "a token's count is also old when it is used"),
                   ("pull, D=4", "fresh counts and no herding for 8 messages, but only 4 peers and a round trip before "
                    "every offer decided by counts"),
                   ("K=8, B=4, spread=2", "forwarding at random to one of the two lowest below the own count spreads "
                    "agents that see the same least, but with 8 peers the second lowest is often a full one: herding is "
                    "not what a sample of 8 loses (see the diagnosis); spread helps only a large view"),
                   ("K=16, B=8, level=1, full", "forwarding only to a peer known below the cap (a free core) never "
                    "sends to a peer that filled unseen, but when no member of 16 is known free the offer stays "
                    "where it landed, and at ρ 0.95 that is often; crossings of 1 and 2 are most changes at ρ 0.95, "
                    "so 16 listeners cost more than 8 unfiltered (33.7 messages on 96 backends)"),
                   ("pull, D=4, memory=4", "remembered answers are 1-10 ms old, and what was low then is what every "
                    "agent sent to since: memory is stale where the free cores churn every ~0.1 ms fleet-wide"),
                   ("steal, C=2, T=6", "the one idea that removes the herding (the free core decides, on its own "
                    "count): on 96 backends at ρ 0.95 its p99 is JSQ's (0.96-1.02×) where the shipped sample is 1.24×, "
                    "for 7.5 messages; but holding requests beyond the cores turns the app's processor sharing into "
                    "first come, first served, and a held request waits behind a long job until a steal finds it: "
                    "the mean is 1.12-1.40× on 96 backends and 1.8-3.1× on 12 with lognormal jobs"),
                   ("steal, C=2, T=12", "more asks find held requests sooner (12 backends, exponential: 0.93-1.11×, "
                    "p99 0.62-0.84× JSQ's), but the heavy tail's loss is the holding itself (2.2-2.5× on 12 backends). "
                    "Letting the app share its cores among more than C before holding (`hold=3` or `4`, slots below 2 "
                    "still ask) is worse, not better: on 96 backends, 64 fronts, ρ 0.95, seeds 1-2, steal=2,tries=6,hold=3 "
                    "is 30.55 ms (exponential) and 34.56 ms (lognormal) against 26.32 and 28.84 without: less is held, so "
                    "less can be stolen, and a server's extra requests share its cores instead")):
        if m in vs and vs[m]:
            out.append(f"* **{m}**: {v(m):.3f}× JSQ at worst ({part(m, 96, 0.88):.3f}× / {part(m, 96, 0.95):.3f}× on 96 backends "
                       f"at ρ 0.88 / 0.95), {v(m, 'most'):.1f} messages per request: {why}.")
    return out


def frontier_plot(data: dict) -> None:
    f = data.get("frontier")
    plt = pyplot()
    if not f or plt is None:
        return
    c = frontier_cells(f["runs"])
    modes = [m for m in SHARE if m != "JSQ" and any(k[0] == m for k in c)]
    vs = {m: frontier_verdict(c, m) for m in modes}
    fams = list(dict.fromkeys(SHARE[m][0] for m in modes))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"] + ["black", "darkgoldenrod", "teal", "navy"]
    colours = {f_: cycle[i % len(cycle)] for i, f_ in enumerate(fams)}
    fig, ax = plt.subplots(figsize=(11, 6.5))
    for m in modes:
        x, col = max(vs[m]["most"], 0.1), colours[SHARE[m][0]]
        ax.scatter([x], [vs[m]["mean_x"]], color=col, marker="o")
        ax.scatter([x], [vs[m]["p99_x"]], facecolors="none", edgecolors=col, marker="s")
        ax.annotate(m, (x, vs[m]["mean_x"]), fontsize=7, xytext=(4, 2), textcoords="offset points")
    for fam_, col in colours.items():
        ax.scatter([], [], color=col, label=fam_)
    ax.scatter([], [], color="grey", marker="o", label="worst mean / JSQ")
    ax.scatter([], [], facecolors="none", edgecolors="grey", marker="s", label="worst p99 / JSQ")
    ax.axhline(F_MEAN, color="black", linestyle="--", linewidth=0.8)
    ax.axhline(F_P99, color="black", linestyle=":", linewidth=0.8)
    ax.axvline(F_MSG, color="black", linestyle="--", linewidth=0.8)
    ax.axvline(F_BEST, color="black", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("messages per request, the most over the grid")
    ax.set_ylabel("worst ratio to JSQ over the grid")
    ax.set_title("The frontier: 12 and 96 backends, 1-256 fronts, ρ 0.88 and 0.95, exponential and lognormal σ 1.5")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, RESULTS, f"{NAME}-frontier.png")


if __name__ == "__main__":
    main()
