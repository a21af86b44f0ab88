"""The second many-fronts study: the frontier of the tier's counts, quality
against messages (bench/many_fronts_sim.py --frontier runs it;
docs/results/many-fronts-sim.md, its last part).

Ways to share the counts with fewer messages than the shipped pushed sample
(`huntlb-sim --fleet-share`: filters on the pushed sample, piggybacking,
tokens, pulling, stealing), each over a larger grid than the first study's
(every front count on both fleets, two loads, a third, heavier tail) and held
to a stricter bar: mean within MEAN_BAR of JSQ's and p99 within P99_BAR at every
cell of the bar's demands, at most MSG_BAR messages per request, the best at
most BEST.
"""

from __future__ import annotations

import re

from benchlib.plots import pyplot, save
from benchlib.render import render
from fronts_sim import CORES, MEAN_MS, RHO, TIER, cells, pulled, sampled

GRID = {"fronts": {12: [1, 4, 16, 64, 256], 96: [1, 4, 16, 64, 256]}, "rhos": [0.88, 0.95],
        "demands": {"exp": "exponential", "lognormal:1.5": "lognormal, sigma 1.5", "lognormal:2": "lognormal, sigma 2"}}
# A cell of this study: (mode, backends, fronts, rho, demand).
FIELDS = ("backends", "fronts", "rho", "demand")
# The bar's demands; the third, heavier tail is shown beside them.
REQUIRED = ("exp", "lognormal:1.5")
MEAN_BAR, P99_BAR, MSG_BAR, BEST, GROWTH_BAR = 1.05, 1.10, 12, 6, 1.10
SHIPPED = "K=8, B=4 (shipped)"

# name -> (family, huntlb-sim arguments), in the report's order. The family
# names the idea (the plot's colour).
MODES: dict[str, tuple[str, list[str]]] = {
    "JSQ": ("ideal", ["--dispatch", "jsq"]),
    SHIPPED: ("pushed sample", sampled(8, 4)),
    "K=10, B=5": ("pushed sample", sampled(10, 5)),
    "pull, D=4": ("pull", pulled(4)),
    "pull, D=8": ("pull", pulled(8)),
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
    "pull, D=4, memory=4": ("pull with memory", pulled(4, "memory=4")),
    "steal, C=2, T=3": ("steal", [*TIER, "--fleet-sample", "0", "--fleet-share", "steal=2,tries=3"]),
    "steal, C=2, T=6": ("steal", [*TIER, "--fleet-sample", "0", "--fleet-share", "steal=2,tries=6"]),
    "steal, C=2, T=12": ("steal", [*TIER, "--fleet-sample", "0", "--fleet-share", "steal=2,tries=12"]),
    # For the agents' own bench (12 backends, 4 fronts, ρ 0.88): what a smaller sample, a level,
    # a slower draw or a short coalescing saves there, and at what mean.
    "K=6, B=3": ("pushed sample", sampled(6, 3)),
    "K=8, B=4, level=2": ("level", sampled(8, 4, "level=2")),
    "K=8, B=4, resample=200 ms": ("pushed sample", sampled(8, 4, resample_ms=200)),
    "K=8, B=4, batch=1 ms": ("batch", sampled(8, 4, "batch=1")),
}
# The modes the report says why of (bench/reports/many-fronts-sim.frontier.md,
# a bullet each, its numbers by the mode's slug).
EXPLAINED = ("K=8, B=4, level=1", "K=8, B=4, level=3", "K=8, B=4, delta=2", "K=16, B=8, delta=2", "K=8, B=4, batch=5 ms",
             "K=8, B=4, batch=10 ms", "K=8, B=4, piggy", "tokens, L=4", "tokens, L=8", "pull, D=4", "K=8, B=4, spread=2",
             "K=16, B=8, level=1, full", "pull, D=4, memory=4", "steal, C=2, T=6", "steal, C=2, T=12")
# The modes tried for the agents' own bench, said at its cell (12 backends, ρ 0.88) and at worst.
AT_BENCH = ("K=6, B=3", "K=8, B=4, level=2", "K=8, B=4, resample=200 ms", "K=8, B=4, batch=1 ms")


def args(name: str) -> list[str]:
    return MODES[name][1]


def slug(mode: str) -> str:
    """A mode's name as a template placeholder: "K=8, B=4, level=1" -> "k8_b4_level1"."""
    return re.sub(r"_+", "_", re.sub(r"\W", "_", mode.lower().replace("=", ""))).strip("_")


def study_cells(runs: list[dict]) -> dict:
    return cells(runs, FIELDS)


def verdict(c: dict, mode: str, demands: tuple = REQUIRED) -> dict:
    keys = [k for k in c if k[0] == mode and c[k]["mean_x"] is not None and k[4] in demands]
    if not keys:
        return {}
    wm = max(keys, key=lambda k: c[k]["mean_x"])
    wp = max(keys, key=lambda k: c[k]["p99_x"])
    msgs = {b: max(c[k]["msgs"] for k in keys if k[1] == b) for b in GRID["fronts"]}
    growth = msgs[96] / msgs[12] if msgs[12] else 1.0
    most = max(msgs.values())
    part = {(b, rho): max(c[k]["mean_x"] for k in keys if k[1] == b and k[3] == rho) for b in GRID["fronts"] for rho in GRID["rhos"]}
    over = sum(c[k]["mean_x"] > MEAN_BAR or c[k]["p99_x"] > P99_BAR for k in keys)
    return {"mean_x": c[wm]["mean_x"], "mean_at": wm, "p99_x": c[wp]["p99_x"], "p99_at": wp, "msgs": msgs, "most": most,
            "growth": growth, "part": part, "over": over, "cells": len(keys),
            "holds": c[wm]["mean_x"] <= MEAN_BAR and c[wp]["p99_x"] <= P99_BAR and most <= MSG_BAR and growth <= GROWTH_BAR}


def where(k: tuple) -> str:
    return f"{k[1]} backends, {k[2]} fronts, ρ {k[3]}, {GRID['demands'][k[4]]}"


def text(f: dict, plotted: bool) -> str:
    """The study's section of the report (bench/reports/many-fronts-sim.frontier.md)
    from its data ("frontier": seeds, requests, seconds, runs)."""
    c = study_cells(f["runs"])
    modes = [m for m in MODES if m != "JSQ" and any(k[0] == m for k in c)]
    vs = {m: verdict(c, m) for m in modes}
    heavier = {m: verdict(c, m, tuple(GRID["demands"])) for m in modes}
    rows = []
    for m in modes:
        v, p = vs[m], vs[m]["part"]
        rows.append(f"| {m} | {MODES[m][0]} | {v['mean_x']:.3f} ({where(v['mean_at'])}) | {v['p99_x']:.3f} ({where(v['p99_at'])}) | "
                    f"{p[(12, 0.88)]:.3f} / {p[(12, 0.95)]:.3f} | {p[(96, 0.88)]:.3f} / {p[(96, 0.95)]:.3f} | "
                    f"{v['msgs'][12]:.1f} / {v['msgs'][96]:.1f} | {v['over']} of {v['cells']} | {'**yes**' if v['holds'] else 'no'} | "
                    f"{heavier[m]['mean_x']:.3f} ({where(heavier[m]['mean_at'])}), {heavier[m]['p99_x']:.3f} |")
    holds = [m for m in modes if vs[m]["holds"]]
    cheap = [m for m in modes if vs[m]["most"] <= MSG_BAR and vs[m]["growth"] <= GROWTH_BAR]
    best_cheap = min(cheap, key=lambda m: vs[m]["mean_x"]) if cheap else None
    few = [m for m in modes if vs[m]["most"] <= BEST]
    best_few = min(few, key=lambda m: vs[m]["mean_x"]) if few else None
    # The frontier: no other setting both cheaper and closer to JSQ at its worst cell.
    front = sorted((m for m in modes if not any(vs[o]["most"] <= vs[m]["most"] and vs[o]["mean_x"] < vs[m]["mean_x"]
                                                 and o != m for o in modes)), key=lambda m: vs[m]["most"])
    if holds:
        met = f"**Meets the bar**: {', '.join(holds)}."
    else:
        met = "**No setting meets the bar.** " + (
            f"Best within {MSG_BAR} messages per request: **{best_cheap}**, worst mean {vs[best_cheap]['mean_x']:.3f}× JSQ's "
            f"({where(vs[best_cheap]['mean_at'])}), worst p99 {vs[best_cheap]['p99_x']:.3f}×, {vs[best_cheap]['most']:.1f} "
            f"messages per request at most. " if best_cheap else "") + (
            f"Best within {BEST}: **{best_few}**, {vs[best_few]['mean_x']:.3f}× at worst, {vs[best_few]['most']:.1f} messages. "
            if best_few else "")
    sh = vs[SHIPPED]
    values = {
        "seeds": str(len(f["seeds"])), "requests": str(f["requests"]), "seconds": f"{f['seconds']:.0f}",
        "fronts": ", ".join(str(x) for x in GRID["fronts"][12]), "rhos": " and ".join(str(r) for r in GRID["rhos"]),
        "demands": ", ".join(GRID["demands"].values()), "mean_bar": f"{MEAN_BAR:.2f}", "p99_bar": f"{P99_BAR:.2f}",
        "msg_bar": str(MSG_BAR), "growth_bar": f"{GROWTH_BAR:.2f}", "best": str(BEST),
        "rows": "\n".join(rows), "met": met,
        "shipped_x": f"{sh['mean_x']:.3f}", "shipped_at": where(sh["mean_at"]), "shipped_96_088": f"{sh['part'][(96, 0.88)]:.3f}",
        "frontier": "; ".join(f"{m} ({vs[m]['most']:.1f} messages, {vs[m]['mean_x']:.3f}×)" for m in front),
        # drawn with the report's other plot
        "plot": "![worst mean and p99 over JSQ's against messages per request, one point a setting](many-fronts-sim-frontier.png)\n\n"
                if plotted else "",
        "shipped_msgs": f"{sh['most']:.1f}", "shipped_12_088": f"{sh['part'][(12, 0.88)]:.3f}",
        "shipped_12_095": f"{sh['part'][(12, 0.95)]:.3f}", "shipped_96_095": f"{sh['part'][(96, 0.95)]:.3f}",
        "k10_msgs": f"{vs['K=10, B=5']['most']:.1f}", "k10_96_088": f"{vs['K=10, B=5']['part'][(96, 0.88)]:.3f}",
        "k10_96_095": f"{vs['K=10, B=5']['part'][(96, 0.95)]:.3f}",
        "agent": agent_text(vs, holds, best_cheap),
    }
    for m in EXPLAINED:
        if m not in vs:
            raise KeyError(f"many-fronts-sim: the frontier has no runs of {m!r}: run it (--frontier {m!r})")
        s, v = slug(m), vs[m]
        values |= {f"{s}_worst": f"{v['mean_x']:.3f}", f"{s}_96_088": f"{v['part'][(96, 0.88)]:.3f}",
                   f"{s}_96_095": f"{v['part'][(96, 0.95)]:.3f}", f"{s}_msgs": f"{v['most']:.1f}"}
    for m in AT_BENCH:
        if m not in vs:
            raise KeyError(f"many-fronts-sim: the frontier has no runs of {m!r}: run it (--frontier {m!r})")
        s, v = slug(m), vs[m]
        values |= {f"{s}_12_088": f"{v['part'][(12, 0.88)]:.3f}", f"{s}_worst": f"{v['mean_x']:.3f}", f"{s}_msgs12": f"{v['msgs'][12]:.1f}"}
    return render("many-fronts-sim.frontier", values, part=True)


def agent_text(vs: dict, holds: list[str], best_cheap: str | None) -> str:
    """What the agent would need for the setting to carry over (the agent is not changed here)."""
    pick = min(holds, key=lambda m: vs[m]["most"]) if holds else best_cheap
    if not pick:
        return "Nothing: no setting tried is within the message budget."
    rate = RHO * CORES / (MEAN_MS / 1e3)  # requests a backend serves per second at ρ 0.88
    v = vs[pick]
    return render("many-fronts-sim.agent", {
        "pick": ("A setting meets the bar: " if holds else "No setting meets the bar, so nothing is proposed for the agent yet; "
                 "the closest to JSQ within the budget, for the record: ") + f"**{pick}**.",
        "most": f"{v['most']:.1f}", "datagrams": f"{v['most'] * rate:.0f}", "rate": f"{rate:.0f}", "rho": str(RHO),
        "cores": str(CORES), "mean_ms": str(MEAN_MS), "growth": f"{v['growth']:.2f}"}, part=True)


def plot(f: dict, out, name: str) -> None:
    """Worst mean and p99 over JSQ's against messages per request, a point per setting."""
    plt = pyplot()
    if not f or plt is None:
        return
    c = study_cells(f["runs"])
    modes = [m for m in MODES if m != "JSQ" and any(k[0] == m for k in c)]
    vs = {m: verdict(c, m) for m in modes}
    fams = list(dict.fromkeys(MODES[m][0] for m in modes))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"] + ["black", "darkgoldenrod", "teal", "navy"]
    colours = {f_: cycle[i % len(cycle)] for i, f_ in enumerate(fams)}
    fig, ax = plt.subplots(figsize=(11, 6.5))
    for m in modes:
        x, col = max(vs[m]["most"], 0.1), colours[MODES[m][0]]
        ax.scatter([x], [vs[m]["mean_x"]], color=col, marker="o")
        ax.scatter([x], [vs[m]["p99_x"]], facecolors="none", edgecolors=col, marker="s")
        ax.annotate(m, (x, vs[m]["mean_x"]), fontsize=7, xytext=(4, 2), textcoords="offset points")
    for fam_, col in colours.items():
        ax.scatter([], [], color=col, label=fam_)
    ax.scatter([], [], color="grey", marker="o", label="worst mean / JSQ")
    ax.scatter([], [], facecolors="none", edgecolors="grey", marker="s", label="worst p99 / JSQ")
    ax.axhline(MEAN_BAR, color="black", linestyle="--", linewidth=0.8)
    ax.axhline(P99_BAR, color="black", linestyle=":", linewidth=0.8)
    ax.axvline(MSG_BAR, color="black", linestyle="--", linewidth=0.8)
    ax.axvline(BEST, color="black", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("messages per request, the most over the grid")
    ax.set_ylabel("worst ratio to JSQ over the grid")
    ax.set_title("The frontier: 12 and 96 backends, 1-256 fronts, ρ 0.88 and 0.95, exponential and lognormal σ 1.5")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, out, f"{name}-frontier.png")
