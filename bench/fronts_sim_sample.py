"""The first many-fronts study: a bounded sample against every peer
(bench/many_fronts_sim.py runs it; docs/results/many-fronts-sim.md, its first
part).

huntlb-sim at ρ 0.88 over 12 backends (1, 4, 16, 64 fronts) and 96 backends
(1, 16, 64, 256 fronts), exponential and lognormal (sigma 1.5) demand of the
same mean: JSQ (the limit), each front's own least-request and P2C, a Prequal
model (probes, a pool and the hot-cold rule), hunting as shipped (no tier),
and the agents' forwarding tier with counts to every peer, to a bounded sample
of K peers re-drawn every R ms keeping the B lowest, or pulled from D peers on
demand. The bar: the tier within MEAN_BAR of JSQ's mean and P99_BAR of its p99
at every cell, at most MSG_BAR messages per request, not growing with the fleet.
"""

from __future__ import annotations

from benchlib.plots import pyplot, save
from benchlib.render import render
from fronts_sim import DELAY_MS, HOP_MS, RHO, TIER, cells, pulled, sampled

# The grid: front counts per fleet size, one load, two demands of one mean.
GRID = {"fronts": {12: [1, 4, 16, 64], 96: [1, 16, 64, 256]}, "rhos": [RHO],
        "demands": {"exp": "exponential", "lognormal:1.5": "lognormal, sigma 1.5"}}
FRONTS, DEMANDS = GRID["fronts"], GRID["demands"]
# A cell of this study: (mode, backends, fronts, demand).
FIELDS = ("backends", "fronts", "demand")

# name -> huntlb-sim arguments, in the report's order. Hunting as shipped: the
# front's own least with hunt-seen, the agent's default policy
# `dynamic:seen_margin=1`, no tier.
MODES: dict[str, list[str]] = {
    "JSQ": ["--dispatch", "jsq"],
    "least-request": ["--dispatch", "least"],
    "P2C": ["--dispatch", "p2c"],
    "Prequal, q 0.84": ["--dispatch", "prequal:pool=16,probes=3,q=0.84", "--hop-ms", str(HOP_MS)],
    "Prequal, q 0": ["--dispatch", "prequal:pool=16,probes=3,q=0", "--hop-ms", str(HOP_MS)],
    "hunting (shipped, no tier)": ["--dispatch", "hunt-least:dynamic:seen_margin=1", "--hop-ms", str(HOP_MS)],
    "tier, every peer": [*TIER, "--fleet-sample", "0"],
    # a pushed sample of K, keeping none or the lowest half
    **{f"tier, K={k}, B={b}": sampled(k, b) for k in (2, 4, 8) for b in (0, k // 2)},
    # beyond the grid of K and B: re-drawing 5 times as often (R 20 ms), a
    # larger sample (K 10), and pulling D peers' counts on demand (an agent
    # about to decide asks them, and decides on their answers a round trip
    # later) instead of pushing them
    "tier, K=8, B=4, R=20 ms": sampled(8, 4, resample_ms=20),
    "tier, K=6, B=3, R=20 ms": sampled(6, 3, resample_ms=20),
    "tier, K=10, B=5": sampled(10, 5),
    **{f"pull, D={d}": pulled(d) for d in (4, 8, 10, 12)},
}
BASELINES = ("least-request", "Prequal, q 0.84", "Prequal, q 0")
# The bar set for the shipped tier.
MEAN_BAR, P99_BAR, MSG_BAR, GROWTH_BAR = 1.10, 1.15, 24, 1.10
# What the plot draws, when the data has it.
PLOTTED = ("least-request", "P2C", "Prequal, q 0.84", "Prequal, q 0", "hunting (shipped, no tier)", "tier, every peer",
           "tier, K=4, B=2", "tier, K=8, B=4", "tier, K=8, B=4, R=20 ms", "pull, D=8")


def study_cells(runs: list[dict]) -> dict:
    return cells(runs, FIELDS)


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


def design_text(c: dict, modes: list[str]) -> str:
    """The design question's answer, from the cells: which bounded setting
    meets the bar over both demands, or by how much each misses it."""
    bounded = [m for m in modes if m.startswith(("tier, K=", "pull, D="))]
    vs = {m: verdict(c, m, list(DEMANDS)) for m in bounded}
    vs = {m: v for m, v in vs.items() if v}
    if not vs:
        return ""
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
    out.append(f"By how much each misses (mean over the {MEAN_BAR:.2f}× bar, p99 over the {P99_BAR:.2f}× bar, messages over {MSG_BAR} "
               "or growing; both demands; a dash: met):\n")
    out.append(f"| setting | mean: worst, cells above {MEAN_BAR:.2f}× | p99: worst, cells above {P99_BAR:.2f}× | "
               "messages, most (12 / 96 backends) | growth |")
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
    return "\n".join(out)


def worst(c: dict, mode: str, backends: int) -> tuple[float, float]:
    """(worst mean / JSQ, most messages per request) of `mode` on `backends`, both demands, every front count but 1."""
    ks = [(mode, backends, f, d) for f in FRONTS[backends][1:] for d in DEMANDS if (mode, backends, f, d) in c]
    if not ks:
        raise KeyError(f"many-fronts-sim: no runs of mode {mode!r} on {backends} backends: run it (--only)")
    return max(c[k]["mean_x"] for k in ks), max(c[k]["msgs"] for k in ks)


def findings_text(c: dict) -> str:
    """What the numbers say (bench/reports/many-fronts-sim.findings.md), its numbers from the cells."""
    def x(m, b):
        return f"{worst(c, m, b)[0]:.2f}"

    def exp(m, b, f):
        return f"{c[(m, b, f, 'exp')]['mean_x']:.2f}"
    every12, every96 = worst(c, "tier, every peer", 12), worst(c, "tier, every peer", 96)
    k8_12, k8_96 = worst(c, "tier, K=8, B=4", 12), worst(c, "tier, K=8, B=4", 96)
    k10_12, k10_96 = worst(c, "tier, K=10, B=5", 12), worst(c, "tier, K=10, B=5", 96)
    pulls = [m for m in MODES if m.startswith("pull, D=")]
    tail = {d: max(c[("tier, every peer", 96, f, d)]["mean_x"] for f in FRONTS[96][1:]) for d in DEMANDS}
    values = {
        "every12_x": f"{every12[0]:.2f}", "every12_msgs": f"{every12[1]:.0f}", "every96_x": f"{every96[0]:.2f}",
        "every96_msgs": f"{every96[1]:.0f}", "delay_ms": str(DELAY_MS), "hop_ms": str(HOP_MS),
        "k8_12_msgs": f"{k8_12[1]:.1f}", "k8_96_msgs": f"{k8_96[1]:.1f}", "k8_12_x": f"{k8_12[0]:.2f}", "k8_96_x": f"{k8_96[0]:.2f}",
        "k4_96_x": x("tier, K=4, B=2", 96),
        "k10_12_x": f"{k10_12[0]:.3f}", "k10_96_x": f"{k10_96[0]:.3f}", "k10_12_msgs": f"{k10_12[1]:.1f}", "k10_96_msgs": f"{k10_96[1]:.1f}",
        "pull_wait_ms": f"{2 * DELAY_MS:.1f}",
        "pulls": "; ".join(f"{m.split(', ')[1]}: {worst(c, m, 12)[0]:.3f}× / {worst(c, m, 96)[0]:.3f}× JSQ at worst (12 / 96 "
                           f"backends), {max(worst(c, m, 12)[1], worst(c, m, 96)[1]):.1f} messages" for m in pulls),
        "hunt96_x": x("hunting (shipped, no tier)", 96),
        "pq96_16": exp("Prequal, q 0", 96, 16), "pq96_64": exp("Prequal, q 0", 96, 64), "pq96_256": exp("Prequal, q 0", 96, 256),
        "hu96_16": exp("hunting (shipped, no tier)", 96, 16), "hu96_64": exp("hunting (shipped, no tier)", 96, 64),
        "hu96_256": exp("hunting (shipped, no tier)", 96, 256), "pq084_96_x": x("Prequal, q 0.84", 96),
        "every96_lognormal": f"{tail['lognormal:1.5']:.2f}", "every96_exp": f"{tail['exp']:.2f}",
    }
    return render("many-fronts-sim.findings", values, part=True)


def verdict_text(c: dict, modes: list[str]) -> str:
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
    return "\n".join(out)


def tables_text(c: dict, modes: list[str]) -> str:
    """A table per fleet and demand: every mode at every front count."""
    out = []
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
    return "\n".join(out)


def plot(runs: list[dict], out, name: str) -> str | None:
    """Mean over JSQ's and messages per request against fronts, each fleet, exponential demand."""
    plt = pyplot()
    if plt is None:
        return None
    c = study_cells(runs)
    shown = [m for m in PLOTTED if any(k[0] == m for k in c)]
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
    save(fig, out, f"{name}.png")
    return f"{name}.png"

