"""What an orchestrator does to a running fleet, under load, on the real
cluster (harness/k8sfleet.py): each event runs while both proxies' fronts take
open-loop load, and is counted at the client and at the apps.

    steady    none: the fleet as it runs, its forwards counted
    rollout   kubectl rollout restart of the apps' Deployment
    delete    one app pod deleted (kubectl delete pod: its grace, the agent's drain)
    drain     a node drained (kubectl drain: its pods evicted), then uncordoned
    scale     the apps scaled 12 -> 16 (every front and agent using the new
              pods) -> 12
    rotate    the fleet key rotated by helm upgrade (docs/kubernetes.md's
              steps 2-4, each on every pod before the next)
    front     one Envoy and one HAProxy front pod deleted (each drains first)

`run(fleet, names)` returns one row per event: per proxy, requests sent,
client errors, paths processed twice, answered requests that never arrived,
and the event's own findings. scripts/k8s_demo.py prints them;
tests/test_k8s_cluster.py asserts them.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

from harness import k8scluster as k8s
from harness.k8sfleet import NS, PROXIES, RELEASE, Fleet, tally

# Seconds of load around each event: long enough for it on 2 busy cores (a
# rollout of 12 pods waits out each old pod's drain, 5 s, three at a time).
BUDGET = {"steady": 40, "rollout": 120, "delete": 60, "drain": 100, "scale": 120, "rotate": 180, "front": 60}
LEAD_S = 5  # load before the event starts


def _rollout(f: Fleet) -> dict:
    f.kubectl("rollout", "restart", f"deploy/{RELEASE}")
    f.kubectl("rollout", "status", f"deploy/{RELEASE}", "--timeout=150s", timeout=160)
    return {}


def _delete(f: Fleet) -> dict:
    victim = f.app_pods()[0]["metadata"]["name"]
    f.kubectl("delete", "pod", victim, "--wait=true", timeout=90)
    f.kubectl("rollout", "status", f"deploy/{RELEASE}", "--timeout=90s", timeout=100)
    return {"deleted": victim}


def _drain(f: Fleet) -> dict:
    # a worker node without CoreDNS (the fronts find the apps through it) or the load pod (node 0)
    dns = json.loads(f.c.kubectl("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "json"))["items"]
    busy = {p["spec"].get("nodeName") for p in dns} | {k8s.node_name(0)}
    node = next(n for n in f.c.names if n not in busy)
    evicted = [p["metadata"]["name"] for p in f.pods(None) if p["spec"].get("nodeName") == node]
    f.c.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s", timeout=130)
    for d in (f"deploy/{RELEASE}", "deploy/envoy", "deploy/haproxy"):
        f.kubectl("rollout", "status", d, "--timeout=120s", timeout=130)
    f.c.kubectl("uncordon", node)
    return {"node": node, "evicted": len(evicted)}


def _scale(f: Fleet) -> dict:
    before = {p["metadata"]["name"] for p in f.app_pods()}
    f.kubectl("scale", f"deploy/{RELEASE}", "--replicas=16")
    f.kubectl("rollout", "status", f"deploy/{RELEASE}", "--timeout=120s", timeout=130)
    new = sorted({p["metadata"]["name"] for p in f.app_pods()} - before)
    t0 = time.monotonic()
    # every agent counting 15 other members (the headless Service through CoreDNS)
    k8s._wait("every agent seeing 16 members", lambda: all(
        m.get("huntlb_fleet_members") == 15 for m in f.agent_metrics().values()), 60)
    members_s = time.monotonic() - t0
    time.sleep(20)  # the new pods serve both proxies' load a while
    f.kubectl("scale", f"deploy/{RELEASE}", "--replicas=12")
    f.kubectl("rollout", "status", f"deploy/{RELEASE}", "--timeout=120s", timeout=130)
    k8s._wait("every agent seeing 12 members", lambda: all(
        m.get("huntlb_fleet_members") == 11 for m in f.agent_metrics().values()), 60)
    return {"new": new, "members_s": round(members_s, 1)}


def _key_lines(f: Fleet) -> dict[str, list[str]]:
    out = {}
    for p in f.app_pods():
        name = p["metadata"]["name"]
        log = f.kubectl("logs", name, "-c", "huntlb-agent", check=False, timeout=30)
        out[name] = [line for line in log.splitlines() if "fleet_key_file changed" in line]
    return out


def _rotate(f: Fleet) -> dict:
    """docs/kubernetes.md, "Rotating the key": steps 2, 3, 4, each waited
    for on every pod (its agent's log) before the next; meanwhile every
    agent's view is sampled: members heard, reports refused as unauthenticated."""
    old = f.key_file.read_text().strip()
    new = __import__("secrets").token_hex(32)
    views: list[dict] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                views.append(f.agent_metrics())
            except Exception:  # noqa: BLE001 - a pod gone between list and read
                pass
            stop.wait(1)
    w = threading.Thread(target=watch, daemon=True)
    w.start()
    bad0 = _unauthenticated(f)
    try:
        for keys, n in ((f"{old}\n{new}\n", 2), (f"{new}\n{old}\n", 2), (f"{new}\n", 1)):
            seen = {p: len(v) for p, v in _key_lines(f).items()}
            f.key_file.write_text(keys)
            f.helm("upgrade", RELEASE, str(k8s.ROOT / "charts/huntlb"), "-n", NS, "--reuse-values",
                   "--set-file", f"fleetKey.value={f.key_file}")
            k8s._wait(f"every agent reading {n} key(s)", lambda: all(
                len(v) > seen.get(p, 0) and f"keys={n}" in v[-1] for p, v in _key_lines(f).items()), 90, interval=2)
    finally:
        stop.set()
        w.join(5)
    sample = min(8, len(f.app_pods()) - 1)
    # A member benched (a forward it did not take within fleet_commit_ms:
    # out for 100 to 800 ms, heard all along) has a gauge of its own, and says
    # nothing of the key; any other member missing is one unheard or not ready.
    short = [{"pod": name, "peers": m.get("huntlb_fleet_peers"), "benched": m.get("huntlb_fleet_peers_benched"),
              "unheard": m.get("huntlb_fleet_peers_unheard")} for v in views for name, m in v.items()
             if m and m.get("huntlb_fleet_peers", 0) + m.get("huntlb_fleet_peers_benched", 0) != sample]
    benched = sum(1 for v in views for m in v.values() if m and m.get("huntlb_fleet_peers_benched", 0) > 0)
    return {"views": len(views), "view_short": len(short), "short_reads": short[:10], "view_benched": benched,
            "unauthenticated": _unauthenticated(f) - bad0}


def _unauthenticated(f: Fleet) -> float:
    total = 0.0
    for p in f.app_pods():
        text = f.c.docker_exec(1, "curl", "-sf", "--max-time", "3", f"http://{p['status']['podIP']}:9901/metrics", check=False)
        total += sum(float(line.split()[-1]) for line in text.splitlines()
                     if line.startswith('huntlb_fleet_reports_bad_total{reason="unauthenticated"}'))
    return total


def _front(f: Fleet) -> dict:
    gone = []
    for p in PROXIES:
        pod = next(x for x in f.pods(f"front={p}") if x["metadata"].get("deletionTimestamp") is None)["metadata"]["name"]
        f.kubectl("delete", "pod", pod, "--wait=false")
        gone.append(pod)
    for p in PROXIES:
        f.kubectl("rollout", "status", f"deploy/{p}", "--timeout=90s", timeout=100)
    k8s._wait("the deleted fronts gone", lambda: not set(gone) & {p["metadata"]["name"] for p in f.pods("front")}, 60)
    return {"deleted": gone}


def _steady(f: Fleet) -> dict:
    """No event: the fleet as it runs (its forwards, its CPU)."""
    time.sleep(BUDGET["steady"] - LEAD_S - 10)
    return {}


EVENTS: dict[str, Callable[[Fleet], dict]] = {
    "steady": _steady, "rollout": _rollout, "delete": _delete, "drain": _drain, "scale": _scale, "rotate": _rotate, "front": _front}


def run(f: Fleet, names: list[str], rate: float = 50, log=print) -> list[dict]:
    rows = []
    run_id = time.strftime("%H%M%S")  # paths unique across runs on one cluster
    for name in names:
        budget = BUDGET[name]
        phase = f"{name}-{run_id}"
        sent0 = f.forwards_sent()
        load = f.start_load(phase, rate, budget)
        time.sleep(LEAD_S)
        t0 = time.monotonic()
        found, err = {}, None
        try:
            found = EVENTS[name](f)
        except Exception as e:  # noqa: BLE001 - reported in the row, the load finished first
            err = f"{type(e).__name__}: {e}"
        took = time.monotonic() - t0
        out = f.finish(load)
        # the tier at work: forwards the agents that ran through the phase sent
        sent = {p: n - sent0[p] for p, n in f.forwards_sent().items() if p in sent0}
        found["forwards_sent"] = int(sum(sent.values()))
        row = {"event": name, "took_s": round(took, 1), "budget_s": budget, "error": err, "found": found,
               "proxies": tally(out, f.arrivals(), phase)}
        row["outlasted_load"] = took + LEAD_S > budget
        log(summary(row))
        rows.append(row)
    return rows


def summary(row: dict) -> str:
    cells = []
    for p, r in row["proxies"].items():
        cells.append(f"{p}: {r['errors']} errors / {r['sent']}, {len(r['twice'])} twice, "
                     f"{len(r['answered_not_arrived'])} answered unseen, {len(r['pods'])} pods")
    extra = f" ERROR {row['error']}" if row["error"] else ""
    return f"{row['event']:8s} {row['took_s']:5.1f} s  " + "; ".join(cells) + f"  {row['found']}{extra}"
