#!/usr/bin/env python3
"""Where the HAProxy hunting front's cost goes in time: perf profiles, side by side.

Instruction counts (bench/haproxy_ablation.py) are exact but blind to the
cache: the front's first design drew its candidate from a map of 840 fixed
slots, as many instructions as the random pick that followed, yet it cost more
time. This profiles, with `perf record -e cpu-clock` (a timer: no hardware
counters needed), four fronts pinned to CPU 0 under wrk (static backends and wrk
on CPU 1), in turn and in reverse order every other repetition:

  plain         every hunting line out
  hunting       the committed front.cfg (the least-loaded pick, one rule per server)
  random-offer  the paper's random offer (harness.random_offer: rand,mod(nbsrv) over a map of n keys)
  slots-840     that with the first design's pick: rand(840) over 840 keys

First, without perf, req/s and HAProxy CPU per request of the three, paired
per repetition (--pair-reps runs of 1 s each: short, so that the variants
alternate faster than this VM's speed drifts). Then perf: CPU time per request
of the functions that differ most, as the median over repetitions (samples /
sampling rate / requests served).

Usage: python3 bench/haproxy_profile.py [--pair-reps 40] [--reps 6] [--seconds 3]   (needs perf)
Writes docs/results/haproxy-profile.md and bench/data/haproxy-profile.json (perf's
per-symbol tables in haproxy-profile.bulk.json.gz).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

from benchlib.fronts import BACKENDS, overhead_bed, pin
from benchlib.render import render, shown_in
from benchlib.reports import machine, parse_or_rewrite, write_result
from benchlib.stats import median, paired_ratio
from benchlib.tools import proc_cpu_seconds, wrk
from harness import HaproxyRoot, random_offer

HZ = 4999
LOOKUP = ("haproxy:ebst_lookup", "haproxy:pat_match_str")


def slots_840(hr: HaproxyRoot):
    """An edit giving a front the first design's pick: rand(840) over 840 slots,
    slot i naming server i mod n."""
    def edit(text: str) -> str:
        text = random_offer(hr, text)
        names = re.findall(r"^\s*server (\S+) ", text, flags=re.M)
        big = hr.dir / "slots-840.map"
        big.write_text("".join(f"{i} {names[i % len(names)]}\n" for i in range(840)))
        new = re.sub(r"rand,mod\(txn\.hunt_n\),map_str\(.*$", f"rand(840),map_str({hr.inside(big)}) unless hunt_big_body",
                     text, count=1, flags=re.M)
        if new == text:
            raise RuntimeError("front.cfg's pick line changed: update slots_840")
        return new
    return edit


def profile(perf_data: Path) -> dict[str, int]:
    """samples per dso:symbol."""
    out = subprocess.run(["perf", "report", "-i", str(perf_data), "--no-children", "--sort", "dso,symbol", "--stdio",
                          "-F", "sample,dso,sym"], capture_output=True, text=True, check=True).stdout
    counts: dict[str, int] = defaultdict(int)
    for line in out.splitlines():
        f = line.split()
        if len(f) < 4 or line.startswith("#") or not f[0].isdigit():
            continue
        counts[f"{f[1]}:{f[3]}"] += int(f[0])
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair-reps", type=int, default=40, help="paired 1-s runs for req/s and CPU per request")
    ap.add_argument("--reps", type=int, default=6, help="profiled runs per variant")
    ap.add_argument("--seconds", type=int, default=3)
    a = parse_or_rewrite(ap, {"haproxy-profile": report})
    if a is None:
        return
    if not shutil.which("perf"):
        raise SystemExit("perf missing (Debian: linux-perf)")
    us = defaultdict(lambda: defaultdict(list))  # variant -> symbol -> [us per request]
    rps = defaultdict(list)
    pairs = defaultdict(list)  # variant -> [{"rps", "cpu_us_per_req"}]
    with overhead_bed("huntlb-profile-") as bed:
        work = bed.work
        fronts = {}
        for name, hunting, edit in (("plain", False, None), ("hunting", True, None),
                                    ("random-offer", True, lambda t: random_offer(bed.hr, t)), ("slots-840", True, slots_840(bed.hr))):
            fronts[name] = bed.front("haproxy", hunting, f"profile-{name}", edit=edit)
            pin(fronts[name].pid, 0)
        for rep in range(a.pair_reps):
            order = list(fronts.items())
            if rep % 2:
                order.reverse()
            for name, f in order:
                c0 = proc_cpu_seconds(f.pid)
                r = wrk(f.url, 32, 1)
                r["cpu_us_per_req"] = (proc_cpu_seconds(f.pid) - c0) / max(r["rps"], 1) * 1e6
                pairs[name].append(r)
        print(f"paired runs: {a.pair_reps} x {len(fronts)} done", flush=True)
        for rep in range(a.reps):
            order = list(fronts.items())
            if rep % 2:
                order.reverse()
            for name, f in order:
                data = work / f"{name}-{rep}.perf"
                perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(HZ), "-o", str(data),
                                         "-p", str(f.pid), "--", "sleep", str(a.seconds)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                r = wrk(f.url, 32, a.seconds)
                perf.wait(timeout=a.seconds + 30)
                if r["non2xx"] or r["socket_errors"]:
                    raise RuntimeError(f"{name}: {r['non2xx']} non-2xx, {r['socket_errors']} socket errors")
                rps[name].append(r["rps"])
                for sym, n in profile(data).items():
                    us[name][sym].append(n / HZ / (r["rps"] * a.seconds) * 1e6)
            print(f"profile rep {rep + 1}/{a.reps}: " + ", ".join(f"{n}: {rps[n][-1]:.0f} req/s" for n in fronts), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    data = {"machine": machine(), "pair_reps": a.pair_reps, "pairs": pairs, "reps": a.reps, "seconds": a.seconds, "hz": HZ,
            "rps": rps, "us_per_request": {n: dict(v) for n, v in us.items()}}
    md = report(data)
    write_result("haproxy-profile", data, md)
    print(md)


def report(data: dict) -> str:
    """The report, from the data main wrote (or the committed data: `--report-only`)."""
    us, rps, pairs, reps = data["us_per_request"], data["rps"], data["pairs"], data["reps"]
    fronts = list(pairs)

    def per_req(name: str, sym: str) -> float:
        xs = us[name].get(sym, [])
        return median(xs + [0.0] * (reps - len(xs)))

    def group(name: str, pred) -> float:
        return sum(per_req(name, s) for s in us[name] if pred(s))

    user = lambda s: not s.startswith("[kernel")  # noqa: E731
    lookup = {n: sum(per_req(n, s) for s in LOOKUP) for n in fronts}
    syms = {s for n in fronts for s in us[n] if user(s)}
    top = sorted(syms, key=lambda s: per_req("hunting", s) - per_req("plain", s), reverse=True)[:15]
    rows = [f"| `{s}` | {per_req('plain', s):.3f} | {per_req('hunting', s):.3f} | {per_req('random-offer', s):.3f} | "
            f"{per_req('slots-840', s):.3f} |" for s in top]
    ratio_rows = []
    for num, den in (("hunting", "plain"), ("random-offer", "plain"), ("slots-840", "plain"), ("hunting", "random-offer"),
                     ("random-offer", "slots-840")):
        r, c = paired_ratio(pairs[num], pairs[den]), paired_ratio(pairs[num], pairs[den], key="cpu_us_per_req")
        ratio_rows.append(f"| {num} / {den} | **{r['median']:.3f}** ({r['median_ci95'][0]:.3f}-{r['median_ci95'][1]:.3f}) "
                          f"| {r['mean']:.3f} ± {r['ci95']:.3f} | {c['median']:.3f} ({c['median_ci95'][0]:.3f}-{c['median_ci95'][1]:.3f}) |")
    cpu = {n: median([r["cpu_us_per_req"] for r in pairs[n]]) for n in fronts}
    return render("haproxy-profile", {
        "machine": data["machine"],
        "backends": BACKENDS,
        "hz": data["hz"],
        "reps": reps,
        "seconds": data["seconds"],
        "lookup_random": f"{lookup['random-offer']:.2f}",
        "lookup_slots": f"{lookup['slots-840']:.2f}",
        "user_plain": f"{group('plain', user):.2f}",
        "user_hunting": f"{group('hunting', user):.2f}",
        "user_random": f"{group('random-offer', user):.2f}",
        "user_slots": f"{group('slots-840', user):.2f}",
        "kernel": ", ".join(f"{group(n, lambda s: not user(s)):.2f}" for n in fronts),
        "rps": ", ".join(f"{n} {median(rps[n]):.0f}" for n in fronts),
        "pair_reps": data["pair_reps"],
        "cpu": ", ".join(f"{n} {cpu[n]:.1f}" for n in fronts),
        "ratio_rows": "\n".join(ratio_rows),
        "rows": "\n".join(rows),
    }, shown=shown_in(data))


if __name__ == "__main__":
    main()
