"""Exactly once at volume (docs/reliability.md): unique POSTs through one
committed front over four backends whose agents refuse about half the offers,
with app 5xx, app 425s, app responses carrying hunt headers, one app SIGKILLed
at 30% of the run and another backend's agent at 60%. The apps count arrivals
in files that survive the kill. The default tests run a short form
(tests/test_exactly_once.py); `bench/reliability.py exactly-once` the long one.
"""

from __future__ import annotations

import signal
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.fronts import start_front
from harness.hunters import Backend
from harness.net import request, wait_until
from harness.procs import Addrs, Procs

# Request i carries MIX[i % 20] (query, the status the app answers), else a plain 200.
MIX = {0: ("status=500", 500), 1: ("status=425", 425), 2: ("hdr=hunt:busy", 200), 3: ("status=503&hdr=hunt:busy", 503)}


def expected(i: int) -> int:
    return MIX.get(i % 20, ("", 200))[1]


def run(procs: Procs, addrs: Addrs, front_kind: str, work: Path, n_req: int, clients: int = 8) -> dict:
    """Send n_req unique POSTs from `clients` threads; returns the outcome per
    path as the clients saw it, the arrivals the apps counted, and the refusals."""
    bs, files = [], []
    for i in range(4):
        host = addrs.host()
        files.append(work / f"arrivals-{front_kind}-{i}")
        app_proc, app = procs.workload(host, workers=4, cores=2, demand="exp:5", arrivals=files[-1])
        agent_proc, agent, admin = procs.agent(host, app, policy="dynamic:window=20", workers=4)
        bs.append(Backend(host, app, agent, admin, app_proc, agent_proc))
    f = start_front(front_kind, procs, addrs, bs)
    outcome: dict[str, tuple[int, int | str]] = {}
    sent = [0]
    lock = threading.Lock()
    per = n_req // clients

    def client(k):
        for j in range(per):
            i = k * per + j
            query = MIX.get(i % 20, ("", 200))[0]
            path = f"/vol/{uuid.uuid4()}"
            try:
                status = request(f.listen, "POST", f"{path}?{query}", body=b"id=%d" % i, timeout=20)[0]
            except OSError as e:
                status = type(e).__name__
            with lock:
                outcome[path] = (i, status)
                sent[0] += 1

    bound = max(60.0, n_req / 20)  # seconds: at least 20 requests per second
    with ThreadPoolExecutor(clients) as ex:
        futs = [ex.submit(client, k) for k in range(clients)]
        wait_until(lambda: sent[0] >= per * clients * 0.3, timeout=bound, what="30% sent")
        bs[0].app_proc.signal(signal.SIGKILL)
        wait_until(lambda: sent[0] >= per * clients * 0.6, timeout=bound, what="60% sent")
        bs[1].agent_proc.signal(signal.SIGKILL)
        for fu in futs:
            fu.result(timeout=2 * bound)
    arrivals: dict[str, int] = {}
    for fl in files:
        for line in fl.read_text().splitlines():
            arrivals[line] = arrivals.get(line, 0) + 1
    return {"outcome": outcome, "arrivals": arrivals, "refused": sum(b.refused() for b in bs[2:]), "sent": per * clients}


def verdict(r: dict) -> dict:
    """What the run shows: processed twice (must be 0), a 200 for a request no
    app processed (must be 0), a processed request answered other than the app
    answered it and not as an error (must be 0), and how many the apps never
    processed (each one a client error)."""
    out, arr = r["outcome"], r["arrivals"]
    return {
        "sent": r["sent"],
        "twice": [p for p in out if arr.get(p, 0) > 1],
        "ok_unprocessed": [p for p, (_, s) in out.items() if arr.get(p, 0) == 0 and s == 200],
        "wrong": [(i, s) for p, (i, s) in out.items()
                  if arr.get(p, 0) == 1 and s != expected(i) and not (isinstance(s, str) or s >= 500)],
        "not_processed": sum(1 for p in out if arr.get(p, 0) == 0),
        "refused": r["refused"],
    }
