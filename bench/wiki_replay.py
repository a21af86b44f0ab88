#!/usr/bin/env python3
"""Seed 002 § VI on real MediaWiki replicas (docs/wiki.md): one Wikipedia-like day
(bench/wiki_trace.py), compressed, replayed open-loop through each strategy,
the same trace for every strategy of a repetition (paired).

  make bench-wiki            # builds, runs, writes docs/results/wiki-replay.md
  PYTHONPATH=.:bench HUNTLB_PROFILE=release .venv/bin/python bench/wiki_replay.py run [--reps 3]
  PYTHONPATH=.:bench .venv/bin/python bench/wiki_replay.py report   # re-render from bench/data/wiki-replay.json

The strategies, each a (proxy, name, fronts):
* the paper's pair through one Envoy: RR (random, no hunting) and SR_4 (offer
  to a random replica, refused at 4 busy workers, a random final), its Figures 6-8;
* the shipped fronts against each proxy's strongest least-request, through 1
  and 4 fronts: Envoy LEAST_REQUEST with a full scan against the shipped front
  with the agents' forwarding tier (FWD/full); HAProxy leastconn against
  FWD/least.

What a replica is: harness/wiki/ (its own Apache prefork with a fixed pool,
mod_php, SQLite, a CPU quota, behind huntlb-agent reading its scoreboard).
Before measuring, every worker of every replica renders pages (a fresh worker
compiles MediaWiki first; docs/wiki.md). Strategies run in the order of the
list, reversed every other repetition. Everything started is stopped at the
end, by PID, pass or fail.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import wikitrace
from benchlib.reports import RESULTS, flag, machine, read_data, write_result
from benchlib.render import render, shown_in
from benchlib.stats import ci95, median, t95
from benchlib.wikibed import POLL_MS, Bed

NAME = "wiki-replay"
# (proxy, strategy, fronts): the paper's pair first, then the shipped fronts
# against each proxy's strongest least-request at 1 and 4 fronts.
PLAN = [("envoy", "RR", 1), ("envoy", "SR_4", 1),
        ("envoy", "LR/full", 1), ("envoy", "FWD/full", 1), ("envoy", "LR/full", 4), ("envoy", "FWD/full", 4),
        ("haproxy", "leastconn", 1), ("haproxy", "FWD/least", 1), ("haproxy", "leastconn", 4), ("haproxy", "FWD/least", 4)]
# The pairs a report compares: (proxy, candidate, baseline, fronts).
PAIRS = [("envoy", "SR_4", "RR", 1),
         ("envoy", "FWD/full", "LR/full", 1), ("envoy", "FWD/full", "LR/full", 4),
         ("haproxy", "FWD/least", "leastconn", 1), ("haproxy", "FWD/least", "leastconn", 4)]
# The paper's numbers (seed 002 § VI, Figure 8 and its text): page time over the day.
PAPER = {"RR": {"p50_ms": 250, "q3_ms": 480}, "SR_4": {"p50_ms": 200, "q3_ms": 280}}
# The testbed, scaled to 2 cores (docs/results/wiki-replay.md says why).
TESTBED = {"replicas": 8, "workers": 8, "cores": 0.15, "pages": 2000, "mean_rate": 32.0, "day_seconds": 96.0,
           "peak_ratio": 2.0, "bins": 48, "warm_per_worker": 3, "load": "scoreboard"}


def key(proxy: str, name: str, fronts: int) -> str:
    return f"{proxy} {name}@{fronts}"


# --- one replay's numbers ---------------------------------------------------------------

def outcomes(requests_file: Path, trace: list[tuple[float, str]]) -> list[tuple[float, str, float, int]]:
    """(offset s, class, latency ms, status) per request, joined with the
    trace by its index (the loadgen writes `INDEX OFFSET_US LATENCY_US STATUS`)."""
    out = []
    for line in requests_file.read_text().splitlines():
        i, off, lat, status = (int(x) for x in line.split())
        out.append((off / 1e6, wikitrace.classify(trace[i][1]), lat / 1e3, status))
    return out


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile of sorted xs (nearest rank)."""
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] if xs else float("nan")


def summarize(rows: list[tuple[float, str, float, int]], rep: dict, t: dict) -> dict:
    """What a report keeps of one replay: per class median, third quartile
    and p99; client errors; the page times' CDF (percentiles 1-99) and, per bin
    of the day, the rate and the page times' deciles."""
    by = {}
    for _, k, lat, status in rows:
        if 200 <= status < 300:
            by.setdefault(k, []).append(lat)
    errors = sum(not 200 <= s < 300 for *_, s in rows)
    cls = {}
    for k, xs in by.items():
        xs.sort()
        cls[k] = {"n": len(xs), "p50_ms": round(quantile(xs, 0.5), 1), "q3_ms": round(quantile(xs, 0.75), 1),
                  "p99_ms": round(quantile(xs, 0.99), 1), "mean_ms": round(statistics.fmean(xs), 1)}
    pages = by.get("page", [])
    span = t["day_seconds"]
    bins = [[] for _ in range(t["bins"])]
    sent = [0] * t["bins"]
    for off, k, lat, status in rows:
        b = min(t["bins"] - 1, int(off / span * t["bins"]))
        sent[b] += 1
        if k == "page" and 200 <= status < 300:
            bins[b].append(lat)
    deciles = []
    for xs in bins:
        xs.sort()
        deciles.append([round(quantile(xs, q / 10), 1) for q in range(1, 10)] if xs else None)
    return {"requests": len(rows), "errors": errors, "valid": rep.get("valid", True), "invalid_reason": rep.get("invalid_reason"),
            "classes": cls, "served_by": rep.get("served_by", {}), "refused": rep.get("refused", 0),
            "forwarded": rep.get("forwarded", 0), "replica_cores": rep.get("replica_cores"),
            "cdf": [round(quantile(pages, q / 100), 1) for q in range(1, 100)],
            "samples": {"rate": [round(n / (span / t["bins"]), 2) for n in sent], "page_deciles": deciles}}


# --- the run -----------------------------------------------------------------------------

def run(a) -> int:
    t = {**TESTBED, **{k: v for k, v in vars(a).items() if k in TESTBED and v is not None}}
    plan = [p for p in PLAN if p[0] in a.proxies and (not a.only or key(*p) in a.only)]
    if not plan:
        raise SystemExit(f"wiki_replay: nothing to run (--only {a.only}; known: {', '.join(key(*p) for p in PLAN)})")
    old = None
    if a.more:
        # more days for the committed replay: same testbed, the next seeds
        old = read_data(NAME, a.out)
        if old["testbed"] != t or a.only or a.proxies != ["envoy", "haproxy"]:
            raise SystemExit("wiki_replay --more: the testbed and plan must be the committed replay's")
    first = old["reps"] if old else 0
    work = Path(tempfile.mkdtemp(prefix="huntlb-wiki-replay-"))
    started = time.monotonic()
    runs = []
    bed = Bed(work, {p[0] for p in plan}, t)
    try:
        bad = bed.warm()
        bed.set_agents("always", False)
        idle = bed.idle_cores()
        print(f"warmed every worker ({bad} failed); an idle replica uses {idle:.3f} core", flush=True)
        for rep in range(first, first + a.reps):
            trace = wikitrace.generate(t["pages"], t["mean_rate"], t["day_seconds"], seed=100 + rep, peak_ratio=t["peak_ratio"])
            tf = work / f"trace-{rep}.txt"
            tf.write_text("".join(f"{s:.3f} {p}\n" for s, p in trace))
            order = plan if rep % 2 == 0 else plan[::-1]
            for proxy, name, fronts in order:
                out = work / f"rep{rep}-{proxy}-{name.replace('/', '-')}-{fronts}.json"
                rep_json = bed.replay(proxy, name, fronts, tf, out)
                s = summarize(outcomes(out.with_suffix(".requests"), trace), rep_json, t)
                s.update(proxy=proxy, policy=name, fronts=fronts, rep=rep)
                runs.append(s)
                pg = s["classes"].get("page", {})
                used = statistics.fmean(s["replica_cores"])
                print(f"  rep {rep} {key(proxy, name, fronts):24s} replica {used:.3f} cores; pages p50 {pg.get('p50_ms')} q3 {pg.get('q3_ms')} "
                      f"p99 {pg.get('p99_ms')} ms; errors {flag(s['errors'])}; refused {s['refused']:.0f} "
                      f"forwarded {s['forwarded']:.0f}{'' if s['valid'] else '  INVALID: ' + str(s['invalid_reason'])}",
                      flush=True)
    finally:
        bed.close()
    minutes = round((time.monotonic() - started) / 60, 1)
    if old:
        old["runs"] += runs
        old["reps"] += a.reps
        old["minutes"] = round(old["minutes"] + minutes, 1)
        data = old
    else:
        data = {"testbed": t, "machine": machine(), "idle_replica_cores": round(idle, 4), "poll_ms": POLL_MS, "reps": a.reps,
                "minutes": minutes,
                "trace": {k: v for k, v in wikitrace.summarize(trace, t["pages"], t["day_seconds"]).items() if k != "rate_per_bin"},
                "runs": runs}
    write_result(NAME, data, report(data), a.out)
    if a.plot:
        plots(data, a.out)
    return 0


# --- the report --------------------------------------------------------------------------

def runs_of(data: dict, proxy: str, name: str, fronts: int) -> list[dict]:
    return [r for r in data["runs"] if (r["proxy"], r["policy"], r["fronts"]) == (proxy, name, fronts)]


def _ms(x: float) -> str:
    return f"{x:.0f}"


def table(data: dict) -> str:
    head = ("| proxy | strategy | fronts | page p50 | page q3 | page p99 | renders p50 | static p50 | refused / request "
            "| client errors | paper p50 / q3 |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    rows = []
    for proxy, name, fronts in PLAN:
        rs = runs_of(data, proxy, name, fronts)
        if not rs:
            continue
        def med(k: str, c: str = "page") -> str:
            xs = [r["classes"][c][k] for r in rs if c in r["classes"]]
            return _ms(median(xs)) if xs else "-"
        ref = median([(r["refused"] + r["forwarded"]) / max(r["requests"], 1) for r in rs])
        paper = PAPER.get(name)
        paper_cell = f"{paper['p50_ms']} / {paper['q3_ms']}" if paper else ""
        rows.append(f"| {proxy} | {name} | {fronts} | {med('p50_ms')} | {med('q3_ms')} | {med('p99_ms')} | {med('p50_ms', 'render')} "
                    f"| {med('p50_ms', 'static')} | {ref:.2f} | {flag(sum(r['errors'] for r in rs))} "
                    f"| {paper_cell} |")
    return head + "\n" + "\n".join(rows)


def ratios(data: dict) -> str:
    head = ("| proxy | candidate / baseline | fronts | page p50 | page q3 | page p99 | reps |\n"
            "|---|---|---:|---:|---:|---:|---:|")
    rows = []
    for proxy, cand, base, fronts in PAIRS:
        pairs = page_ratios(data, proxy, cand, base, fronts)
        if not pairs["p50_ms"]:
            continue
        cells = []
        for k in ("p50_ms", "q3_ms", "p99_ms"):
            rs = pairs[k]
            m, h = ci95(rs)
            cells.append(f"**{median(rs):.2f}** ({m:.2f} ± {h:.2f})" if len(rs) > 1 else f"**{m:.2f}**")
        rows.append(f"| {proxy} | {cand} / {base} | {fronts} | {' | '.join(cells)} | {len(pairs['p50_ms'])} |")
    return head + "\n" + "\n".join(rows)


def page_ratios(data: dict, proxy: str, cand: str, base: str, fronts: int) -> dict[str, list[float]]:
    """cand / base page times (p50, q3, p99) of each day both ran, in day order."""
    c, b = runs_of(data, proxy, cand, fronts), runs_of(data, proxy, base, fronts)
    pairs = [(x, y) for x in c for y in b if x["rep"] == y["rep"] and "page" in x["classes"] and "page" in y["classes"]]
    return {k: [x["classes"]["page"][k] / y["classes"]["page"][k] for x, y in pairs] for k in ("p50_ms", "q3_ms", "p99_ms")}


def pair_medians(data: dict, proxy: str, cand: str, base: str, fronts: int) -> dict | None:
    """Median over days of each page_ratios, and the p50 and p99 ranges over the days."""
    rs = page_ratios(data, proxy, cand, base, fronts)
    if not rs["p50_ms"]:
        return None
    out = {k: median(v) for k, v in rs.items()}
    for k in ("p50_ms", "p99_ms"):
        out[k.replace("_ms", "_range")] = f"{min(rs[k]):.2f}-{max(rs[k]):.2f}"
    return out


def findings(data: dict) -> str:
    """What the table says, in words with its numbers (medians of the paired ratios)."""
    out = []
    sr = pair_medians(data, "envoy", "SR_4", "RR", 1)
    if sr:
        paper = {k: PAPER["SR_4"][k] / PAPER["RR"][k] for k in ("p50_ms", "q3_ms")}
        out.append(f"* **SR_4 against RR** (the paper's pair, Envoy): page time median {sr['p50_ms']:.2f}×, third quartile "
                   f"{sr['q3_ms']:.2f}×, p99 {sr['p99_ms']:.2f}× ({sr['p99_range']} over the days; the paper: {paper['p50_ms']:.2f}× and {paper['q3_ms']:.2f}×). "
                   "As in the paper, the gain grows toward the tail and toward the day's peak (Figures 6 and 7): RR's "
                   "random picks leave some replicas queueing while others idle.")
    for proxy, cand, base in (("envoy", "FWD/full", "LR/full"), ("haproxy", "FWD/least", "leastconn")):
        one, four = (pair_medians(data, proxy, cand, base, f) for f in (1, 4))
        if one and four:
            ranges = [tuple(float(x) for x in one[k].split("-")) for k in ("p50_range", "p99_range")]
            tie = ("a tie, as by construction: the offer is {base}'s own pick" if all(lo <= 1 <= hi for lo, hi in ranges) else
                   f"not quite the tie the construction predicts (the offer is {base}'s own pick): a ratio above 1 on "
                   "every day, of a few percent. Not explained yet; guesses, untested: ties between equally loaded "
                   "replicas broken otherwise than the proxy's own (HAProxy's leastconn takes the one idle longest, "
                   "the shipped pick one at random), which matters when a replica that just worked has less of its "
                   "CPU quota left in the period; or the hunting path's own cost").replace("{base}", base)
            out.append(f"* **{proxy}, the shipped front with the tier over {base}**: one front {one['p50_ms']:.2f}× the median "
                       f"({one['p50_range']} over the days) and {one['p99_ms']:.2f}× the p99 ({one['p99_range']}): {tie}; four fronts "
                       f"{four['p50_ms']:.2f}× the median, {four['q3_ms']:.2f}× the third quartile, {four['p99_ms']:.2f}× the p99 "
                       f"({four['p99_range']} over the days).")
    return "\n".join(out)


def report(data: dict) -> str:
    t = data["testbed"]
    tr = data["trace"]
    errors = sum(r["errors"] for r in data["runs"])
    invalid = [f"{key(r['proxy'], r['policy'], r['fronts'])} rep {r['rep']}: {r['invalid_reason']}" for r in data["runs"] if not r["valid"]]
    return render(NAME, {
        "machine": data["machine"], "reps": data["reps"], "minutes": data["minutes"],
        "t95": f"{t95(data['reps'] - 1):.2f}", "df": data["reps"] - 1,
        "replicas": t["replicas"], "workers": t["workers"], "cores": t["cores"], "pages": t["pages"],
        "mean_rate": t["mean_rate"], "day_seconds": t["day_seconds"], "peak_ratio": t["peak_ratio"],
        "bin_minutes": round(24 * 60 / t["bins"]), "bin_seconds": round(t["day_seconds"] / t["bins"], 1),
        "requests": tr["requests"], "shares": ", ".join(f"{k} {v:.0%}" for k, v in tr["shares"].items()),
        "table": table(data), "ratios": ratios(data), "findings": findings(data),
        "quota_used": f"{statistics.fmean(c for r in data['runs'] for c in r['replica_cores']) / t['cores']:.0%}",
        "errors": flag(errors), "invalid": "; ".join(invalid) if invalid else "none",
    }, shown=shown_in(data))


def plots(data: dict, out: Path) -> None:
    """Figures 6 (rate and median page time over the day), 7 (deciles over
    the day, RR and SR_4) and 8 (CDF of page times over the day)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = data["testbed"]
    hours = [(b + 0.5) * 24 / t["bins"] for b in range(t["bins"])]
    shown = [(p, n, f) for p, n, f in PLAN if runs_of(data, p, n, f)]

    def per_bin(rs: list[dict], d: int) -> list[float]:
        """The median over repetitions of each bin's decile d (4: the median)."""
        out = []
        for b in range(t["bins"]):
            xs = [r["samples"]["page_deciles"][b][d] for r in rs if r["samples"]["page_deciles"][b]]
            out.append(median(xs) / 1e3 if xs else float("nan"))
        return out

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    rs0 = runs_of(data, *shown[0])
    ax1.plot(hours, [median([r["samples"]["rate"][b] for r in rs0]) for b in range(t["bins"])], color="gray")
    ax1.set_ylabel("requests/s (replay)")
    ax1.set_title(f"Figure 6: the day's request rate, and the median page time per {round(24 * 60 / t['bins'])} min")
    for p, n, f in shown:
        ax2.plot(hours, per_bin(runs_of(data, p, n, f), 4), label=key(p, n, f))
    ax2.set_ylabel("median page time (s)")
    ax2.set_xlabel("hour of the day (UTC)")
    ax2.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "wiki-replay-fig6.png", dpi=110)
    plt.close(fig)

    pair = [s for s in shown if s[1] in ("RR", "SR_4")]
    if pair:
        fig, axes = plt.subplots(1, len(pair), figsize=(11, 4), sharey=True)
        for ax, s in zip(axes if len(pair) > 1 else [axes], pair):
            rs = runs_of(data, *s)
            for d in range(9):
                ax.plot(hours, per_bin(rs, d), color="C0", alpha=0.3 + 0.07 * (4 - abs(4 - d)), lw=1.5 if d == 4 else 0.8)
            ax.set_title(f"Figure 7: page time deciles, {s[1]}")
            ax.set_xlabel("hour of the day (UTC)")
        axes[0].set_ylabel("page time (s)") if len(pair) > 1 else axes.set_ylabel("page time (s)")
        fig.tight_layout()
        fig.savefig(out / "wiki-replay-fig7.png", dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5))
    for p, n, f in shown:
        rs = runs_of(data, p, n, f)
        xs = [median([r["cdf"][q] for r in rs]) / 1e3 for q in range(99)]
        ax.plot(xs, [(q + 1) / 100 for q in range(99)], label=key(p, n, f))
    ax.set_xscale("log")
    ticks = [0.15, 0.2, 0.3, 0.5, 1, 2, 3, 5]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("page time (s), log scale")
    ax.set_ylabel("CDF")
    ax.set_title("Figure 8: page times over the whole day (median of repetitions per percentile)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "wiki-replay-fig8.png", dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="build the replicas, replay, write the report")
    r.add_argument("--reps", type=int, default=3)
    r.add_argument("--proxies", default="envoy,haproxy", type=lambda s: s.split(","))
    for k, v in TESTBED.items():
        r.add_argument(f"--{k.replace('_', '-')}", type=type(v), default=None, help=f"default {v}")
    r.add_argument("--only", type=lambda s: s.split(","), default=None,
                   help="some of the plan, e.g. 'envoy RR@1,envoy SR_4@1' (a trial; the report needs the whole plan)")
    r.add_argument("--more", action="store_true",
                   help="add --reps more days (the next seeds) to the committed replay in --out")
    r.add_argument("--out", type=Path, default=RESULTS)
    r.add_argument("--no-plot", dest="plot", action="store_false")
    p = sub.add_parser("report", help="measure nothing: render the report and plots from the data")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    if a.cmd == "run":
        if a.reps < 1:
            ap.error("--reps must be >= 1")
        return run(a)
    data = read_data(NAME, a.out)
    write_result(NAME, data, report(data), a.out)
    plots(data, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
