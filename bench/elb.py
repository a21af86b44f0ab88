#!/usr/bin/env python3
"""Scenario 4: the ELB benchmark categories (seed 001), through the real proxies.

* gain/loss: served req/s and latency straight to the agents vs through each
  hunting front, offered rate swept in powers of two (tiny page: the proxy's
  cost, not the apps', is what shows).
* agility: 8 backends with 1, 1, 2, 2, 4, 4, 8, 8 emulated cores at 70% of their
  total capacity: does traffic follow capacity? RR vs SR_4 vs SR_dyn vs least-request.
* fairness: Jain's index of busy workers over the 12 homogeneous backends of the
  SRLB sweep at ρ = 0.88 (read from bench/data/srlb-poisson.json).
* convergence: 4 backends under steady load; one is killed (SIGKILL, app and
  agent) every 5 s down to one, then restored one every 5 s. Per-backend
  throughput over time, client errors, and how long the front took to mark each
  one down and back up (health checks: 0.5 s interval, 2 failures / 2 successes).

Usage: python3 bench/elb.py [--quick | --report-only | --only agility | --only agility-paired --reps N [--append]]
       Writes docs/results/elb.{md,png} and bench/data/elb.json.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from benchlib import plots
from benchlib.fleet import STRATEGIES, Fleet, Sampler, drive, summary
from benchlib.render import render, shown_in
from benchlib.reports import RESULTS, data_path, flag, machine, read_data, write_result
from benchlib.runs import load, select
from benchlib.stats import jain, paired_ratio
from harness import Addrs, HaproxyRoot, Procs, wait_all_up

PROXIES = ("envoy", "haproxy")
LEAST = {"envoy": "LEAST_REQUEST", "haproxy": "leastconn"}


def gain_loss(work: Path, quick: bool) -> dict:
    procs, addrs = Procs(work), Addrs()
    hr = HaproxyRoot("2.6")
    try:
        fleet = Fleet(procs, addrs, [1000.0] * 4, workers=1000, backlog=10000, mean_ms=0.0001, policy="dynamic")
        fleet.start()
        paths = {"direct to agents": [f"http://{b.agent}/" for b in fleet.backends]}
        for proxy in PROXIES:
            paths[f"via {proxy} hunting"] = [fleet.front(proxy, *STRATEGIES[proxy]["hunt"], hr, name="gain").url]
        rates = [256, 512, 1024, 2048, 4096] if quick else [256, 512, 1024, 2048, 4096, 8192, 16384]
        curves, points = {k: [] for k in paths}, []
        for rate in rates:
            for name, urls in paths.items():
                rep = summary(drive(urls, rate, 3.0, work / f"gain-{rate}-{len(points)}.json", seed=rate), must_keep_up=False)
                points.append({"path": name, "rate": rate, **{k: rep[k] for k in ("achieved_rate", "completed", "errors",
                                                                                    "p50_ms", "p99_ms", "valid")}})
                if rep["valid"]:
                    curves[name].append((rate, rep["completed"] / 3.0))
                print(f"  gain/loss {name:20s} {rate:6d}/s: served {rep['completed'] / 3.0:8.0f}/s p50 {rep['p50_ms']:.2f} ms"
                      f"{'' if rep['valid'] else '  (generator fell behind: not a result)'}", flush=True)
        return {"curves": curves, "points": points}
    finally:
        procs.stop_all()
        hr.cleanup()


AGILITY_CORES = [1, 1, 2, 2, 4, 4, 8, 8]


def agility_fleet(procs: Procs, addrs: Addrs) -> tuple[Fleet, float]:
    """The mixed fleet (exp(10 ms) jobs) and its rate, 70% of its capacity."""
    fleet = Fleet(procs, addrs, [float(c) for c in AGILITY_CORES], mean_ms=10.0, policy="dynamic").start()
    return fleet, 0.7 * fleet.capacity


def agility(work: Path, quick: bool) -> dict:
    procs, addrs = Procs(work), Addrs()
    hr = HaproxyRoot("2.6")
    cores = AGILITY_CORES
    try:
        fleet, rate = agility_fleet(procs, addrs)
        seconds = 5.0 if quick else 10.0
        shares, runs = {}, []
        for proxy in PROXIES:
            # hunting over the proxy's own pick, each agent's c_min at its cores
            # (so traffic follows capacity on the mixed fleet; HAProxy adds hunt-seen, seen_margin 1)
            # Envoy's strongest least-request too (FULL_SCAN): compare with the best
            stronger = [("LR/full", "LR/full", None)] if proxy == "envoy" else []
            for name, strategy, policy in (("RR", "RR", None), ("SR_4", "hunt", "static:4"), ("SR_dyn", "hunt", "dynamic"),
                                           (LEAST[proxy], LEAST[proxy], None), *stronger,
                                           ("SR_cores/own", "hunt/own", "dynamic:seen_margin=1,c_min={cores}")):
                if policy:
                    fleet.set_policy(policy)
                f = fleet.front(proxy, *STRATEGIES[proxy][strategy], hr, name=f"agility-{strategy}".replace("(", "").replace(")", "").replace("/", "-"))
                wait_all_up(f, len(cores))
                before = fleet.stats()
                rep = summary(drive([f.url], rate, seconds, work / f"agility-{proxy}-{name.replace('/', '-')}.json", max_lateness_us=2500))
                after = fleet.stats()
                served = [a["served"] - b["served"] for a, b in zip(after, before)]
                rejected = sum(a["backlog_rejected"] - b["backlog_rejected"] for a, b in zip(after, before))
                share = [s / max(sum(served), 1) for s in served]
                shares[f"{proxy} {name}"] = share
                runs.append({"proxy": proxy, "policy": name, "served": served, "backlog_rejected": rejected,
                             **{k: rep[k] for k in ("mean_ms", "p50_ms", "p99_ms", "errors", "valid")}})
                print(f"  agility {proxy:7s} {name:13s}: mean {rep['mean_ms']:7.1f} ms p99 {rep['p99_ms']:8.1f} errors {flag(rep['errors'])}"
                      f" shares {' '.join(f'{x:.2f}' for x in share)}", flush=True)
        return {"cores": cores, "rate": rate, "seconds": seconds, "shares": shares, "runs": runs}
    finally:
        procs.stop_all()
        hr.cleanup()


# The agility bar (p99 <= least-request's on the 1-8 core fleet) compares two 10 s runs'
# tails, a few hundred requests each: one run apart is noise. Paired: per
# repetition, the proxy's strongest least-request and its shipped hunting front
# back to back (order reversed every other one), ratios of the pair.
STRONGEST = {"envoy": ("LR/full", "LR/full", None), "haproxy": ("leastconn", "leastconn", None)}
OWN = ("SR_cores/own", "hunt/own", "dynamic:seen_margin=1,c_min={cores}")


def agility_paired(work: Path, reps: int, first: int = 0) -> dict:
    """`reps` paired repetitions, numbered from `first` (to add to earlier ones)."""
    procs, addrs = Procs(work), Addrs()
    hr = HaproxyRoot("2.6")
    cores = AGILITY_CORES
    try:
        fleet, rate = agility_fleet(procs, addrs)
        seconds = 10.0
        runs = []
        for rep in range(first, first + reps):
            for proxy in PROXIES:
                pair = (STRONGEST[proxy], OWN) if rep % 2 == 0 else (OWN, STRONGEST[proxy])
                for name, strategy, policy in pair:
                    fleet.set_policy(policy or "dynamic")
                    f = fleet.front(proxy, *STRATEGIES[proxy][strategy], hr,
                                    name=f"agp-{strategy}".replace("(", "").replace(")", "").replace("/", "-"))
                    wait_all_up(f, len(cores))
                    before, refused = fleet.stats(), fleet.refused()
                    rep_ = summary(drive([f.url], rate, seconds, work / f"agp-{rep}-{proxy}-{name.replace('/', '-')}.json",
                                         seed=1000 + rep, max_lateness_us=2500, work=f"exp:{fleet.mean_ms}"))
                    after = fleet.stats()
                    rejected = sum(a["backlog_rejected"] - b["backlog_rejected"] for a, b in zip(after, before))
                    refused = fleet.refused() - refused
                    f.proc.stop()
                    runs.append({"rep": rep, "proxy": proxy, "policy": name, "backlog_rejected": rejected, "refused": refused,
                                 **{k: rep_[k] for k in ("mean_ms", "p99_ms", "errors", "valid")}})
                    print(f"  agility pair {rep} {proxy:7s} {name:13s}: mean {rep_['mean_ms']:6.1f} ms p99 {rep_['p99_ms']:7.1f}"
                          f" rejected {rejected} refused {refused:.0f} errors {flag(rep_['errors'])}", flush=True)
        return {"cores": cores, "rate": rate, "seconds": seconds, "reps": first + reps, "runs": runs}
    finally:
        procs.stop_all()
        hr.cleanup()


def agility_paired_report(p: dict, shown: dict | None = None) -> str:
    rows = []
    for proxy in PROXIES:
        base, own = STRONGEST[proxy][0], OWN[0]
        ok = {(r["rep"], r["policy"]): r for r in p["runs"] if r["proxy"] == proxy and r["valid"] and not r["errors"]}
        pairs = [(ok[(k, own)], ok[(k, base)]) for k in range(p["reps"]) if (k, own) in ok and (k, base) in ok]
        rej = {n: sum(r["backlog_rejected"] for r in p["runs"] if r["proxy"] == proxy and r["policy"] == n) for n in (base, own)}
        errs = sum(r["errors"] for r in p["runs"] if r["proxy"] == proxy)
        refused = sum(r.get("refused", 0) for r in p["runs"] if r["proxy"] == proxy and r["policy"] == own)
        for key in ("mean_ms", "p99_ms"):
            s = paired_ratio([a for a, _ in pairs], [b for _, b in pairs], key)
            lo, hi = s["median_ci95"]
            rows.append(f"| {proxy} | {own} / {base} | {key[:-3]} | **{s['median']:.3f}** ({lo:.3f}-{hi:.3f}) | "
                        f"{s['mean']:.3f} ± {s['ci95']:.3f} | {len(pairs)} | {rej[own]} / {rej[base]} | {refused:.0f} | {flag(errs)} |")
    return render("elb.agility-paired", {"reps": p["reps"], "rows": "\n".join(rows)}, shown=shown)


def fairness() -> dict | None:
    path = data_path("srlb-poisson")
    if not path.exists():
        return None
    out = {}
    for r in select(load(path)["runs"], rho=0.88, instances=1, valid=True):
        if r.fairness is not None:
            out.setdefault(f"{r.proxy} {r.policy}", []).append((r.fairness, jain(list(r.served_by.values()))))
    return {k: {"busy_jain": sum(x for x, _ in v) / len(v), "served_jain": sum(y for _, y in v) / len(v), "runs": len(v)}
            for k, v in out.items()}


def convergence(work: Path, quick: bool) -> dict:
    step = 5.0
    out = {"step_s": step, "throughput": {}, "events": [], "detect": {}, "runs": {}}
    for proxy in PROXIES:
        procs, addrs = Procs(work), Addrs()
        hr = HaproxyRoot("2.6") if proxy == "haproxy" else None
        try:
            fleet = Fleet(procs, addrs, [2.0] * 4, mean_ms=10.0, policy="dynamic").start()
            front = fleet.front(proxy, *STRATEGIES[proxy]["hunt"], hr, name="conv")
            # The front's name for each backend: its address (Envoy) or server name (HAProxy).
            names = [b.agent for b in fleet.backends] if proxy == "envoy" else [f"web{i + 1}" for i in range(4)]
            rate = 0.2 * fleet.capacity  # one backend alone can still serve it (rho 0.8)
            plan = [(step * (i + 1), "kill", i) for i in range(3)] + [(step * (4 + i), "revive", 2 - i) for i in range(3)]
            total = step * 7 + 2
            health_log, stop = [], threading.Event()

            def watch():
                deadline = time.monotonic() + total + 30
                while not stop.is_set() and time.monotonic() < deadline:
                    try:
                        health_log.append((time.monotonic(), front.health()))
                    except OSError:
                        pass
                    stop.wait(0.05)

            result = {}
            t_watch = threading.Thread(target=watch, daemon=True)
            with Sampler(fleet, 0.5) as s:
                t0 = time.monotonic()
                t_watch.start()
                t_load = threading.Thread(target=lambda: result.update(
                    summary(drive([front.url], rate, total, work / f"conv-{proxy}.json", max_lateness_us=2500))), daemon=True)
                t_load.start()
                events = []
                for at, what, i in plan:
                    time.sleep(max(0.0, t0 + at - time.monotonic()))
                    if what == "kill":
                        fleet.kill(i)
                    else:
                        fleet.revive(i)
                    events.append({"t": time.monotonic() - t0, "what": what, "backend": i})
                t_load.join(timeout=total + 120)
            stop.set()
            t_watch.join(timeout=5)
            # Detection and recovery: from each event to the front's view changing.
            detect = []
            for ev in events:
                name = names[ev["backend"]]
                want = ev["what"] == "revive"
                hit = next((t - t0 for t, h in health_log if t - t0 >= ev["t"] and h.get(name) is want), None)
                detect.append({**ev, "seen_after_s": None if hit is None else hit - ev["t"]})
            # Per-backend throughput (served/s) between samples.
            series = {}
            for i in range(4):
                pts, prev = [], None
                for t, _, served in s.rows:
                    v = served[i]
                    if v is not None and prev is not None and prev[1] is not None and v >= prev[1]:
                        pts.append((t, (v - prev[1]) / (t - prev[0])))
                    elif v is None:
                        pts.append((t, 0.0))
                    prev = (t, v)
                series[f"{proxy} backend {i}"] = pts
            out["throughput"].update(series)
            out["events"] = events
            out["detect"][proxy] = detect
            out["runs"][proxy] = {k: result.get(k) for k in ("completed", "errors", "mean_ms", "p99_ms", "valid")}
            print(f"  convergence {proxy}: {result.get('completed')} requests, {flag(result.get('errors') or 0)} errors; "
                  + ", ".join(f"{d['what']} {d['backend']}: {d['seen_after_s'] if d['seen_after_s'] is None else round(d['seen_after_s'], 2)} s"
                              for d in detect), flush=True)
        finally:
            procs.stop_all()
            if hr:
                hr.cleanup()
    return out


def report(d: dict, quick: bool) -> str:
    g, a, f, c = d["gain_loss"], d["agility"], d["fairness"], d["convergence"]
    gl = "\n".join(f"| {p['rate']} | {p['path']} | {p['completed'] / 3.0:.0f} | {p['p50_ms']:.2f} | {p['p99_ms']:.2f} | {flag(p['errors'])} |"
                   f" {'yes' if p['valid'] else 'no (generator behind)'} |" for p in g["points"])
    ag = "\n".join(f"| {r['proxy']} | {r['policy']} | {r['mean_ms']:.1f} | {r['p99_ms']:.1f} | {flag(r['errors'])} | {r['backlog_rejected']} |"
                   f" {' '.join(f'{x:.2f}' for x in a['shares'][r['proxy'] + ' ' + r['policy']])} |" for r in a["runs"])
    cap = " ".join(f"{x / sum(a['cores']):.2f}" for x in a["cores"])
    fr = "\n".join(f"| {k} | {v['busy_jain']:.3f} | {v['served_jain']:.4f} | {v['runs']} |" for k, v in sorted((f or {}).items()))
    cv = "\n".join(f"| {p} | {c['runs'][p]['completed']} | {flag(c['runs'][p]['errors'])} | "
                   + " | ".join("—" if x["seen_after_s"] is None else f"{x['seen_after_s']:.2f}" for x in c["detect"][p]) + " |"
                   for p in c["detect"])
    shown = shown_in(d)
    paired = f"\n{agility_paired_report(d['agility_paired'], shown)}" if d.get("agility_paired") else ""
    return render("elb", {
        "quick": " --quick" if quick else "",
        "machine": d["machine"],
        "gain_loss_rows": gl,
        "cores": ", ".join(str(x) for x in a["cores"]),
        "rate": f"{a['rate']:.0f}",
        "seconds": f"{a['seconds']:.0f}",
        "capacity_shares": cap,
        "agility_rows": ag,
        "fairness_rows": fr,
        "convergence_rows": cv,
    }, shown=shown) + paired


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["agility", "agility-paired"],
                    help="measure this section only; the others come from the last elb.json")
    ap.add_argument("--reps", type=int, default=7, help="agility-paired: paired repetitions")
    ap.add_argument("--append", action="store_true", help="agility-paired: add to the repetitions in elb.json")
    ap.add_argument("--report-only", action="store_true",
                    help="measure nothing: refresh the fairness section from the SRLB sweep, redraw, rewrite the report")
    a = ap.parse_args()
    if a.report_only:
        d = read_data("elb")
        d["fairness"] = fairness()
        plots.elb(d, RESULTS)
        write_result("elb", d, report(d, d.get("quick", False)))
        return
    work = Path(tempfile.mkdtemp(prefix="huntlb-elb-"))
    if a.only:
        d = read_data("elb")
        print(a.only, flush=True)
        if a.only == "agility-paired":
            old = d.get("agility_paired") if a.append else None
            new = agility_paired(work, a.reps, first=old["reps"] if old else 0)
            d["agility_paired"] = {**new, "runs": (old["runs"] if old else []) + new["runs"]}
        else:
            d[a.only] = agility(work, a.quick)
        d["machine"] = machine()
        plots.elb(d, RESULTS)
        write_result("elb", d, report(d, d.get("quick", False)))
        return
    d = {"machine": machine(), "quick": a.quick}
    print("gain/loss", flush=True)
    d["gain_loss"] = gain_loss(work, a.quick)
    print("agility", flush=True)
    d["agility"] = agility(work, a.quick)
    d["fairness"] = fairness()
    print("convergence", flush=True)
    d["convergence"] = convergence(work, a.quick)
    plots.elb(d, RESULTS)
    write_result("elb", d, report(d, a.quick))


if __name__ == "__main__":
    main()
