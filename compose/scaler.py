#!/usr/bin/env python3
"""A small scaler for the compose demo: adds a backend when the fleet's hunts
keep ending on busy backends, removes one when they stay free.

The signal is Prometheus' `huntlb:finals_busy:ratio` (config/huntlb.rules.yml):
finals that arrived at a backend at or above its refusal threshold
(`huntlb_finals_busy_total`: it had to accept while busy), per offer, over 20 s:
the shipped `huntlb:scaling_signal:ratio` over the hunting fronts' tries only,
since the demo's agents serve plain fronts too (the rules file says why).
Below ~0.1 two tries almost always find a free backend; above ~0.4 they often
find none, and latency follows (docs/demo.md has the measured curve).

    python3 compose/scaler.py                      # beside `docker compose up -d`
    python3 compose/scaler.py --project huntlb --max-seconds 120

The decision is one pure function (`decide`); the loop around it reads
Prometheus, counts the running backends and runs `compose up --scale`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIGNAL = "huntlb:finals_busy:ratio"


@dataclass(frozen=True)
class Rule:
    up: float = 0.40          # scale out when the signal stays at or above this ...
    up_after: int = 3         # ... for this many consecutive readings
    down: float = 0.10        # scale in when it stays below this ...
    down_after: int = 12      # ... for this many readings (slower: scaling in is the risky way)
    min_backends: int = 3
    max_backends: int = 8
    cooldown: int = 4         # readings to wait after a change (the signal's 20 s window)


@dataclass(frozen=True)
class State:
    high: int = 0             # consecutive readings at or above `up`
    low: int = 0              # consecutive readings below `down`
    wait: int = 0             # readings left in the cooldown


def decide(rule: Rule, st: State, signal: float | None, backends: int) -> tuple[State, int]:
    """(next state, wanted backends). No reading (no offers yet): no change."""
    if st.wait > 0:
        return State(wait=st.wait - 1), backends
    if signal is None:
        return State(), backends
    high = st.high + 1 if signal >= rule.up else 0
    low = st.low + 1 if signal < rule.down else 0
    if high >= rule.up_after and backends < rule.max_backends:
        return State(wait=rule.cooldown), backends + 1
    if low >= rule.down_after and backends > rule.min_backends:
        return State(wait=rule.cooldown), backends - 1
    return State(high=high, low=low), backends


def compose_cmd() -> list[str]:
    """`docker compose` (v2) if it answers, else `docker-compose` (1.29); HUNTLB_COMPOSE=v2|v1 picks one."""
    want = os.environ.get("HUNTLB_COMPOSE", "")
    if want not in ("", "v1", "v2"):
        sys.exit(f"HUNTLB_COMPOSE={want}: v1 or v2")
    if not want:
        ok = subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
        want = "v2" if ok else "v1"
    return ["docker", "compose"] if want == "v2" else ["docker-compose"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", "--project", help="compose project name (-p); default: compose's own")
    ap.add_argument("--prometheus", default="http://127.0.0.1:9090")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between readings")
    ap.add_argument("--up", type=float, default=Rule.up)
    ap.add_argument("--down", type=float, default=Rule.down)
    ap.add_argument("--min", type=int, default=Rule.min_backends)
    ap.add_argument("--max", type=int, default=Rule.max_backends)
    ap.add_argument("--max-seconds", type=float, default=0, help="stop after this long (0: run until interrupted)")
    ap.add_argument("--max-changes", type=int, default=0, help="stop after this many scale changes (0: no limit)")
    a = ap.parse_args()
    rule = Rule(up=a.up, down=a.down, min_backends=a.min, max_backends=a.max)
    compose = compose_cmd() + ["-f", str(HERE / "compose.yaml")] + (["-p", a.project] if a.project else [])

    def backends() -> int:
        out = subprocess.run(compose + ["ps", "-q", "backend"], capture_output=True, text=True, check=True).stdout
        ids = out.split()
        if not ids:
            return 0
        running = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", *ids], capture_output=True, text=True).stdout
        return running.split().count("true")

    def signal() -> float | None:
        url = f"{a.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": SIGNAL})
        try:
            res = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
        except OSError as e:
            print(f"scaler: prometheus: {e}", file=sys.stderr, flush=True)
            return None
        return float(res[0]["value"][1]) if res else None

    st, changes, t0 = State(), 0, time.monotonic()
    print(f"scaler: signal {SIGNAL}; out at >= {rule.up} x{rule.up_after}, in at < {rule.down} x{rule.down_after}, "
          f"backends {rule.min_backends}-{rule.max_backends}, every {a.every:g} s", flush=True)
    while not a.max_seconds or time.monotonic() - t0 < a.max_seconds:
        n, s = backends(), signal()
        st, want = decide(rule, st, s, n)
        shown = "none" if s is None else f"{s:.3f}"
        if want != n:
            print(f"scaler: signal {shown}, {n} backends -> {want}", flush=True)
            subprocess.run(compose + ["up", "-d", "--no-recreate", "--no-deps", "--scale", f"backend={want}", "backend"],
                           check=True, capture_output=True)
            changes += 1
            if a.max_changes and changes >= a.max_changes:
                break
        else:
            print(f"scaler: signal {shown}, {n} backends", flush=True)
        time.sleep(a.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
