#!/usr/bin/env python3
"""One member of the forwarding tier frozen (SIGSTOP) or flooded with idle
connections (a slowloris: no key, no privilege) for part of a run, at 4 fronts
under the vs-least load, paired with the same run without the fault.

Usage (after `make release`):
  PYTHONPATH=.:bench HUNTLB_PROFILE=release .venv/bin/python bench/fleet_faults.py envoy --reps 5 [--json F]

Each repetition runs, on the same arrivals and jobs (a shared seed), the
proxy's hunting front with the tier (FWD/*) without a fault and with each
fault, the order reversed every other repetition. A fault starts FAULT_AT s
into the 10 s run and lasts FAULT_FOR s, on backend 0's agent. Prints each
run (client errors flagged), the fault / none ratios of mean and p99 (median
over repetitions, mean and 95% CI), and how long after the fault ended the
faulty member took its first forward again (its app's arrivals of forwards,
polled every 20 ms): "back in use". `control` as a fault is none at all: a
second run on the same arrivals, whose ratio to the first is this machine's
noise floor for the others. The bars set for the tier
(docs/results/fleet-faults.md): 0 client errors, p99 within 1.5x, back within 1 s.

`--inside DIR` keeps a look inside every run there: each request's send
offset, latency and status (`rep{R}-{fault}.requests`, the generator's
--requests), every app's busy workers each 0.2 s (`.samples.json`), and
prints each run's p99 by phase (before the fault, its first second, the
rest of it, the first second after, the rest), by when requests were sent.

`--ideal SEEDS` instead runs the simulator's ideal (JSQ on true counts, which
also knows a frozen server and sends it nothing) on the same fleet, load and
freeze over that many seeds: what losing backend 0 for FAULT_FOR s costs when
nothing else goes wrong, the floor under the frozen ratio. `--ideal-dispatch`
runs another of the simulator's balancers there instead (`forward-least
--proxies 4`: the tier's rule, which does not know the freeze and counts what
it sent there).
"""

import argparse
import json
import os
import resource
import subprocess
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import testbed
from benchlib.reports import ROOT, write_json
from benchlib.runs import Run
from benchlib.stats import ci95, median_ci95, rep_ratios

FAULT_AT, FAULT_FOR = 3.0, 4.0
STRATEGY = {"envoy": "FWD/full", "haproxy": "FWD/least"}


class Fault:
    """Injected into the next run's load (testbed.drive is wrapped), on backend 0."""

    def __init__(self, bench, kind):
        self.bench, self.kind = bench, kind
        self.back_after = None
        self.at = None
        self.idle = []

    def _finals(self, b):
        m = b.metrics()
        return m.get('huntlb_forwards_in_total{outcome="taken"}', 0)

    def run(self, started):
        b = self.bench.fleet.backends[0]
        time.sleep(max(0.0, started + FAULT_AT - time.monotonic()))
        self.at = time.time()  # wall clock, to line the run up with other records
        if self.kind == "frozen":
            b.agent_proc.signal(signal.SIGSTOP)
        else:
            # More than max_connections (10000) and the accept queue (1024) take.
            for i in range(11_500):
                s = socket.socket()
                s.setblocking(False)
                try:
                    s.connect_ex((b.host, 8080))
                except OSError:
                    s.close()
                    break
                self.idle.append(s)
        time.sleep(max(0.0, started + FAULT_AT + FAULT_FOR - time.monotonic()))
        if self.kind == "frozen":
            b.agent_proc.signal(signal.SIGCONT)
        else:
            for s in self.idle:
                s.close()
            self.idle = []
        ended = time.monotonic()
        # Back in use: a forward from a peer reaches it (its finals grow).
        try:
            f0 = self._finals(b)
            while time.monotonic() - ended < 5:
                if self._finals(b) > f0:
                    self.back_after = time.monotonic() - ended
                    return
                time.sleep(0.02)
        except OSError:
            pass


def ideal(seeds: int, dispatch: str = "jsq", rho: float = 0.88) -> int:
    """The simulator's JSQ with and without backend 0 frozen, paired by seed."""
    sim = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "huntlb-sim"
    base = [str(sim), "--dispatch", *dispatch.split(), "--servers", str(testbed.SERVERS), "--workers", str(testbed.WORKERS),
            "--cores", f"{testbed.CORES:g}", "--backlog", str(testbed.BACKLOG), "--mean-ms", f"{testbed.MEAN_MS:g}",
            "--rho", f"{rho:g}"]
    # As many requests as a 10 s run at rho sends.
    requests = int(rho * testbed.SERVERS * testbed.CORES / (testbed.MEAN_MS / 1e3) * 10)
    ratios = {"mean_ms": [], "p99_ms": []}
    for seed in range(1, seeds + 1):
        run = lambda *extra: json.loads(subprocess.run([*base, "--requests", str(requests), "--seed", str(seed), *extra],
                                                       check=True, capture_output=True, text=True).stdout)
        none, frozen = run(), run("--freeze", f"0:{FAULT_AT:g}:{FAULT_AT + FAULT_FOR:g}")
        print(f"  seed {seed}: p99 {none['p99_ms']:.1f} -> {frozen['p99_ms']:.1f} ms, mean {none['mean_ms']:.1f} -> "
              f"{frozen['mean_ms']:.1f} ms, backend 0 served {none['served_per_server'][0]} -> {frozen['served_per_server'][0]}")
        for k in ratios:
            ratios[k].append(frozen[k] / none[k])
    for k, xs in ratios.items():
        m, h = ci95(xs)
        lo, hi = median_ci95(xs)
        print(f"simulated {dispatch} at rho {rho:g}: frozen / none, {k[:-3]}: median {statistics.median(xs):.3f} [{lo:.3f}, {hi:.3f}], mean {m:.3f} ± {h:.3f} "
              f"({seeds} seeds)")
    return 0


PHASES = [("before", 0.0, FAULT_AT), ("fault 1st s", FAULT_AT, FAULT_AT + 1), ("fault rest", FAULT_AT + 1, FAULT_AT + FAULT_FOR),
          ("after 1st s", FAULT_AT + FAULT_FOR, FAULT_AT + FAULT_FOR + 1), ("after rest", FAULT_AT + FAULT_FOR + 1, 1e9)]


def phases(requests: Path) -> None:
    """Print a run's p99 (and count, errors) by the phase its requests were sent in."""
    rows = [line.split() for line in requests.read_text().splitlines() if line.strip()]
    out = []
    for name, t0, t1 in PHASES:
        lat = sorted(int(r[2]) / 1000 for r in rows if t0 <= int(r[1]) / 1e6 < t1)
        bad = sum(1 for r in rows if t0 <= int(r[1]) / 1e6 < t1 and r[3] != "200")
        if lat:
            out.append(f"{name} n {len(lat)} p50 {lat[len(lat) // 2]:.1f} p99 {lat[min(len(lat) - 1, int(.99 * len(lat)))]:.1f} "
                       f"max {lat[-1]:.0f}{f' ERR {bad}' if bad else ''}")
    print("      " + " | ".join(out), flush=True)


def summarize(proxy: str, faults: list[str], runs: list) -> None:
    """Each fault's ratios to the run without it (runs: (Run, back_after_s))."""
    bad = [r for r, _ in runs if r.errors or not r.valid]
    for r in bad:
        print(f"FLAGGED: {r.policy} rep {r.rep}: {r.errors} client errors, valid {r.valid}")
    for kind in faults:
        for key in ("mean_ms", "p99_ms"):
            xs = rep_ratios([r for r, _ in runs], "none", kind, key)
            if xs:
                m, h = ci95(xs)
                lo, hi = median_ci95(xs)
                print(f"{proxy} {kind} / none, 4 fronts, {key[:-3]}: median {statistics.median(xs):.3f} [{lo:.3f}, {hi:.3f}], "
                      f"mean {m:.3f} ± {h:.3f} ({len(xs)} pairs: {', '.join(f'{x:.2f}' for x in xs)})")
        if kind == "control":
            continue
        backs = [back for r, back in runs if r.policy == kind]
        ok = [x for x in backs if x is not None]
        print(f"{proxy} {kind}: back in use after the fault, s: "
              f"{', '.join(f'{x:.2f}' for x in ok)}{f' ({len(backs) - len(ok)} not within 5 s)' if len(ok) < len(backs) else ''}")
        errs = [r.errors for r, _ in runs if r.policy == kind]
        print(f"{proxy} {kind}: client errors per run: {errs}")


def from_json(proxy: str, faults: list[str], files: list[Path]) -> int:
    """The summary over runs kept by --json, several files pooled (each file's
    repetitions paired within it)."""
    runs = []
    for i, f in enumerate(files):
        for line in f.read_text().splitlines():
            d = json.loads(line)
            back, kind = d.pop("back_after_s", None), d.pop("fault")
            r = Run.from_json(d)
            r.policy, r.rep = kind, (i, r.rep)
            if r.proxy == proxy:
                runs.append((r, back))
    print(f"{proxy}: {len(runs)} runs from {', '.join(f.name for f in files)}")
    summarize(proxy, faults, runs)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("proxy", choices=["envoy", "haproxy"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--first-rep", type=int, default=0, help="number repetitions (and their seeds) from here: more pairs to pool")
    ap.add_argument("--faults", default="frozen,slowloris",
                    help="of frozen, slowloris, control (no fault: a second run on the same arrivals, the noise floor)")
    ap.add_argument("--strategy", help="instead of the hunting front with the tier (FWD/*): e.g. LR/full, leastconn")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--ideal", type=int, metavar="SEEDS", help="the simulated ideal's ratios instead (no proxy runs)")
    ap.add_argument("--ideal-dispatch", default="jsq", metavar="ARGS",
                    help="with --ideal: another simulated balancer, e.g. 'forward-least --proxies 4' (the tier's rule at 4 fronts)")
    ap.add_argument("--rho", type=float, default=0.88, help="the offered load (the vs-least load: 0.88); the bar is set at 0.88")
    ap.add_argument("--inside", type=Path, metavar="DIR", help="keep each run's requests and busy samples there, print p99 by phase")
    ap.add_argument("--from-json", type=Path, nargs="+", metavar="F", help="summarize runs kept by --json instead (files pooled)")
    a = ap.parse_args()
    if a.ideal:
        return ideal(a.ideal, a.ideal_dispatch, a.rho)
    if a.from_json:
        return from_json(a.proxy, a.faults.split(","), a.from_json)
    strategy = a.strategy or STRATEGY[a.proxy]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    faults = a.faults.split(",")
    rate = a.rho * testbed.last_lambda0()
    b = testbed.Bench(Path(tempfile.mkdtemp(prefix="huntlb-faults-")), [a.proxy], False)
    drive = testbed.drive
    pending = []

    inside = []  # the next run's requests file, when --inside

    def driven(*args, **kw):
        if inside:
            kw["requests"] = inside.pop()
        t = None
        if pending:
            f = pending.pop()
            t = threading.Thread(target=f.run, args=(time.monotonic(),), daemon=True)
            t.start()
        try:
            return drive(*args, **kw)
        finally:
            if t:
                t.join(15)

    testbed.drive = driven
    runs = []
    try:
        for rep in range(a.first_rep, a.first_rep + a.reps):
            kinds = ["none", *faults] if rep % 2 == 0 else [*reversed(faults), "none"]
            for kind in kinds:
                f = None
                if kind not in ("none", "control"):
                    f = Fault(b, kind)
                    pending.append(f)
                if a.inside:
                    a.inside.mkdir(parents=True, exist_ok=True)
                    inside.append(a.inside / f"rep{rep}-{kind}.requests")
                r = b.run(a.proxy, strategy, rate, testbed.seconds_for(rate, 10.0), rho=a.rho, rep=rep, instances=4,
                          keep_cdf=False, seed=testbed.common_seed(rate, rep, 4), sample=bool(a.inside))
                if a.inside:
                    (a.inside / f"rep{rep}-{kind}.samples.json").write_text(json.dumps(r.samples))
                    phases(a.inside / f"rep{rep}-{kind}.requests")
                r.policy = kind
                back = f.back_after if f else None
                print(f"    {kind}: back in use after {back:.3f} s, fault at {f.at:.2f}" if back is not None else f"    {kind}", flush=True)
                runs.append((r, back))
    finally:
        b.close()
    write_json(a.json, "".join(json.dumps({**r.to_json(), "fault": r.policy, "back_after_s": back}, sort_keys=True) + "\n"
                   for r, back in runs))
    summarize(a.proxy, faults, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
