#!/usr/bin/env python3
"""Where the refusing HAProxy front's time goes, part by part, in CPU us per request.

front.cfg (the offer-and-retry front) at N servers with one part taken out at
a time, beside plain (the same file with HUNTLB_OFF=1) and the committed front,
as bench/front_scaling.py measures them: one HAProxy worker pinned to CPU 0, a
static responder and wrk (-c32, 1 s a run) on CPU 1, health checks every 10 s,
the variants in turn (reverse order every other repetition). A part's cost is
the committed front's CPU per request minus the variant's, per repetition
(side by side), then their median with its 95% CI. bench/haproxy_ablation.py
counts the same parts in instructions at 3 servers; this prices them in time,
at any number of servers, where the pick's rules grow.

Usage (after `make release` and `make bench-setup`; under the bench lock):
  PYTHONPATH=.:bench .venv/bin/python bench/refusing_ablation.py --servers 3,128 --reps 12 [--json F]
  .venv/bin/python bench/refusing_ablation.py --report F.json    (measure nothing: the tables)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from benchlib.fronts import MEASURED, changes, overhead_bed, pin, slow_checks
from benchlib.reports import write_json
from benchlib.stats import median, median_ci95, paired_ratio
from benchlib.tools import REQUESTS, paired_wrk, wrk_errors
from harness import random_offer, start_front


def drop(*words: str):
    """An edit taking out every line holding one of `words`."""
    return lambda t: "\n".join(l for l in t.splitlines() if not any(w in l for w in words)) + "\n"


def state_first(text: str) -> str:
    """The pick rules with the state test first (their form before): every
    server then costs both conditions, not only each new least."""
    return re.sub(r"if (\{ .*? lt 0 \}) (\{ srv_is_up\([^)]*\) \})$", r"if \2 \1", text, flags=re.M)


PICK = ("txn.hunt_r", "txn.hunt_best", "txn.hunt_k", "set-var(txn.hunt_offer)", "set-var(txn.hunt_seen)")
# (variant, what it takes out of the committed front or puts in instead, the edit)
VARIANTS = {
    "- the offer": ("the pick block, hunt_n, the big-body check, both offer headers, use-server",
                    drop(*PICK, "hunt_offer", "txn.hunt_n", "hunt_big_body")),
    "- pick rules": ("the per-server rules only (no offer results: headers and use-server skipped by their conditions)",
                     drop("srv_conn(")),
    "- retry-on 425": ("425 from retry-on: no L7 retry, so no copy of the request",
                       lambda t: t.replace("retry-on conn-failure 425", "retry-on conn-failure")),
    "- send-name-header": ("http-send-name-header hunt-target", drop("http-send-name-header")),
    "- request del-header": ("http-request del-header hunt -m beg", drop("http-request del-header hunt")),
    "- offer headers": ("add-header hunt-offer, add-header hunt-seen", drop("add-header hunt-offer", "add-header hunt-seen")),
    "- response rules": ("the five http-response lines", drop("http-response ")),
    "- http-buffer-request": ("option http-buffer-request (in plain too)", drop("option http-buffer-request")),
    # plain with one part put in: what that part costs alone (its "saves" column
    # is then the committed front's cost beyond it)
    "plain + retry-on 425": ("plain with 425 in retry-on: the L7 retry's copy of each request and nothing else",
                             lambda t: t.replace("    retry-on conn-failure\n", "    retry-on conn-failure 425\n", 1)),
    # global tunings, in plain and hunting alike (their "plain +" twin is the
    # baseline): the retry's copy is a whole tune.bufsize buffer, and HAProxy's
    # per-thread cache of freed buffers (512 KB) is smaller than 32 streams'
    "bufsize 8192": ("tune.bufsize 8192 (half the copy; requests and buffered bodies limited to 8 KB)",
                     lambda t: t.replace("\nglobal\n", "\nglobal\n    tune.bufsize 8192\n", 1)),
    "plain + bufsize 8192": ("plain with tune.bufsize 8192",
                             lambda t: t.replace("\nglobal\n", "\nglobal\n    tune.bufsize 8192\n", 1)),
    "hot-size 4m": ("tune.memory.hot-size 4194304 (HAProxy 3.0; 2.6 has it fixed at 512 KB)",
                    lambda t: t.replace("\nglobal\n", "\nglobal\n    tune.memory.hot-size 4194304\n", 1)),
    "plain + hot-size 4m": ("plain with tune.memory.hot-size 4194304",
                            lambda t: t.replace("\nglobal\n", "\nglobal\n    tune.memory.hot-size 4194304\n", 1)),
    "state first": ("each pick rule's conditions the other way round: the server's state first (the first run's "
                    "committed front, where this variant was the key first: `swapped pick`)", state_first),
}


def table(d: dict) -> str:
    """Per server count: each variant's CPU per request, what the part saves
    (committed - variant, paired), and req/s against plain."""
    out = []
    for n, runs in d["runs"].items():
        for kind in REQUESTS:
            key = lambda v: f"{v}, {kind}"  # noqa: E731
            if key("hunting") not in runs:
                continue
            hunt, plain = runs[key("hunting")], runs[key("plain")]
            cpu = lambda v: median([r["cpu_us_per_req"] for r in runs[key(v)]])  # noqa: E731
            out += [f"\n{n} servers, {kind} (CPU us/request, median of {len(hunt)} paired repetitions)\n",
                    "| variant | CPU us/req | committed - variant, us/req (95% CI) | req/s / plain (95% CI) | client errors |",
                    "|---|---|---|---|---|"]
            for v in runs:
                if not v.endswith(f", {kind}"):
                    continue
                v = v.rsplit(", ", 1)[0]
                diffs = [a["cpu_us_per_req"] - b["cpu_us_per_req"] for a, b in zip(hunt, runs[key(v)])]
                lo, hi = median_ci95(diffs)
                pr = paired_ratio(runs[key(v)], plain)
                saves = "" if v in ("hunting", "plain") else f"{median(diffs):+.2f} ({lo:+.2f} to {hi:+.2f})"
                if v == "plain":
                    saves = f"{median(diffs):+.2f} ({lo:+.2f} to {hi:+.2f}): hunting's whole cost"
                out.append(f"| {v} | {cpu(v):.2f} | {saves} | {pr['median']:.3f} ({pr['median_ci95'][0]:.3f}-{pr['median_ci95'][1]:.3f}) "
                           f"| {wrk_errors(runs[key(v)]) or 'none'} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--seconds", type=int, default=1)
    ap.add_argument("--servers", default="3,128")
    ap.add_argument("--kinds", default="bare", help="bare, browser-like or both (comma-separated)")
    ap.add_argument("--variants", help="comma-separated subset of the variants (default: all)")
    ap.add_argument("--haproxy", default="2.6", choices=["2.6", "3.0"])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--report", type=Path, metavar="JSON", help="measure nothing: print the tables of this run")
    a = ap.parse_args()
    if a.report:
        print(table(json.loads(a.report.read_text())), end="")
        return 0
    variants = {"random offer": ("the pick replaced by the paper's random offer (a map lookup: O(1))", None)}
    variants.update(VARIANTS)
    if a.variants:
        keep = a.variants.split(",")
        bad = [v for v in keep if v not in variants]
        if bad:
            raise SystemExit(f"--variants: unknown {bad}; known: {list(variants)}")
        variants = {k: v for k, v in variants.items() if k in keep}
    # tune.memory.hot-size is HAProxy 3.0's: 2.6 refuses the config (its size is fixed)
    needs_30 = [v for v in variants if "hot-size" in v]
    if a.haproxy == "2.6" and needs_30:
        if a.variants:
            raise SystemExit(f"--variants: {needs_30} need --haproxy 3.0 (tune.memory.hot-size)")
        print(f"HAProxy 2.6: leaving out {needs_30} (tune.memory.hot-size is 3.0's)", file=sys.stderr)
        variants = {k: v for k, v in variants.items() if k not in needs_30}
    kinds = {k: REQUESTS[k] for k in a.kinds.split(",")}
    counts = [int(x) for x in a.servers.split(",")]
    out = {"proxy": f"haproxy {a.haproxy}", "reps": a.reps, "seconds": a.seconds,
           "variants": {k: v[0] for k, v in variants.items()}, "runs": {}}
    with overhead_bed("huntlb-refusing-ablation-", a.haproxy, max(counts)) as bed:
        procs, addrs, hr, backends = bed.procs, bed.addrs, bed.hr, bed.backends
        for n in counts:
            fronts = {}
            for name, hunting, edit in ([("plain", False, None), ("hunting", True, None)]
                                        + [(v, True, changes(v, how) if how else None) for v, (_, how) in variants.items()]):
                if name == "random offer":
                    edit = lambda t: random_offer(hr, t)  # noqa: E731
                hunting = hunting and not name.startswith("plain +")
                fr = start_front("haproxy", procs, addrs, backends[:n], hunting, hr=hr, served_by=False, threads=1,
                                 name=f"{re.sub(r'[^a-z0-9]+', '-', name).strip('-')}-{n}", example="front.cfg",
                                 edit=slow_checks("haproxy", edit), **MEASURED)
                pin(fr.pid, 0)
                fronts[name] = fr
            runs = paired_wrk(fronts, kinds, a.reps, a.seconds,
                              lambda rep: print(f"{n} servers: repetition {rep + 1}/{a.reps}", flush=True))
            for fr in fronts.values():
                fr.proc.stop()
            out["runs"][str(n)] = runs
            print(table({"runs": {str(n): runs}}), flush=True)
    write_json(a.json, json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
