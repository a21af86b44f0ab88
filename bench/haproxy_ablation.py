#!/usr/bin/env python3
"""Where the HAProxy hunting front's cost goes, line by line, in instructions.

The committed front.cfg on one thread, with one hunting line taken out at a
time, next to plain (every hunting line out). Each variant serves the same
keep-alive requests (`ab -k`, 4 connections) from static backends (a HAProxy
answering 200: every offer accepted) while callgrind counts HAProxy's
user-space instructions. Instruction counts do not depend on this machine's
noise, so one run per variant is enough and differences of 100 are real.
The module's background task runs once a minute here (valgrind stretches
time); bench/proxy_overhead.py measures it separately.

Usage: python3 bench/haproxy_ablation.py [--requests 3000]   (make bench-setup first: valgrind)
Writes docs/results/haproxy-ablation.md and bench/data/haproxy-ablation.json.
"""

from __future__ import annotations

import argparse
import re
import shutil

from benchlib.fronts import BACKENDS, changes, overhead_bed
from benchlib.render import render, shown_in
from benchlib.reports import machine, parse_or_rewrite, write_result
from benchlib.tools import instructions_per_request
from harness import least_pick


def drop(text: str, *words: str) -> str:
    return "\n".join(line for line in text.splitlines() if not any(w in line for w in words)) + "\n"


def servers(n: int):
    """The front with n server lines over the bed's backends (in turn), its pick
    block rewritten for them: what the pick costs grows with the servers."""
    def edit(text: str) -> str:
        lines = text.splitlines()
        srv = [l for l in lines if re.match(r"\s*server web\d+ ", l)]
        addrs = [l.split()[2] for l in srv]
        rest = [l for l in lines if l not in srv]
        more = [f"    server web{i + 1} {addrs[i % len(addrs)]}{' ' + ' '.join(srv[0].split()[3:]) if len(srv[0].split()) > 3 else ''}"
                for i in range(n)]
        return least_pick.rewrite("\n".join(rest + more) + "\n")
    return edit


# (variant, what it takes out of the hunting front, how)
VARIANTS = [
    ("hunting", "nothing: the committed front", lambda t: t),
    ("- the offer", "the pick, the hunt-offer and hunt-seen headers, use-server",
     lambda t: drop(t, "hunt_offer", "txn.hunt_n", "hunt_big_body", "hunt_seen", "hunt_best", "txn.hunt_r")),
    ("- the count check", "`unset-var(txn.hunt_offer)` with fewer than 2 usable (`nbsrv`)",
     lambda t: drop(t, "set-var(txn.hunt_n)").replace(" if { var(txn.hunt_n) -m int lt 2 } || hunt_big_body", " if hunt_big_body")),
    ("- the hunt-offer header", "`http-request add-header hunt-offer`", lambda t: drop(t, "add-header hunt-offer")),
    ("- the hunt-seen header", "`set-var(txn.hunt_seen)`, `add-header hunt-seen`", lambda t: drop(t, "hunt_seen")),
    ("- use-server", "`use-server %[var(txn.hunt_offer)]`", lambda t: drop(t, "use-server")),
    ("- the big-body check", "`acl hunt_big_body` and its use",
     lambda t: drop(t, "acl hunt_big_body").replace(" || hunt_big_body", "")),
    ("- http-send-name-header", "`http-send-name-header hunt-target`", lambda t: drop(t, "http-send-name-header")),
    ("- request del-header", "`http-request del-header hunt -m beg`", lambda t: drop(t, "http-request del-header hunt")),
    ("- response set-status", "`http-response set-status 503 if { status 425 } ...`", lambda t: drop(t, "set-status 503")),
    ("- response del-header", "`http-response del-header hunt -m beg`", lambda t: drop(t, "http-response del-header hunt")),
    ("- retry-on 425", "425 from `retry-on`",
     lambda t: t.replace("retry-on conn-failure 425", "retry-on conn-failure")),
    ("- app-425 restore", "`http-response set-status 425 if { status 400 } ...`", lambda t: drop(t, "res.hdr(hunt-status)")),
]


MORE_SERVERS = [12, 32]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    a = parse_or_rewrite(ap, {"haproxy-ablation": report})
    if a is None:
        return
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind missing: make bench-setup")
    with overhead_bed("huntlb-ablation-") as bed:
        counts = {"plain": instructions_per_request(bed, "plain", False, None, a.requests)}
        for name, _, how in VARIANTS:
            edit = how if name == "hunting" else changes(name, how)
            counts[name] = instructions_per_request(bed, name, True, edit, a.requests)
        for n in MORE_SERVERS:
            counts[f"plain, {n} servers"] = instructions_per_request(bed, f"plain {n}", False, servers(n), a.requests)
            counts[f"hunting, {n} servers"] = instructions_per_request(bed, f"hunting {n}", True, servers(n), a.requests)
    data = {"machine": machine(), "requests": a.requests, "instructions_per_request": counts}
    md = report(data)
    write_result("haproxy-ablation", data, md)
    print(md)


def report(data: dict) -> str:
    """The report, from the data main wrote (or the committed data: `--report-only`)."""
    counts = data["instructions_per_request"]
    plain, hunt = counts["plain"], counts["hunting"]
    rows = [f"| plain | every hunting line | {plain:.0f} | | |",
            f"| **hunting** | nothing | **{hunt:.0f}** | **+{hunt - plain:.0f} ({(hunt / plain - 1) * 100:+.1f}%) over plain** | |"]
    for name, what, _ in VARIANTS[1:]:
        saved = hunt - counts[name]
        rows.append(f"| {name} | {what} | {counts[name]:.0f} | | {saved:.0f} ({saved / (hunt - plain) * 100:.0f}% of hunting's cost) |")
    grow = "\n".join([f"| {BACKENDS} | {plain:.0f} | {hunt:.0f} | +{hunt - plain:.0f} ({(hunt / plain - 1) * 100:+.1f}%) |"]
                     + [f"| {n} | {counts[f'plain, {n} servers']:.0f} | {counts[f'hunting, {n} servers']:.0f} | "
                        f"+{counts[f'hunting, {n} servers'] - counts[f'plain, {n} servers']:.0f} "
                        f"({(counts[f'hunting, {n} servers'] / counts[f'plain, {n} servers'] - 1) * 100:+.1f}%) |"
                        for n in MORE_SERVERS])
    return render("haproxy-ablation", {"machine": data["machine"], "requests": data["requests"], "backends": BACKENDS,
                                       "rows": "\n".join(rows), "growth_rows": grow}, shown=shown_in(data))


if __name__ == "__main__":
    main()
