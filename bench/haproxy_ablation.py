#!/usr/bin/env python3
"""Where the HAProxy hunting front's cost goes: the committed front.cfg on one
thread, with one hunting feature taken out at a time, side by side with plain.

Variants: hunting (all of it); without the per-try `http-send-name-header`;
without `retry-on 425` (retry buffer); without the offer (map pick, hunt-offer
header, use-server), and without each of use-server and the header alone; plain. Tiny page, keep-alive, wrk with 32 connections on
CPU 1, variants alternated in each repetition; req/s and HAProxy's own CPU per
request.

Usage: python3 bench/haproxy_ablation.py [--reps 5]   Writes docs/results/haproxy-ablation.{md,json}.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchlib import ci95, machine, median, paired_ratio, proc_cpu_seconds, wrk, write_result
from fleet import Fleet
from testkit import Addrs, HaproxyRoot, Procs, haproxy_front_text, haproxy_server_states, start_haproxy, wait_tcp, wait_until

OFFER_LINES = ("hunt_offer",)


def variants(text: str) -> dict[str, str]:
    drop = lambda t, words: "\n".join(l for l in t.splitlines() if not any(w in l for w in words)) + "\n"  # noqa: E731
    return {
        "hunting": text,
        "without http-send-name-header": drop(text, ("http-send-name-header",)),
        "without retry-on 425": text.replace("retry-on conn-failure empty-response 425", "retry-on conn-failure empty-response"),
        "without the offer (pick, header, use-server)": drop(text, OFFER_LINES),
        "without use-server (pick and header kept)": drop(text, ("use-server",)),
        "without the hunt-offer header (pick and use-server kept)": drop(text, ("set-header hunt-offer",)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=4)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="huntlb-ablation-"))
    procs, addrs = Procs(work), Addrs()
    hr = HaproxyRoot("2.6")
    try:
        fleet = Fleet(procs, addrs, [1000.0] * 2, workers=1000, backlog=10000, mean_ms=0.0001, policy="always").start()
        fronts = {}
        for hunting in (True, False):
            host = addrs.host()
            listen, stats = f"{host}:10000", f"{host}:9999"
            base = haproxy_front_text(hr, listen, stats, fleet.backends, hunting=hunting, keep_served_by=False)
            base = base.replace("defaults\n", "    nbthread 1\ndefaults\n", 1)
            for name, text in (variants(base) if hunting else {"plain": base}).items():
                if name != "hunting" and name != "plain":
                    host = addrs.host()
                    text = text.replace(listen, f"{host}:10000").replace(stats, f"{host}:9999")
                    l2, s2 = f"{host}:10000", f"{host}:9999"
                else:
                    l2, s2 = listen, stats
                p = start_haproxy(procs, hr, f"haproxy-{len(fronts)}", text)
                wait_tcp(s2, p)
                wait_until(lambda: all(v == "UP" for v in haproxy_server_states(s2).values()), timeout=15, what="UP")
                fronts[name] = (f"http://{l2}/", p.pid)
        runs = {k: [] for k in fronts}
        for rep in range(a.reps):
            for name, (url, pid) in fronts.items():
                c0 = proc_cpu_seconds(pid)
                r = wrk(url, 32, a.seconds)
                r["cpu_us_per_req"] = (proc_cpu_seconds(pid) - c0) / max(r["rps"] * a.seconds, 1) * 1e6
                runs[name].append(r)
            print(f"rep {rep + 1}/{a.reps}: " + ", ".join(f"{n}: {runs[n][-1]['rps']:.0f}" for n in fronts), flush=True)
        rows = []
        for name, rs in runs.items():
            ratio = paired_ratio(rs, runs["plain"])
            cpu, h = ci95([r["cpu_us_per_req"] for r in rs])
            rows.append(f"| {name} | {median([r['rps'] for r in rs]):.0f} | {ratio['median']:.3f} ({ratio['mean']:.3f} ± {ratio['ci95']:.3f}) "
                        f"| {cpu:.1f} ± {h:.1f} | {sum(r['non2xx'] + r['socket_errors'] for r in rs)} |")
        md = f"""# HAProxy hunting front: where the cost goes

`python3 bench/haproxy_ablation.py` on {machine()}. The committed `front.cfg` on one thread
(`nbthread 1`: HAProxy is the bottleneck), tiny page through agents that accept every offer,
keep-alive, `wrk` 32 connections on CPU 1, {a.seconds} s per run, {a.reps} repetitions with the variants
alternated. Each row takes one hunting feature out; the ratio is to plain, paired per repetition
(median, and mean ± 95% CI); CPU is HAProxy's own per request (mean ± 95% CI).

| variant | req/s | / plain | HAProxy CPU µs/request | errors |
|---------|------:|--------:|-----------------------:|-------:|
{chr(10).join(rows)}
"""
        write_result("haproxy-ablation", {"machine": machine(), "reps": a.reps, "seconds": a.seconds, "runs": runs}, md)
        print(md)
    finally:
        procs.stop_all()
        hr.cleanup()


if __name__ == "__main__":
    main()
