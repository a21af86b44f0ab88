#!/usr/bin/env python3
"""The HAProxy front's first candidate: the least-loaded usable server by
HAProxy's own count, written as native rules (no Lua per request).

HAProxy's `use-server` must name the candidate before routing, and `srv_conn`
(its count of requests at a server) takes a server name fixed in the config, so
the least-loaded pick is one rule per server (servers named PREFIX1..PREFIXn,
as server-template names them; a pair per server for other names). This
writes them:

    python3 haproxy-lua/tools/least_pick.py hunt web1 web2 web3     # print the block
    python3 haproxy-lua/tools/least_pick.py --config front.cfg      # rewrite its block in place

The block sits between `# huntlb-pick begin` and `# huntlb-pick end`; with
--config the servers are the config's own `server` lines (and `server-template
NAME N-M` ranges) of the backend that holds the block.

Each server's key is srv_conn * W + (k xor r): its count first, then a tie-break
that a random r (one per request) reorders, so equal servers share the offers
instead of the first in the list taking them all (with several fronts, every
front would send its idle-time offers to the same server). The least key wins;
`hunt-seen` sends its count (key / W) to the agent, which refuses only when it
holds more than that (see docs/protocol.md, "hunt-seen").
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BEGIN, END = "# huntlb-pick begin", "# huntlb-pick end"
# A whole block as it sits in a config (any indent), to remove or replace it.
PICK_RE = re.compile(rf"^[ \t]*{BEGIN}.*?{END}[ \t]*\n", re.M | re.S)


def width(n: int) -> int:
    """The tie-break field: a power of two above every server index."""
    w = 2
    while w < n:
        w *= 2
    return w


def block(backend: str, names: list[str], indent: str = "    ") -> list[str]:
    if not names:
        # Nothing to pick from yet (servers come later, or from the runtime API
        # into declared slots): no offer, every request a final.
        return [f"{indent}{BEGIN} (no servers: nothing is offered)", f"{indent}{END}"]
    if len(set(names)) != len(names):
        raise ValueError(f"least_pick: server names repeat: {names}")
    for s in names:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]+", s):
            raise ValueError(f"least_pick: server name `{s}` has characters a rule cannot hold")
    w = width(len(names))
    numbered = [re.fullmatch(r"(.*?)(\d+)", s) for s in names]
    prefix = numbered[0].group(1) if numbered[0] else None
    # Servers named PREFIX1..PREFIXn (as server-template names them): one rule
    # per server keeps the least key and the name is rebuilt from it; other
    # names need a second rule per server to remember the name.
    one_rule = all(m and m.group(1) == prefix and int(m.group(2)) == k + 1 for k, m in enumerate(numbered))
    rule = f"{indent}http-request "
    out = [f"{indent}{BEGIN} (written by haproxy-lua/tools/least_pick.py: {'one line' if one_rule else 'two lines'} per server)",
           f"{rule}set-var(txn.hunt_r) rand({w})",
           f"{rule}set-var(txn.hunt_best) int(2147483647)"]
    for k, s in enumerate(names):
        key = f"srv_conn({backend}/{s}),mul({w}),add({k}),xor(txn.hunt_r)"
        # the comparison first: HAProxy stops at the first false condition, and
        # most servers are not a new least (about ln n of n are), so most cost
        # one condition, not two
        less = f"{{ {key},sub(txn.hunt_best) lt 0 }} {{ srv_is_up({backend}/{s}) }}"
        if one_rule:
            out.append(f"{rule}set-var(txn.hunt_best) {key} if {less}")
        else:
            out.append(f"{rule}set-var(txn.hunt_offer) str({s}) if {less}")
            out.append(f"{rule}set-var(txn.hunt_best) {key} if {{ var(txn.hunt_offer) -m str {s} }}")
    if one_rule:
        out += [f"{rule}set-var(txn.hunt_k) var(txn.hunt_best),and({w - 1}),xor(txn.hunt_r),add(1) if {{ var(txn.hunt_best) -m int lt 2147483647 }}",
                f"{rule}set-var(txn.hunt_offer) str({prefix}),concat(,txn.hunt_k,) if {{ var(txn.hunt_k) -m found }}"]
    out += [f"{rule}set-var(txn.hunt_seen) var(txn.hunt_best),div({w}) if {{ var(txn.hunt_offer) -m found }}", f"{indent}{END}"]
    return out


def servers_of(lines: list[str], start: int) -> tuple[str, list[str]]:
    """The backend holding line `start`, and its servers in order."""
    b = start
    while b >= 0 and not re.match(r"\s*backend\s", lines[b]):
        b -= 1
    if b < 0:
        raise ValueError("least_pick: the block is not inside a backend section")
    backend = lines[b].split()[1]
    names = []
    for line in lines[b + 1:]:
        if re.match(r"\s*(backend|frontend|listen|defaults|global|resolvers|peers|userlist)\b", line):
            break
        m = re.match(r"\s*server\s+(\S+)", line)
        t = re.match(r"\s*server-template\s+(\S+)\s+(\d+)(?:-(\d+))?\s", line)
        if t:
            lo, hi = (int(t.group(2)), int(t.group(3))) if t.group(3) else (1, int(t.group(2)))
            names += [f"{t.group(1)}{i}" for i in range(lo, hi + 1)]
        elif m:
            names.append(m.group(1))
    return backend, names


def rewrite(text: str) -> str:
    """`text` with its pick block rewritten for the servers its backend lists."""
    lines = text.split("\n")
    try:
        i = next(n for n, l in enumerate(lines) if l.strip().startswith(BEGIN))
        j = next(n for n in range(i, len(lines)) if lines[n].strip() == END)
    except StopIteration:
        raise ValueError(f"least_pick: no `{BEGIN}` ... `{END}` block") from None
    backend, names = servers_of(lines, i)
    indent = re.match(r"\s*", lines[i]).group(0)
    return "\n".join(lines[:i] + block(backend, names, indent) + lines[j + 1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, help="rewrite this config's pick block in place")
    ap.add_argument("backend", nargs="?")
    ap.add_argument("servers", nargs="*")
    a = ap.parse_args()
    try:
        if a.config:
            a.config.write_text(rewrite(a.config.read_text()))
        elif a.backend and a.servers:
            print("\n".join(block(a.backend, a.servers)))
        else:
            ap.error("give --config FILE, or a backend and its servers")
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
