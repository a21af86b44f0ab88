#!/usr/bin/env python3
"""The vs-least comparison on the real cluster (harness/k8scluster.py): the
proxy's own least-request against the tier under the same plain fronts, and
one front's ideal, paired on the seeds the loopback and emulated beds use.

  PYTHONPATH=.:bench HUNTLB_PROFILE=release .venv/bin/python bench/k8s_pairs.py haproxy --reps 5 --json F

Two releases of the chart side by side in one namespace, each 12 pods of the
vs-least testbed's app (32 workers, 2 emulated cores, backlog 128, jobs sized
by the load generator: exp 20 ms from the run's seed) beside the agent:
`shop` as the chart installs it (`fronts.mode: plain`, so the agents pass on
a busy backend's tries: the tier under plain fronts, `FWDp/plain`), and
`base` with `fronts.mode: hunt-pass` (plain fronts' tries are relayed, never
passed on: the proxy's own least-request, the tier only beating). Each
release has 4 front pods of each proxy (compose's images and least-request
configs, the apps found through a headless Service by CoreDNS). The load
generator runs in the load pod on node 0 and sends to the front pods' IPs,
each request to one front (`NAME@1`: to the first front only, the ideal).

Each run reads, from the host's /proc, the CPU of the agents of its release
and of the fronts it went through (matched to their pods by cgroup), and the
tier's reports from the agents' /metrics. Runs are written as bench/pairs.py
writes them (`pairs.py --from F` reads them; `bed` is "kubernetes"), so
bench/cluster_report.py pairs them with the other beds by repetition.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from benchlib import testbed
from benchlib.fleet import summary
from benchlib.runs import Run
from benchlib.tools import proc_cpu_seconds
from harness import k8scluster as k8s
from harness import k8sfleet as kf

# release -> fronts.mode: the tier under plain fronts, and plain fronts' tries only relayed
RELEASES = {"shop": "plain", "base": "hunt-pass"}
BASELINE = {"envoy": "LR/full", "haproxy": "leastconn"}
TIER = "FWDp/plain"
APPS, WORKERS = testbed.SERVERS, testbed.WORKERS


def arm(proxy: str, name: str) -> tuple[str, int | None]:
    """A strategy's name -> (its release, how many fronts: None for all)."""
    policy, _, fronts = name.partition("@")
    if policy == TIER:
        return "shop", int(fronts) if fronts else None
    if policy == BASELINE[proxy]:
        return "base", int(fronts) if fronts else None
    raise SystemExit(f"{name}: known here are {BASELINE[proxy]}, {TIER}, and either @N")


def install(f: kf.Fleet, fronts: int) -> None:
    """Both releases (the first by the docs' own commands, as the events'
    tests do), the bench's app, and each release's fronts."""
    f.install(apps=APPS, fronts=fronts)
    images = {p: f"huntlb/{p}:dev" for p in ("app", "envoy", "haproxy")}
    f.values_file.write_text(kf.values(images["app"], APPS, workers=WORKERS, arrivals=False))
    f.helm("upgrade", kf.RELEASE, str(kf.ROOT / "charts/huntlb"), "-n", kf.NS, "--reuse-values", "-f", str(f.values_file))
    f.helm("install", "base", str(kf.ROOT / "charts/huntlb"), "-n", kf.NS, "-f", str(f.values_file),
           "--set", "fronts.mode=hunt-pass", "--set-file", f"fleetKey.value={f.key_file}")
    f.kubectl("apply", "-f", "-", input=kf.fronts_manifest(images, fronts, release="base", load_pod=False).encode())
    for d in (f"deploy/{kf.RELEASE}", "deploy/base", "deploy/envoy-base", "deploy/haproxy-base", "deploy/envoy", "deploy/haproxy"):
        f.kubectl("rollout", "status", d, "--timeout=300s", timeout=310)
    def heard() -> bool:
        ms = [agent_metrics(f, r) for r in RELEASES]
        return all(kf.hears_sample(m, APPS) for m in ms)
    k8s._wait("every agent of both releases hearing its sample", heard, 120)


def ready_pods(f: kf.Fleet, selector: str) -> list[dict]:
    return [p for p in f.pods(selector) if p["metadata"].get("deletionTimestamp") is None and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


def agent_metrics(f: kf.Fleet, release: str) -> dict[str, dict[str, float]]:
    out = {}
    for p in ready_pods(f, f"app.kubernetes.io/instance={release}"):
        text = f.c.docker_exec(1, "curl", "-sf", "--max-time", "3", f"http://{p['status']['podIP']}:9901/metrics", check=False)
        out[p["metadata"]["name"]] = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                                      if line and not line.startswith("#") and len(line.split()) == 2}
    return out


def pids_of(pods: list[dict], comm: str) -> list[int]:
    """The host's PIDs of processes named `comm` in these pods (their cgroup
    names the pod's UID: `pod<uid>`, or `pod<uid with _>` under systemd)."""
    uids = {p["metadata"]["uid"] for p in pods}
    keys = {u: (f"pod{u}", f"pod{u.replace('-', '_')}") for u in uids}
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if open(f"/proc/{d}/comm").read().strip() != comm:
                continue
            cg = open(f"/proc/{d}/cgroup").read()
        except OSError:
            continue
        if any(k in cg for ks in keys.values() for k in ks):
            out.append(int(d))
    return out


def cpu(pids: list[int]) -> float:
    total = 0.0
    for p in pids:
        try:
            total += proc_cpu_seconds(p)
        except OSError:
            pass
    return total


def run(f: kf.Fleet, proxy: str, name: str, rate: float, seconds: float, rep: int, seed: int, fronts: int,
        mean_ms: float) -> Run:
    """One measured run, repeated (up to testbed.REPEATS times) while the
    generator flags it invalid (it fell behind its schedule), as loopback's."""
    for attempt in range(1, testbed.REPEATS + 2):
        r = run_once(f, proxy, name, rate, seconds, rep, seed, fronts, mean_ms)
        r.attempts = attempt
        if r.valid:
            break
    return r


def run_once(f: kf.Fleet, proxy: str, name: str, rate: float, seconds: float, rep: int, seed: int, fronts: int,
             mean_ms: float) -> Run:
    release, n = arm(proxy, name)
    deploy = proxy if release == kf.RELEASE else f"{proxy}-{release}"
    front_pods = sorted(ready_pods(f, f"front={deploy}"), key=lambda p: p["metadata"]["name"])
    if len(front_pods) < fronts:
        raise RuntimeError(f"{deploy}: {len(front_pods)} front pods ready of {fronts}")
    used = front_pods[: n or fronts]
    apps = ready_pods(f, f"app.kubernetes.io/instance={release}")
    agents, fpids = pids_of(apps, "huntlb-agent"), pids_of(used, {"envoy": "envoy", "haproxy": "haproxy"}[proxy])
    if len(agents) != APPS or not fpids:
        raise RuntimeError(f"{name}: found {len(agents)} agents of {APPS} and {len(fpids)} front processes on the host")
    sent0 = sum(m.get("huntlb_fleet_reports_sent_total", 0) for m in agent_metrics(f, release).values())
    targets = " ".join(f"--target http://{p['status']['podIP']}:{kf.FRONT_PORT}" for p in used)
    a0, f0, t0 = cpu(agents), cpu(fpids), time.monotonic()
    out = f.kubectl("exec", "load", "--", "sh", "-c",
                    f"huntlb-loadgen --rate {rate:.2f} --duration {seconds} --arrival poisson --max-inflight 8192 "
                    f"--seed {seed} --json /tmp/run.json --max-lateness-us {int(mean_ms * 1000 / 4)} "
                    f"--work exp:{mean_ms:g} {targets} >/dev/null 2>&1; echo exit=$?; cat /tmp/run.json",
                    timeout=seconds + 180)
    dt = time.monotonic() - t0
    agents_cpu, fronts_cpu = (cpu(agents) - a0) / dt, (cpu(fpids) - f0) / dt
    first, _, report = out.partition("\n")
    if first.strip() not in ("exit=0", "exit=3"):  # 3: the run is in its report, flagged invalid
        raise RuntimeError(f"loadgen: {out[:500]}")
    sent = sum(m.get("huntlb_fleet_reports_sent_total", 0) for m in agent_metrics(f, release).values()) - sent0
    r = Run(**summary(json.loads(report)), proxy=proxy, policy=name, rate=rate, seconds=seconds, instances=len(used),
            load_per_server=[], fairness=None, rho=0.88, rep=rep, agents_cpu=agents_cpu, fronts_cpu=fronts_cpu,
            datagrams=sent / seconds if release == kf.RELEASE else None)
    bad = "" if r.valid else f"  INVALID: {r.invalid_reason}"
    print(f"  {proxy:7s} {name:13s} x{len(used)} rate {rate:7.1f}: mean {r.mean_ms:7.1f} ms p99 {r.p99_ms:8.1f} ms "
          f"errors {r.errors} agents {agents_cpu:.3f} fronts {fronts_cpu:.3f} cores"
          f"{f' {r.datagrams:.0f} datagrams/s' if r.datagrams is not None else ''}{bad}", flush=True)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("proxies", nargs="+", choices=["envoy", "haproxy"])
    ap.add_argument("--fronts", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--json", type=Path, help="write every run here, one file per proxy: NAME is the proxy's (haproxy-4-k8s.jsonl)")
    ap.add_argument("--longer", type=float, default=1.0, metavar="K",
                    help="jobs K times longer, arrivals K times fewer (bench/pairs.py --longer): the same ρ at 1/K of "
                    "the rate; on 2 cores the cluster cannot keep its generator on time at the full rate")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up")
    a = ap.parse_args()
    rate, mean_ms = 0.88 * testbed.last_lambda0() / a.longer, testbed.MEAN_MS * a.longer
    t0 = time.monotonic()
    runs: dict[str, list[Run]] = {p: [] for p in a.proxies}
    try:
        c = k8s.up(3)
        print(f"cluster: 3 nodes up in {time.monotonic() - t0:.0f} s", flush=True)
        with tempfile.TemporaryDirectory(prefix="huntlb-k8s-pairs-") as tmp:
            f = kf.Fleet(c, Path(tmp))
            install(f, a.fronts)
            print(f"installed: 2 x {APPS} apps with agents, 2 x {a.fronts} fronts of each proxy, "
                  f"{time.monotonic() - t0:.0f} s in; {rate:.1f} req/s", flush=True)
            for rep in range(a.reps):
                for proxy in a.proxies:
                    names = [BASELINE[proxy], TIER, f"{BASELINE[proxy]}@1"]
                    for name in (names if rep % 2 == 0 else list(reversed(names))):
                        r = run(f, proxy, name, rate, a.seconds, rep, testbed.common_seed(rate, rep, a.fronts), a.fronts,
                                mean_ms)
                        runs[proxy].append(r)
    finally:
        if not a.keep:
            left = k8s.down()
            if any(left.values()):
                print(f"left behind: {left}", file=sys.stderr)
        if a.json:
            for proxy, rs in runs.items():
                path = a.json.parent / re.sub(r"^[a-z]+", proxy, a.json.name)
                path.parent.mkdir(parents=True, exist_ok=True)
                setup = {"baseline": BASELINE[proxy], "fronts": a.fronts, "servers": APPS, "demand": "exp", "longer": a.longer,
                         "bed": "kubernetes"}
                path.write_text("".join(json.dumps({**r.to_json(), **setup}, sort_keys=True) + "\n" for r in rs))
                print(f"wrote {path}")
    print(f"{time.monotonic() - t0:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
