"""The simulated fleet of the many-fronts studies (bench/fronts_sim_sample.py,
bench/fronts_sim_frontier.py; bench/many_fronts_sim.py runs them): huntlb-sim's
backends, their demand and the network between agents, the modes' arguments,
one run and its record, a grid of runs, and a grid's cells.

A study is data: its modes (name -> huntlb-sim arguments), its grid (front
counts per fleet size, loads, demands) and its bar; this module runs any of
them the same way.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchlib.reports import ROOT
from benchlib.stats import median
from benchlib.tools import huntlb_sim

SIM = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "huntlb-sim"

# The fleet: backends of WORKERS workers over CORES cores (processor sharing),
# BACKLOG queued at most, jobs of MEAN_MS of one core on average, at RHO.
RHO, MEAN_MS, WORKERS, CORES, BACKLOG = 0.88, 20, 32, 2, 128
# A count reaches an agent DELAY_MS after it changed (one datagram), a forward
# or a final its server HOP_MS after the decision (one hop); a bounded sample
# is re-drawn every RESAMPLE_MS (the agent's fleet_resample_ms).
DELAY_MS, HOP_MS, RESAMPLE_MS = 0.2, 0.2, 100
NET = ["--fleet-delay-ms", str(DELAY_MS), "--hop-ms", str(HOP_MS)]
TIER = ["--dispatch", "forward-least", *NET]  # the agent's forwarding knobs, at its defaults


def sampled(k: int, b: int, share: str = "", resample_ms: float = RESAMPLE_MS) -> list[str]:
    """The tier over a pushed sample of K peers keeping the B lowest, counts shared by `share` (--fleet-share)."""
    return [*TIER, "--fleet-sample", str(k), "--fleet-sample-keep", str(b), "--fleet-resample-ms", str(resample_ms),
            *(["--fleet-share", share] if share else [])]


def pulled(d: int, share: str = "") -> list[str]:
    """The tier pulling D peers' counts on demand instead of pushing them."""
    return [*TIER, "--fleet-probe", str(d), *(["--fleet-share", share] if share else [])]


def capped(args: list[str], backends: int) -> list[str]:
    """`args` with a sample or a pull of more peers than the fleet has cut to every other backend."""
    out = list(args)
    for flag in ("--fleet-sample", "--fleet-probe"):
        if flag in out:
            i = out.index(flag) + 1
            out[i] = str(min(int(out[i]), backends - 1))
    return out


def sim(args: list[str], backends: int, fronts: int, demand: str, seed: int, requests: int, rho: float = RHO) -> dict:
    """One huntlb-sim run of a mode's `args` on this fleet, demand and load."""
    args = capped(args, backends)
    fleet = ["--servers", str(backends), "--workers", str(WORKERS), "--cores", str(CORES), "--backlog", str(BACKLOG)]
    run = [*fleet, *args, "--mean-ms", str(MEAN_MS), "--rho", str(rho), "--proxies", str(fronts), "--demand", demand,
           "--requests", str(requests), "--seed", str(seed)]
    return huntlb_sim(str(SIM), run, timeout=1800)[0]


def record(name: str, args: list[str], backends: int, fronts: int, demand: str, seed: int, r: dict) -> dict:
    """A run as the data keeps it: where it ran, its times and every message it cost."""
    m, d = r["messages"], r["messages"]["datagrams"]
    return {"mode": name, "backends": backends, "fronts": fronts, "demand": demand, "seed": seed, "args": " ".join(capped(args, backends)),
            "mean_ms": round(r["mean_ms"], 4), "p50_ms": round(r["p50_ms"], 4), "p99_ms": round(r["p99_ms"], 4),
            "rejected": r["rejected"], "acceptance": r["acceptance"],
            "msg": {"per_request": round(m["per_request"], 4), "refusals": m["refusals"], "forwards": m["forwards"], "probes": m["probes"],
                    **{k: d.get(k, 0) for k in ("counts", "subscribes", "renewals", "unsubscribes", "heartbeats", "asks")},
                    **{k: d[k] for k in ("tokens", "piggybacked", "steals") if d.get(k)}}}


def run_grid(modes: dict[str, list[str]], grid: dict, seeds: list[int], requests: int, t0: float) -> list[dict]:
    """Every mode over every cell of `grid` ({"fronts": {backends: [fronts]},
    "rhos": [rho], "demands": {demand: name}}), a run per seed. A grid of one
    load records none (the study's load is its grid's)."""
    runs = []
    for name, args in modes.items():
        for backends, fronts_list in grid["fronts"].items():
            for fronts in fronts_list:
                for rho in grid["rhos"]:
                    for demand in grid["demands"]:
                        for s in seeds:
                            r = record(name, args, backends, fronts, demand, s, sim(args, backends, fronts, demand, s, requests, rho))
                            runs.append({**r, "rho": rho} if len(grid["rhos"]) > 1 else r)
        print(f"{name} done ({time.monotonic() - t0:.0f} s)", flush=True)
    return runs


def cells(runs: list[dict], fields: tuple[str, ...]) -> dict:
    """(mode, *fields) -> the medians over seeds of a cell, and its ratios to
    JSQ's cell (None where JSQ did not run)."""
    by: dict = {}
    for r in runs:
        by.setdefault((r["mode"], *(r[f] for f in fields)), []).append(r)
    out = {k: {"mean": median([r["mean_ms"] for r in rs]), "p99": median([r["p99_ms"] for r in rs]),
               "msgs": median([r["msg"]["per_request"] for r in rs]), "seeds": len(rs),
               "rejected": sum(r["rejected"] for r in rs)} for k, rs in by.items()}
    for (mode, *cell), c in out.items():
        j = out.get(("JSQ", *cell))
        c["mean_x"], c["p99_x"] = (c["mean"] / j["mean"], c["p99"] / j["p99"]) if j else (None, None)
    return out
