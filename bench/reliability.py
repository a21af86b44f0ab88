#!/usr/bin/env python3
"""Reliability under faults, overload and time (docs/reliability.md),
through the shipped hunting fronts over real agents and workload apps.

* faults: 12 backends (32 workers, 2 emulated cores, exp 20 ms jobs), Poisson
  load at rho 0.8 through each proxy; one backend's app is SIGKILLed, then its
  agent, then both, then its app SIGSTOPped for 10 s, then every backend is
  restarted in turn (SIGTERM, drain, start again); last, one of three fronts
  is killed while the other two carry the load. Per fault: client errors,
  the requests that were inside the broken backend when it broke (the most a
  proxy may lose without replaying), how long until the front marked it down
  (health: 0.5 s interval x 2 failures) and back up (x 2 successes).
* overload: rho 1.2 for 30 s, then rho 0.5: every request answered (served or
  a clear error), tries per request from the proxy's own stats, latency back
  to normal within 10 s.
* soak: rho 0.9 for N minutes through each proxy; RSS and open fds of the
  proxy and the agents every 10 s.
* exactly-once: the long form of tests/test_exactly_once.py's volume test
  (harness/volume.py): --posts unique POSTs (100000) through each front, with
  refusals, app 5xx and 425s, app responses carrying hunt headers, an app and
  then an agent SIGKILLed; counted at the apps.

Usage: python3 bench/reliability.py {faults,overload,soak,exactly-once} [--proxies envoy haproxy] [--minutes 10] [--posts N]
Writes its section of bench/data/reliability.json and regenerates docs/reliability.md
(`report`: only that).
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
import time
from pathlib import Path

from benchlib.fleet import Fleet, drive, summary
from benchlib import data as rundata
from benchlib.render import render
from benchlib.reports import ROOT, RESULTS, data_path, flag, machine
from harness import Addrs, Front, HaproxyRoot, Procs, envoy_stats, haproxy_runtime, wait_all_up

PROXIES = ("envoy", "haproxy")
N, CORES, MEAN_MS = 12, 2.0, 20.0
CAPACITY = N * CORES / (MEAN_MS / 1000)  # req/s the apps can serve
POLICY = "dynamic:seen_margin=1"  # the agent's default (policy::DEFAULT_POLICY)
JSON = data_path("reliability")
DOC = ROOT / "docs" / "reliability.md"


def fleet_and_front(work: Path, proxy: str, hr: HaproxyRoot, fronts: int = 1) -> tuple[Procs, Fleet, list[Front]]:
    procs, addrs = Procs(work), Addrs()
    fleet = Fleet(procs, addrs, [CORES] * N, workers=32, mean_ms=MEAN_MS, policy=POLICY).start()
    # the shipped front as it is: Envoy offers to FULL_SCAN's pick, HAProxy to its least-loaded server
    fs = [fleet.front(proxy, True, None, hr, name=f"rel{i}") for i in range(fronts)]
    return procs, fleet, fs


def health_key(proxy: str, fleet: Fleet, i: int) -> str:
    return fleet.backends[i].agent if proxy == "envoy" else f"web{i + 1}"


class Watch:
    """Polls the front's view of one backend every 50 ms: when it went down, when up."""

    def __init__(self, front: Front, key: str):
        self.front, self.key = front, key
        self.events: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        last, deadline = None, time.monotonic() + 600
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                up = self.front.health().get(self.key)
            except OSError:
                up = None
            if up is not None and up != last:
                self.events.append((time.monotonic(), up))
                last = up
            self._stop.wait(0.05)

    def first(self, up: bool, after: float) -> float | None:
        t = next((t for t, u in self.events if u == up and t >= after), None)
        return None if t is None else round(t - after, 2)

    def stop(self):
        self._stop.set()
        self._t.join(timeout=5)


def inflight(b) -> int:
    try:
        return int(b.metrics()["huntlb_inflight"])
    except (OSError, KeyError):
        return 0


def failed_at_app(b) -> int:
    """Requests the agent saw fail inside its app (reset or timed out mid-request):
    each answered 502/504, none re-sent, since the app may have processed it."""
    m = b.metrics()
    return int(sum(m.get(f'huntlb_app_errors_total{{kind="{k}"}}', 0) for k in ("other", "timeout")))


def drive_during(urls: list[str], rate: float, seconds: float, out: Path, action) -> dict:
    """Run the load and, meanwhile, `action()` (which returns what it measured)."""
    got = {}
    t = threading.Thread(target=lambda: got.update(rep=summary(drive(urls, rate, seconds, out, max_lateness_us=20000))))
    t.start()
    try:
        measured = action()
    finally:
        t.join(timeout=seconds + 240)
    return {**got["rep"], **measured}


def fault_row(proxy: str, fault: str, rep: dict, expect_inside: bool = True) -> dict:
    row = {"proxy": proxy, "offer": OFFER[proxy], "fault": fault, "requests": rep["completed"] + rep["errors"], "errors": rep["errors"],
           "inside": rep.get("inside", 0), "down_s": rep.get("down_s"), "up_s": rep.get("up_s"),
           "p99_ms": round(rep["p99_ms"], 1), "valid": rep["valid"]}
    print(f"  {proxy:8s} {fault:28s} errors {row['errors']:4d} (inside {row['inside']}), down after {row['down_s']} s,"
          f" up after {row['up_s']} s, p99 {row['p99_ms']} ms", flush=True)
    return row


def faults(work: Path, proxies) -> list[dict]:
    rows = []
    rate = 0.8 * CAPACITY
    for proxy in proxies:
        hr = HaproxyRoot("2.6")
        procs, fleet, (front,) = fleet_and_front(work, proxy, hr)
        try:
            for fault in ("app SIGKILL", "agent SIGKILL", "app and agent SIGKILL", "app SIGSTOP 10 s"):
                v = fleet.backends[0]
                w = Watch(front, health_key(proxy, fleet, 0))

                def act():
                    time.sleep(4)
                    failed0 = failed_at_app(v)
                    inside = inflight(v)  # a few ms before the kill: arrivals in between are missed
                    t0 = time.monotonic()
                    if fault == "app SIGKILL":
                        v.app_proc.signal(signal.SIGKILL)
                    elif fault == "agent SIGKILL":
                        v.agent_proc.signal(signal.SIGKILL)
                    elif fault == "app and agent SIGKILL":
                        fleet.kill(0)
                    else:
                        v.app_proc.signal(signal.SIGSTOP)
                    time.sleep(10 if "SIGSTOP" in fault else 5)
                    if fault == "app SIGKILL":
                        # the agent survives and counted them itself: exact, not a sample
                        inside = failed_at_app(v) - failed0
                    t1 = time.monotonic()
                    if fault == "app SIGKILL":
                        v.app_proc, _ = procs.workload(v.host, workers=32, cores=CORES, demand=f"exp:{MEAN_MS}", seed=77)
                    elif fault == "agent SIGKILL":
                        v.agent_proc, _, _ = procs.agent(v.host, v.app, policy=POLICY, workers=32, drain_grace_ms=0)
                    elif fault == "app and agent SIGKILL":
                        fleet.revive(0)
                    else:
                        v.app_proc.signal(signal.SIGCONT)
                    time.sleep(6)
                    # a SIGSTOPped app keeps its requests: they are answered late, not lost
                    return {"inside": 0 if "SIGSTOP" in fault else inside, "down_s": w.first(False, t0), "up_s": w.first(True, t1)}

                rep = drive_during([front.url], rate, 25 if "SIGSTOP" in fault else 20, work / f"{proxy}-{len(rows)}.json", act)
                w.stop()
                rows.append(fault_row(proxy, fault, rep))
                wait_all_up(front, N, timeout=30)
            rows.append(fault_row(proxy, "rolling SIGTERM restart", rolling_restart(work, procs, fleet, front, rate)))
        finally:
            procs.stop_all()
            hr.cleanup()
        rows.append(fault_row(proxy, "one of 3 fronts SIGKILLed", front_killed(work, proxy, rate)))
    return rows


def rolling_restart(work: Path, procs: Procs, fleet: Fleet, front: Front, rate: float) -> dict:
    # Agents as deployed: after SIGTERM each keeps serving for drain_grace (2 s)
    # while its health says 503, so the front stops sending before it closes
    # (the fleet's agents start with no grace, for the kills above).
    for b in fleet.backends:
        b.agent_proc.stop()
        b.agent_proc, _, _ = procs.agent(b.host, b.app, policy=POLICY, workers=32)
    wait_all_up(front, N, timeout=30)

    def act():
        time.sleep(2)
        for i, b in enumerate(fleet.backends):
            b.agent_proc.signal(signal.SIGTERM)  # the agent drains: health 503, in-flight finished
            b.agent_proc.wait(timeout=40)
            b.app_proc.stop()
            b.app_proc, _ = procs.workload(b.host, workers=32, cores=CORES, demand=f"exp:{MEAN_MS}", seed=300 + i)
            b.agent_proc, _, _ = procs.agent(b.host, b.app, policy=POLICY, workers=32)
            wait_all_up(front, N, timeout=30)
        return {}
    return drive_during([front.url], rate, 75, work / "rolling.json", act)


def front_killed(work: Path, proxy: str, rate: float) -> dict:
    hr = HaproxyRoot("2.6")
    procs, fleet, fs = fleet_and_front(work, proxy, hr, fronts=3)
    try:
        def act():
            time.sleep(4)
            fs[0].proc.signal(signal.SIGKILL)
            # the survivors' clients: does anything they send fail?
            return {}
        # load on the two survivors; the killed front's own clients are the ones it had
        return drive_during([f.url for f in fs[1:]], rate, 15, work / "fronts.json", act)
    finally:
        procs.stop_all()
        hr.cleanup()


def tries(proxy: str, front: Front, fleet: Fleet) -> dict:
    """Cumulative counts of client requests and of tries sent upstream: from the
    proxy's own stats, and as the agents counted the tries they received."""
    host = front.url.split("//")[1].split(":")[0]
    if proxy == "envoy":
        s = envoy_stats(f"{host}:9902")
        req, up = s.get("http.front.downstream_rq_total", 0), s.get("cluster.backends.upstream_rq_total", 0)
    else:
        out = haproxy_runtime(f"{host}:9999", "show stat").splitlines()
        head = out[0].lstrip("# ").split(",")
        rows = [dict(zip(head, line.split(","))) for line in out[1:] if line]
        fe = next(r for r in rows if r["svname"] == "FRONTEND" and r["pxname"] == "front")
        be = next(r for r in rows if r["svname"] == "BACKEND" and r["pxname"] == "hunt")
        # every try past a request's first is a retry (wretr counts L7 retries too)
        req = float(fe["req_tot"] or 0)
        up = req + float(be["wretr"] or 0)
    at_agents = 0.0
    for b in fleet.backends:
        m = b.metrics()
        at_agents += sum(v for k, v in m.items() if k.startswith(("huntlb_offers_total", "huntlb_finals_total", "huntlb_plain_total",
                                                                   "huntlb_malformed_total")))
    return {"requests": req, "tries": up, "at_agents": at_agents}


def overload(work: Path, proxies) -> list[dict]:
    rows = []
    for proxy in proxies:
        hr = HaproxyRoot("2.6")
        procs, fleet, (front,) = fleet_and_front(work, proxy, hr)
        try:
            base = summary(drive([front.url], 0.5 * CAPACITY, 10, work / f"{proxy}-base.json", max_lateness_us=20000))
            c0 = tries(proxy, front, fleet)
            raw = drive([front.url], 1.2 * CAPACITY, 30, work / f"{proxy}-over.json", max_lateness_us=20000)
            over = summary(raw, must_keep_up=False)  # overload cannot keep up, by design
            c1 = tries(proxy, front, fleet)
            per = lambda k: round((c1[k] - c0[k]) / max(1, c1["requests"] - c0["requests"]), 3)  # noqa: E731
            after = [summary(drive([front.url], 0.5 * CAPACITY, 10, work / f"{proxy}-after{k}.json", max_lateness_us=20000))
                     for k in range(2)]
            row = {"proxy": proxy, "offer": OFFER[proxy], "base_p50_ms": round(base["p50_ms"], 1), "over_requests": over["completed"] + over["errors"],
                   "over_served": over["completed"], "over_errors": over["errors"], "over_p99_ms": round(over["p99_ms"], 1),
                   # what the errors were: statuses the clients got, and failures with no answer
                   "over_error_kinds": {**{k: v for k, v in raw["status"].items() if not k.startswith("2")}, **raw["error_kinds"]},
                   "tries_per_request": per("tries"), "tries_per_request_at_agents": per("at_agents"),
                   "after_p50_ms": [round(a["p50_ms"], 1) for a in after], "after_errors": [a["errors"] for a in after],
                   "valid": over["valid"] and base["valid"]}
            print(f"  {proxy}: {row}", flush=True)
            rows.append(row)
        finally:
            procs.stop_all()
            hr.cleanup()
    return rows


def rss_fds(pid: int) -> tuple[float, int]:
    try:
        rss = next(int(l.split()[1]) for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:")) / 1024
        fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
        return rss, fds
    except (OSError, StopIteration):
        return float("nan"), -1


def soak(work: Path, proxies, minutes: float) -> list[dict]:
    rows = []
    for proxy in proxies:
        hr = HaproxyRoot("2.6")
        procs, fleet, (front,) = fleet_and_front(work, proxy, hr)
        samples, stop = [], threading.Event()

        def sample():
            t0 = time.monotonic()
            while not stop.is_set() and time.monotonic() - t0 < minutes * 60 + 120:
                agents = [rss_fds(b.agent_proc.pid) for b in fleet.backends]
                samples.append({"t": round(time.monotonic() - t0, 1), "proxy": rss_fds(front.pid),
                                "agents_rss_mb": sum(a[0] for a in agents), "agents_fds": sum(a[1] for a in agents)})
                stop.wait(10)
        s = threading.Thread(target=sample, daemon=True)
        s.start()
        try:
            rep = summary(drive([front.url], 0.9 * CAPACITY, minutes * 60, work / f"{proxy}-soak.json", max_lateness_us=20000))
        finally:
            stop.set()
            s.join(timeout=20)
            procs.stop_all()
            hr.cleanup()
        warm = [x for x in samples if x["t"] >= 60] or samples
        growth = lambda f: (f(warm[-1]) / f(warm[0]) - 1) * 100 if f(warm[0]) else 0.0  # noqa: E731
        row = {"proxy": proxy, "offer": OFFER[proxy], "minutes": minutes, "requests": rep["completed"] + rep["errors"], "errors": rep["errors"],
               "p99_ms": round(rep["p99_ms"], 1), "valid": rep["valid"],
               "proxy_rss_growth_pct": round(growth(lambda x: x["proxy"][0]), 1),
               "proxy_fds": [warm[0]["proxy"][1], warm[-1]["proxy"][1]],
               "agents_rss_growth_pct": round(growth(lambda x: x["agents_rss_mb"]), 1),
               "agents_fds": [warm[0]["agents_fds"], warm[-1]["agents_fds"]], "samples": samples}
        print(f"  {proxy}: { {k: v for k, v in row.items() if k != 'samples'} }", flush=True)
        rows.append(row)
    plot_soak(rows)
    return rows


def plot_soak(rows: list[dict]) -> None:
    from benchlib.plots import pyplot, save
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for r in rows:
        ts = [s["t"] / 60 for s in r["samples"]]
        axes[0].plot(ts, [s["proxy"][0] for s in r["samples"]], label=f"{r['proxy']} proxy")
        axes[0].plot(ts, [s["agents_rss_mb"] for s in r["samples"]], ls="--", label=f"12 agents ({r['proxy']} run)")
        axes[1].plot(ts, [s["proxy"][1] for s in r["samples"]], label=f"{r['proxy']} proxy")
        axes[1].plot(ts, [s["agents_fds"] for s in r["samples"]], ls="--", label=f"12 agents ({r['proxy']} run)")
    for ax, what in zip(axes, ("RSS (MB)", "open fds")):
        ax.set_xlabel("minutes at ρ 0.9")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, RESULTS, "reliability-soak.png")


def exactly_once(work: Path, proxies, posts: int) -> list[dict]:
    from harness import volume
    rows = []
    for proxy in proxies:
        procs, addrs = Procs(work), Addrs()
        t0 = time.monotonic()
        try:
            v = volume.verdict(volume.run(procs, addrs, {"envoy": "envoy", "haproxy": "haproxy-2.6"}[proxy], work, posts))
        finally:
            procs.stop_all()
        row = {"proxy": proxy, "posts": v["sent"], "seconds": round(time.monotonic() - t0), "refused": int(v["refused"]),
               "twice": len(v["twice"]), "ok_unprocessed": len(v["ok_unprocessed"]), "wrong": len(v["wrong"]),
               "not_processed": v["not_processed"]}
        print(f"  exactly-once {proxy}: {row}", flush=True)
        rows.append(row)
    return rows


# What each shipped front offers to, stamped on every row: Envoy's front offered
# to LEAST_REQUEST's pick (two random hosts) before FULL_SCAN's ("full"),
# HAProxy's to a random server before its least-loaded one ("least").
OFFER = {"envoy": "full", "haproxy": "least"}


def label(r: dict) -> str:
    """The proxy, and for rows measured before its front's current offer, which
    one they ran (HAProxy rows without "offer" ran random offers; Envoy rows
    without "full" offered to LEAST_REQUEST's pick)."""
    if r["proxy"] == "haproxy" and r.get("offer") != "least":
        return "haproxy (random offer)"
    if r["proxy"] == "envoy" and r.get("offer") != "full":
        return "envoy (LEAST_REQUEST offer)"
    return r["proxy"]


def report(data: dict) -> str:
    """docs/reliability.md: bench/reports/reliability.md, then a section per
    experiment measured (reliability.EXPERIMENT.md), then reliability.tail.md."""
    out = [render("reliability", {"servers": N, "cores": f"{CORES:g}", "mean_ms": f"{MEAN_MS:g}", "capacity": f"{CAPACITY:.0f}"},
                  part=True)]
    fmt = lambda v: "-" if v is None else f"{v} s"  # noqa: E731
    rows = {
        "faults": lambda r: f"| {label(r)} | {r['fault']} | {r['requests']} | {flag(r['errors'])} | {r['inside']} | "
                            f"{fmt(r['down_s'])} | {fmt(r['up_s'])} | {r['p99_ms']} |",
        "overload": lambda r: f"| {label(r)} | {r['base_p50_ms']} ms | {r['over_requests']} | {r['over_served']} | {r['over_errors']} "
                              f"({', '.join(f'{k}: {v}' for k, v in sorted(r.get('over_error_kinds', {}).items()))}) | "
                              f"{r['over_p99_ms']} | {r['tries_per_request']} / {r['tries_per_request_at_agents']} | "
                              f"{r['after_p50_ms'][0]} / {r['after_p50_ms'][1]} ms | {r['after_errors'][0]} / {r['after_errors'][1]} |",
        "exactly-once": lambda r: f"| {r['proxy']} | {r['posts']} | {r['seconds']} | {r['refused']} | **{r['twice']}** | "
                                  f"{r['ok_unprocessed']} | {r['wrong']} | {r['not_processed']} |",
        "soak": lambda r: f"| {label(r)} | {r['minutes']} | {r['requests']} | {flag(r['errors'])} | {r['p99_ms']} | "
                          f"{r['proxy_rss_growth_pct']}% | {r['proxy_fds'][0]} → {r['proxy_fds'][1]} | "
                          f"{r['agents_rss_growth_pct']}% | {r['agents_fds'][0]} → {r['agents_fds'][1]} |",
    }
    for experiment, row in rows.items():
        if experiment in data:
            d = data[experiment]
            out.append(render(f"reliability.{experiment}", {"machine": d["machine"], "date": d["date"],
                                                            "rows": "\n".join(row(r) for r in d["rows"])}, part=True))
    out.append(render("reliability.tail", {}, part=True))
    return "\n".join(out)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", choices=["faults", "overload", "soak", "exactly-once", "report"])
    ap.add_argument("--posts", type=int, default=100_000, help="exactly-once: POSTs per front")
    ap.add_argument("--proxies", nargs="+", default=list(PROXIES), choices=PROXIES)
    ap.add_argument("--minutes", type=float, default=10.0, help="soak length per proxy")
    a = ap.parse_args()
    data = rundata.read(JSON) if JSON.exists() else {}
    if a.experiment != "report":
        work = Path(tempfile.mkdtemp(prefix=f"huntlb-{a.experiment}-"))
        run = {"faults": lambda: faults(work, a.proxies), "overload": lambda: overload(work, a.proxies),
               "soak": lambda: soak(work, a.proxies, a.minutes),
               "exactly-once": lambda: exactly_once(work, a.proxies, a.posts)}[a.experiment]
        rows = run()
        # a run of some proxies replaces their rows and keeps the others'
        kept = [r for r in data.get(a.experiment, {}).get("rows", []) if r["proxy"] not in a.proxies]
        data[a.experiment] = {"machine": machine(), "date": time.strftime("%Y-%m-%d"),
                              "rows": sorted(kept + rows, key=lambda r: PROXIES.index(r["proxy"]))}
        rundata.write(JSON, data)
    DOC.write_text(report(data) + "\n")
    print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
