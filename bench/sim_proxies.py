#!/usr/bin/env python3
"""Hunting over the proxy's own choice, by simulation (docs/results/simulation-proxies.md).

huntlb-sim on the SRLB model: each request is offered to the proxy's own pick
(random, P2C or least outstanding requests, by the proxy's own counts) and the
agent refuses by its true load (SR_dyn); the final goes to the same rule's pick
among the others. Compared with the proxies' own rules alone and ideal JSQ, at
1-64 proxies and ρ 0.6, 0.88, 0.95; a mixed fleet; stale views.

Usage: python3 bench/sim_proxies.py [--seeds 5] [--requests 200000]
       (after `cargo build --release -p huntlb-instruments`; one simulator process at a time)
       python3 bench/sim_proxies.py --report-only   (rewrite the report from its data)
Writes docs/results/simulation-proxies.md (and simulation-proxies.png when
matplotlib is importable); every point goes to bench/data/simulation-proxies.json.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from benchlib.plots import pyplot, save
from benchlib.render import render, shown_in
from benchlib import data as rundata
from benchlib.reports import RESULTS, ROOT, data_path, machine
from benchlib.runs import select
from benchlib.stats import median
from benchlib.tools import huntlb_sim

SIM = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "huntlb-sim"
DATA = data_path("simulation-proxies")

MEAN_MS, BACKLOG = 20, 128
HOMO = ["--servers", "12", "--workers", "32", "--cores", "2"]
MIXED_CORES = [1, 1, 2, 2, 4, 4, 8, 8]
FLEETS = {"mixed, 32 workers each": ["--cores-list", ",".join(map(str, MIXED_CORES)), "--workers", "32"],
          "mixed, 16 workers per core": ["--cores-list", ",".join(map(str, MIXED_CORES)), "--workers-per-core", "16"]}
PROXIES = [1, 2, 4, 8, 16, 32, 64]
RHOS = [0.6, 0.88, 0.95]
RHO = 0.88

# The dispatchers of the main tables: name -> huntlb-sim --dispatch. The names
# label the runs in bench/data/simulation-proxies.json and keep the words they
# were measured under: "slack" there is the policy's `seen_margin` (hunting)
# and the agent's `forward_peer_margin` (forwarding), "seen" its `forward_seen_margin`.
MAIN = {"random": "random", "P2C": "p2c", "least": "least", "hunt, random offer": "hunt:dynamic",
        "hunt over P2C": "hunt-p2c:dynamic", "hunt over least": "hunt-least:dynamic",
        "hunt over least, slack 1": "hunt-least:dynamic:seen_margin=1", "JSQ": "jsq"}
NEW = "hunt over least, slack 1"  # what the shipped HAProxy front and agents do (hunt-seen + seen_margin=1)
BASELINES = ("least", "P2C", "hunt, random offer")
STYLE = {"random": ("tab:red", ":"), "P2C": ("tab:brown", "-"), "least": ("tab:orange", "-"),
         "hunt, random offer": ("tab:green", "--"), "hunt over P2C": ("tab:cyan", "-"), "hunt over least": ("tab:blue", "-"), NEW: ("tab:purple", "-"),
         "JSQ": ("black", "--")}
CANDIDATES = (NEW, "hunt over least", "hunt over P2C")
# Other acceptance policies and rules, at every ρ (SR_dyn keeps acceptance in [low, high]).
VARIANTS = {
    "hunt, random offer, SR_4": "hunt:static:4",
    "hunt over least, SR_dyn 0.3-0.5": "hunt-least:dynamic:low=0.3,high=0.5",
    "hunt over least, SR_dyn 0.5-0.7": "hunt-least:dynamic:low=0.5,high=0.7",
    "hunt over least, SR_dyn 0.6-0.8": "hunt-least:dynamic:low=0.6,high=0.8",
    "hunt over least, SR_dyn 0.7-0.9": "hunt-least:dynamic:low=0.7,high=0.9",
    "hunt over least, SR_dyn 0.85-0.95": "hunt-least:dynamic:low=0.85,high=0.95",
    "hunt over least-of-2, SR_dyn": "hunt-least-of-2:dynamic",
    "hunt over least-of-3, SR_dyn": "hunt-least-of-3:dynamic",
    "hunt over P2C, SR_dyn 0.6-0.8": "hunt-p2c:dynamic:low=0.6,high=0.8",
    "hunt over least, SR_3": "hunt-least:static:3",
    "hunt over least, SR_4": "hunt-least:static:4",
    # Load feedback (huntlb-sim --feedback): every response and refusal tells its
    # proxy the server's true in-flight count. No front does this; it bounds what
    # better information could buy at a few proxies.
    "least, load feedback": "least --feedback",
    "hunt over least, slack 1, load feedback": "hunt-least:dynamic:seen_margin=1 --feedback",
    "hunt over least, SR_3, load feedback": "hunt-least:static:3 --feedback",
}
CEILING_PROXIES = 4  # where the real runs aim at mean <= 0.85x least-request's (docs/results/vs-least.md)
STALE = {"least": "least", "least-of-3": "least-of-3", "P2C": "p2c", "hunt over least": "hunt-least:dynamic",
         "hunt over least-of-3": "hunt-least-of-3:dynamic", "hunt over P2C": "hunt-p2c:dynamic"}
STALE_PROXIES = [1, 4]
REFRESH_MS = [0, 1, 10, 50, 100]
MIXED_PROXIES = [1, 4, 16]
# The forwarding tier (agent `fleet_listen`; huntlb-sim
# forward-RULE:peer_margin=M,seen_margin=K --fleet-delay-ms D): every change of
# a server's count reaches every agent D ms later (--fleet-sample 0: every
# peer, as these runs were measured), and the first agent forwards an offer
# that is not the fleet's least (within M), unless its server holds no more
# than the front's own count there plus K, to the least. The agent's defaults
# are M 0, K 1.
SHIPPED_FORWARD = "forward to the least, slack 0, seen 1 (the agent's default)"
FORWARD = {SHIPPED_FORWARD: "forward-least:peer_margin=0,seen_margin=1 --fleet-sample 0",
           "forward to the least, slack 0": "forward-least:peer_margin=0,seen_margin=off --fleet-sample 0",
           "forward to the least, slack 1, seen 1": "forward-least:peer_margin=1,seen_margin=1 --fleet-sample 0"}
FORWARD_DELAY_MS = [0, 0.1, 0.2, 0.5, 1, 2, 5]
FORWARD_PROXIES = [1, 4, 16]
# Acceptance policies beside SR_dyn's default on the mixed fleet.
MIXED_EXTRA = {"hunt over least, SR_dyn 0.85-0.95": "hunt-least:dynamic:low=0.85,high=0.95",
               "hunt over least, SR_3": "hunt-least:static:3", "hunt over least, SR_8": "hunt-least:static:8",
               "hunt over least, slack 1, c_min = cores": "hunt-least:dynamic:seen_margin=1 --c-min-cores",
               "hunt, random offer, c_min = cores": "hunt:dynamic --c-min-cores"}
CAPACITY = "hunt over least, slack 1, c_min = cores"


def sim(dispatch: str, rhos: list[float], seed: int, requests: int, proxies: int = 1, fleet: list[str] = HOMO,
        refresh_ms: float = 0, fleet_delay_ms: float = 0) -> list[dict]:
    dispatch, *extra = dispatch.split()  # "DISPATCH --flag": simulator flags beside the dispatch
    args = [*fleet, *extra, "--backlog", str(BACKLOG), "--mean-ms", str(MEAN_MS), "--dispatch", dispatch,
            "--proxies", str(proxies), "--requests", str(requests), "--seed", str(seed), "--rho", ",".join(map(str, rhos))]
    if refresh_ms:
        args += ["--refresh-ms", str(refresh_ms)]
    if fleet_delay_ms:
        args += ["--fleet-delay-ms", str(fleet_delay_ms)]
    return huntlb_sim(str(SIM), args, timeout=600)


def point(reps: list[dict], **key) -> dict:
    """The median over seeds of one setting (reps: one report per seed)."""
    acc = [r["acceptance"] for r in reps if r["acceptance"] is not None]
    return {**key, "mean_ms": median([r["mean_ms"] for r in reps]), "p99_ms": median([r["p99_ms"] for r in reps]),
            "means": [r["mean_ms"] for r in reps], "p99s": [r["p99_ms"] for r in reps],
            "rejected": median([r["rejected"] for r in reps]), "rejected_total": sum(r["rejected"] for r in reps),
            "acceptance": median(acc) if acc else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds per point (medians are reported)")
    ap.add_argument("--requests", type=int, default=200_000, help="requests per run")
    ap.add_argument("--report-only", action="store_true", help=f"rewrite the report from {DATA.relative_to(ROOT)}")
    ap.add_argument("--only", choices=["forward"], help="run this section only, into the last data")
    a = ap.parse_args()
    if a.report_only:
        write(rundata.read(DATA))
        return
    if not SIM.exists():
        raise SystemExit(f"{SIM} not built: run `cargo build --release -p huntlb-instruments` first")
    seeds = list(range(1, a.seeds + 1))
    t0 = time.monotonic()
    if a.only:
        data = rundata.read(DATA)
        data["points"] = [x for x in data["points"] if x["section"] != a.only] + forward(data["seeds"], data["requests"])
        write(data)
        print(f"wrote docs/results/simulation-proxies.md ({time.monotonic() - t0:.0f} s)", flush=True)
        return
    pts = []
    for section, table in (("main", MAIN), ("variant", VARIANTS)):
        for name, d in table.items():
            for p in PROXIES:
                reps = [sim(d, RHOS, s, a.requests, p) for s in seeds]
                pts += [point([rep[i] for rep in reps], section=section, name=name, dispatch=d, proxies=p, rho=rho)
                        for i, rho in enumerate(RHOS)]
            print(f"{section} {name} done ({time.monotonic() - t0:.0f} s)", flush=True)
    for fleet, args in FLEETS.items():
        for name, d in {**MAIN, **MIXED_EXTRA}.items():
            for p in MIXED_PROXIES:
                pts.append(point([sim(d, [RHO], s, a.requests, p, args)[0] for s in seeds], section="mixed", fleet=fleet,
                                 name=name, dispatch=d, proxies=p, rho=RHO))
    print(f"mixed fleets done ({time.monotonic() - t0:.0f} s)", flush=True)
    for name, d in STALE.items():
        for p in STALE_PROXIES:
            for t in REFRESH_MS:
                pts.append(point([sim(d, [RHO], s, a.requests, p, refresh_ms=t)[0] for s in seeds], section="stale",
                                 name=name, dispatch=d, proxies=p, rho=RHO, refresh_ms=t))
    print(f"staleness done ({time.monotonic() - t0:.0f} s)", flush=True)
    pts += forward(seeds, a.requests)
    data = {"machine": machine(), "seconds": time.monotonic() - t0, "seeds": seeds, "requests": a.requests,
            "argv": f"python3 bench/sim_proxies.py --seeds {a.seeds} --requests {a.requests}", "points": pts}
    write(data)
    print(f"wrote docs/results/simulation-proxies.md, {DATA.relative_to(ROOT)}", flush=True)


def write(data: dict) -> None:
    """The plot, the report, then the data with what the report shows (the
    data after the report: rendering fills its "shown"; whether a plot was
    drawn is this machine's, not the data's)."""
    data["plot"] = plot(data)
    (RESULTS / "simulation-proxies.md").write_text(report(data))
    rundata.write(DATA, {k: v for k, v in data.items() if k != "plot"})


def forward(seeds: list[int], requests: int) -> list[dict]:
    pts = [point([sim(d, [RHO], s, requests, p, fleet_delay_ms=t)[0] for s in seeds], section="forward", name=name, dispatch=d,
                 proxies=p, rho=RHO, fleet_delay_ms=t)
           for name, d in FORWARD.items() for p in FORWARD_PROXIES for t in FORWARD_DELAY_MS]
    print("forwarding done", flush=True)
    return pts


def get(d: dict, section: str, name: str, proxies: int, rho: float = RHO, **key) -> dict:
    return select(d["points"], section=section, name=name, proxies=proxies, rho=rho, **key)[0]


def judge(d: dict, section: str, cand: str, rho: float = RHO) -> dict:
    """The acceptance point for one candidate at `rho`: per proxy count, mean and
    p99 over the best baseline's, and at 1 proxy over JSQ's; with how many seeds
    (the i-th run of each, unpaired) agree."""
    rows = []
    for p in PROXIES:
        c = get(d, section, cand, p, rho)
        best = {m: min((get(d, "main", b, p, rho) for b in BASELINES), key=lambda x: x[f"{m}_ms"]) for m in ("mean", "p99")}
        row = {"proxies": p}
        for m in ("mean", "p99"):
            row[m] = c[f"{m}_ms"] / best[m][f"{m}_ms"]
            row[f"{m}_best"] = best[m]["name"]
            row[f"{m}_seeds"] = sum(x <= y for x, y in zip(c[f"{m}s"], best[m][f"{m}s"]))
        rows.append(row)
    jsq, c1 = get(d, "main", "JSQ", 1, rho), get(d, section, cand, 1, rho)
    return {"rows": rows, "jsq_mean": c1["mean_ms"] / jsq["mean_ms"], "jsq_p99": c1["p99_ms"] / jsq["p99_ms"],
            "holds": all(r["mean"] <= 1 and r["p99"] <= 1 for r in rows)
            and c1["mean_ms"] <= 1.1 * jsq["mean_ms"] and c1["p99_ms"] <= 1.1 * jsq["p99_ms"]}


def cell(x: dict) -> str:
    return f"{x['mean_ms']:.1f} / {x['p99_ms']:.0f}"


def plural(p: int) -> str:
    return f"{p} prox{'y' if p == 1 else 'ies'}"


def fails(v: dict) -> str:
    """The proxy counts where a judged candidate is above the best baseline."""
    parts = []
    for r in v["rows"]:
        bad = [f"{m} {r[m]:.3f}×" for m in ("mean", "p99") if r[m] > 1]
        if bad:
            parts.append(f"{r['proxies']} ({', '.join(bad)})")
    jsq = [f"{m} {v['jsq_' + m]:.3f}× JSQ" for m in ("mean", "p99") if v["jsq_" + m] > 1.1]
    return ", ".join(parts + jsq) or "none"


def wins_from(v: dict) -> int | None:
    """The smallest proxy count from which the candidate meets the point at every larger count."""
    ok = [r["mean"] <= 1 and r["p99"] <= 1 for r in v["rows"]]
    i = next((i for i in range(len(ok)) if all(ok[i:])), None)
    return None if i is None else v["rows"][i]["proxies"]


def worst(v: dict) -> float:
    """How far above the best baseline the candidate gets at its worst count (0: never above)."""
    return max(0.0, *(r[m] - 1 for r in v["rows"] for m in ("mean", "p99")))


def tightest(v: dict, n: int) -> str:
    """The closest call: the largest ratio to the best baseline, and how many seeds agree there."""
    r, m = max(((r, m) for r in v["rows"] for m in ("mean", "p99")), key=lambda x: x[0][x[1]])
    return f"{r['proxies']}: {m} {r[m]:.3f}×, ≤ in {r[m + '_seeds']}/{n} seeds"


def report(d: dict) -> str:
    n = len(d["seeds"])
    head = "| dispatch | " + " | ".join(f"{p}" for p in PROXIES) + " |\n|---|" + "---:|" * len(PROXIES)

    def table(rho: float) -> str:
        rows = [f"| {name} | " + " | ".join(cell(get(d, "main", name, p, rho)) for p in PROXIES) + " |" for name in MAIN]
        return head + "\n" + "\n".join(rows)

    judged = [(c, "main") for c in CANDIDATES] + [(v, "variant") for v in VARIANTS if not v.startswith("hunt, random offer")]
    verdicts = {rho: {c: judge(d, sec, c, rho) for c, sec in judged} for rho in RHOS}
    v88 = verdicts[RHO]
    vrows = []
    for name, v in v88.items():
        cells = " | ".join(f"{r['mean']:.2f} / {r['p99']:.2f}{'' if r['mean'] <= 1 and r['p99'] <= 1 else ' ✗'}" for r in v["rows"])
        vrows.append(f"| {name} | {cells} | {v['jsq_mean']:.2f} / {v['jsq_p99']:.2f} | {'**yes**' if v['holds'] else 'no'} | {tightest(v, n)} |")
    other = [f"| {name} | " + " | ".join("holds" if verdicts[rho][name]["holds"] else "fails at " + fails(verdicts[rho][name])
                                         for rho in RHOS if rho != RHO) + " |" for name in v88]
    seeds_note = "; ".join(
        f"{c} at {plural(r['proxies'])}: mean {r['mean_seeds']}/{n}, p99 {r['p99_seeds']}/{n}"
        for c in CANDIDATES for r in v88[c]["rows"] if r["mean"] > 1 or r["p99"] > 1)

    var_rows = []
    for name in ["hunt, random offer", "hunt over least", *VARIANTS]:
        sec = "main" if name in MAIN else "variant"
        acc = [a for a in (get(d, sec, name, p)["acceptance"] for p in PROXIES) if a is not None]
        var_rows.append(f"| {name} | " + " | ".join(cell(get(d, sec, name, p)) for p in PROXIES)
                        + (f" | {min(acc):.2f}-{max(acc):.2f} |" if acc else " | - |"))

    mixed, mixed_vs = [], []
    for fleet in FLEETS:
        for name in {**MAIN, **MIXED_EXTRA}:
            xs = [get(d, "mixed", name, p, fleet=fleet) for p in MIXED_PROXIES]
            mixed.append(f"| {fleet} | {name} | " + " | ".join(f"{cell(x)} | {x['rejected']:.0f}" for x in xs) + " |")
        ratio = lambda h: ", ".join(  # noqa: E731
            f"{get(d, 'mixed', h, p, fleet=fleet)['mean_ms'] / get(d, 'mixed', 'least', p, fleet=fleet)['mean_ms']:.2f}×" for p in MIXED_PROXIES)
        mixed_vs.append(f"| {fleet} | {ratio('hunt over least')} | {ratio('hunt over least, SR_dyn 0.85-0.95')} | {ratio('hunt over least, SR_8')}"
                        f" | {ratio(NEW)} | {ratio(CAPACITY)} |")
    pin = get(d, "mixed", "hunt over least, SR_3", 1, fleet=next(iter(FLEETS)))

    stale = []
    for p in STALE_PROXIES:
        for name in STALE:
            stale.append(f"| {p} | {name} | " + " | ".join(cell(get(d, "stale", name, p, refresh_ms=t)) for t in REFRESH_MS) + " |")
    st = lambda name, t, p=1: get(d, "stale", name, p, refresh_ms=t)["mean_ms"]  # noqa: E731

    hl, hp, vn = v88["hunt over least"], v88["hunt over P2C"], v88[NEW]
    mixed_new = "; ".join(
        f"{fleet}: " + ", ".join(
            f"{plural(p)} {get(d, 'mixed', CAPACITY, p, fleet=fleet)['mean_ms'] / get(d, 'mixed', 'least', p, fleet=fleet)['mean_ms']:.2f}× "
            f"least-request's mean, {get(d, 'mixed', CAPACITY, p, fleet=fleet)['p99_ms'] / get(d, 'mixed', 'least', p, fleet=fleet)['p99_ms']:.2f}× its p99, "
            f"{get(d, 'mixed', CAPACITY, p, fleet=fleet)['rejected_total']:.0f} rejections"
            for p in MIXED_PROXIES) for fleet in FLEETS)
    sr3 = v88["hunt over least, SR_3"]
    from_hl, from_hp = wins_from(hl), wins_from(hp)
    holders = [k for k, v in v88.items() if v["holds"]]
    rr88 = get(d, "main", "hunt, random offer", 1)
    # The best mean of every setting tried at CEILING_PROXIES, against least-request's and JSQ's.
    cp = CEILING_PROXIES
    tried = [(name, get(d, "main", name, cp)) for name in MAIN if name != "JSQ"] + [(name, get(d, "variant", name, cp)) for name in VARIANTS]
    best_name, best_pt = min(tried, key=lambda x: x[1]["mean_ms"])
    least_cp, jsq_cp = get(d, "main", "least", cp)["mean_ms"], get(d, "main", "JSQ", cp)["mean_ms"]
    ceiling = render("simulation-proxies.ceiling", {
        "proxies": plural(cp),
        "best_name": best_name,
        "best_mean": f"{best_pt['mean_ms']:.1f}",
        "best_of_least": f"{best_pt['mean_ms'] / least_cp:.2f}",
        "least_mean": f"{least_cp:.1f}",
        "shipped": NEW,
        "shipped_of_least": f"{get(d, 'main', NEW, cp)['mean_ms'] / least_cp:.2f}",
        "feedback_of_least": f"{get(d, 'variant', 'least, load feedback', cp)['mean_ms'] / least_cp:.2f}",
        "jsq_of_least": f"{jsq_cp / least_cp:.2f}",
        "reach": "within" if best_pt["mean_ms"] <= 0.85 * least_cp else "beyond",
    }, part=True)
    fwd = [x for x in d["points"] if x["section"] == "forward" and x.get("fleet_delay_ms") == 0.2 and x["name"] == SHIPPED_FORWARD
           and x["proxies"] == cp]
    if fwd:
        ceiling += render("simulation-proxies.ceiling-tier", {"tier_of_least": f"{fwd[0]['mean_ms'] / least_cp:.2f}"}, part=True)
    sr3_note = render("simulation-proxies.sr3", {
        "closest": tightest(sr3, n),
        "worst_06": f"{worst(verdicts[0.6]['hunt over least, SR_3']):.1%}",
        "worst_095": f"{worst(verdicts[0.95]['hunt over least, SR_3']):.1%}",
    }, part=True) if sr3["holds"] else ""
    png = "![mean and p99 vs proxies](simulation-proxies.png)\n\n" if d.get("plot") else ""
    return render("simulation-proxies", {
        "n": n,
        "requests": d["requests"],
        "seconds": f"{d['seconds']:.0f}",
        "machine": d["machine"],
        "backlog": BACKLOG,
        "mean_ms": MEAN_MS,
        "seeds": ", ".join(map(str, d["seeds"])),
        "new_meets": "meets" if vn["holds"] else "does not meet",
        "new_how": "closest: " + tightest(vn, n) if vn["holds"] else "fails at: " + fails(vn),
        "new_jsq_mean": f"{vn['jsq_mean']:.2f}",
        "new_jsq_p99": f"{vn['jsq_p99']:.2f}",
        "new_at_06": "holds" if verdicts[0.6][NEW]["holds"] else "fails at " + fails(verdicts[0.6][NEW]),
        "new_at_095": "holds" if verdicts[0.95][NEW]["holds"] else "fails at " + fails(verdicts[0.95][NEW]),
        "new_acc_1": f"{get(d, 'main', NEW, 1)['acceptance']:.2f}",
        "new_acc_64": f"{get(d, 'main', NEW, 64)['acceptance']:.2f}",
        "mixed_new": mixed_new,
        "hl_meets": "meets" if hl["holds"] else "does not meet",
        "hl_fails": fails(hl),
        "hl_every_seed": ", in every seed at 1 proxy" if hl["rows"][0]["mean_seeds"] == 0 and hl["rows"][0]["p99_seeds"] == 0 else "",
        "hl_ahead": f"from {plural(from_hl)} on" if from_hl else "at no count",
        "hl_jsq_mean": f"{hl['jsq_mean']:.2f}",
        "hl_jsq_p99": f"{hl['jsq_p99']:.2f}",
        "hl_within": "within" if max(hl["jsq_mean"], hl["jsq_p99"]) <= 1.1 else "not within",
        "hp_meets": "meets" if hp["holds"] else "does not meet",
        "hp_fails": fails(hp),
        "hp_ahead": f"from {plural(from_hp)} on" if from_hp else "at no count",
        "no_band": "No other SR_dyn band and no least-of-K meets it at every count."
        if not any(v["holds"] for k, v in v88.items() if "SR_dyn" in k or "least-of" in k) else "",
        "holders": "Of all settings tried it holds only for: " + ", ".join(holders) + "."
        if holders else "No setting tried meets it at every count.",
        "sr3": sr3_note,
        "ceiling": ceiling,
        "png": png,
        "table_088": table(0.88),
        "table_06": table(0.6),
        "table_095": table(0.95),
        "proxies_heads": " | ".join(str(p) for p in PROXIES),
        "proxies_aligns": "---:|" * len(PROXIES),
        "verdict_rows": "\n".join(vrows),
        "seeds_note": seeds_note or "no failures",
        "other_rows": "\n".join(other),
        "variant_rows": "\n".join(var_rows),
        "mixed_cores": ", ".join(map(str, MIXED_CORES)),
        "mixed_heads": " | rejected | ".join(plural(p) for p in MIXED_PROXIES),
        "mixed_aligns": "---:|---:|" * len(MIXED_PROXIES),
        "mixed_rows": "\n".join(mixed),
        "mixed_counts": ", ".join(plural(p) for p in MIXED_PROXIES),
        "mixed_vs_rows": "\n".join(mixed_vs),
        "pin_mean": f"{pin['mean_ms']:.0f}",
        "pin_rejected": f"{pin['rejected']:.0f}",
        "stale_heads": " | ".join("live" if t == 0 else f"T = {t} ms" for t in REFRESH_MS),
        "stale_aligns": "---:|" * len(REFRESH_MS),
        "stale_rows": "\n".join(stale),
        "least_10": f"{st('least', 10):.1f}",
        "least_live": f"{st('least', 0):.1f}",
        "hl_10": f"{st('hunt over least', 10):.1f}",
        "hl3_10": f"{st('hunt over least-of-3', 10):.1f}",
        "hl3_50": f"{st('hunt over least-of-3', 50):.1f}",
        "hl_50": f"{st('hunt over least', 50):.1f}",
        "hp_100": f"{st('hunt over P2C', 100):.1f}",
        "random_offer": cell(rr88),
        "forward_section": forward_section(d),
    }, shown=shown_in(d))


def forward_section(d: dict) -> str:
    if not any(x["section"] == "forward" and "fleet_delay_ms" in x for x in d["points"]):
        return ""
    rows = []
    for p in FORWARD_PROXIES:
        least = get(d, "main", "least", p)["mean_ms"]
        for name in FORWARD:
            xs = [get(d, "forward", name, p, fleet_delay_ms=t) for t in FORWARD_DELAY_MS]
            rows.append(f"| {p} | {name} | " + " | ".join(f"{x['mean_ms'] / least:.2f}× ({x['acceptance']:.2f})" for x in xs) + " |")
    at = lambda t: get(d, "forward", SHIPPED_FORWARD, CEILING_PROXIES, fleet_delay_ms=t)["mean_ms"] / \
        get(d, "main", "least", CEILING_PROXIES)["mean_ms"]  # noqa: E731
    one = lambda t: get(d, "forward", SHIPPED_FORWARD, 1, fleet_delay_ms=t)["mean_ms"] / \
        get(d, "main", "least", 1)["mean_ms"]  # noqa: E731
    unseen = lambda t: get(d, "forward", "forward to the least, slack 0", 1, fleet_delay_ms=t)["mean_ms"] / \
        get(d, "main", "least", 1)["mean_ms"]  # noqa: E731
    return render("simulation-proxies.forward", {
        "delay_heads": " | ".join("D = 0" if t == 0 else f"D = {t:g} ms" for t in FORWARD_DELAY_MS),
        "delay_aligns": "---:|" * len(FORWARD_DELAY_MS),
        "rows": "\n".join(rows),
        "proxies": plural(CEILING_PROXIES),
        "at_02": f"{at(0.2):.2f}",
        "at_0": f"{at(0):.2f}",
        "at_1": f"{at(1):.2f}",
        "at_5": f"{at(5):.2f}",
        "one_02": f"{one(0.2):.2f}",
        "unseen_1": f"{unseen(1):.2f}",
    }, part=True)


def plot(d: dict) -> bool:
    """Mean and p99 vs proxies at each ρ, to docs/results/simulation-proxies.png; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        print("matplotlib not importable: no plot", flush=True)
        return False
    from matplotlib import ticker
    fig, axes = plt.subplots(2, len(RHOS), figsize=(5 * len(RHOS), 7), sharex=True, squeeze=False)
    for col, rho in enumerate(RHOS):
        for name in MAIN:
            for row, m in enumerate(("mean_ms", "p99_ms")):
                ys = [get(d, "main", name, p, rho)[m] for p in PROXIES]
                color, ls = STYLE[name]
                axes[row][col].plot(PROXIES, ys, ls, color=color, marker="o", ms=3, label=name)
        axes[0][col].set_title(f"ρ = {rho}")
        for row, lab in enumerate(("mean (ms, log)", "p99 (ms, log)")):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            ax.set_xticks(PROXIES, [str(p) for p in PROXIES])
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
            ax.tick_params(axis="y", which="minor", labelsize=7)
            ax.grid(True, which="both", alpha=0.3)
            if col == 0:
                ax.set_ylabel(lab)
        axes[1][col].set_xlabel("proxies")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("12 servers × 32 workers × 2 cores, exp(20 ms); medians of seeds")
    save(fig, RESULTS, "simulation-proxies.png")
    return True


if __name__ == "__main__":
    main()
