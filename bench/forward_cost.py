#!/usr/bin/env python3
"""What one forward between agents costs, on loopback: two agents, a's app
busy so that every offer to a goes to b; 2000 offers one after another (no
load besides), then as many finals kept at a. Prints the median latency a
client sees for each and the two agents' CPU per request (utime + stime).

Usage (after `make release`; CARGO_TARGET_DIR for another build's agent):
  PYTHONPATH=. HUNTLB_PROFILE=release .venv/bin/python bench/forward_cost.py [--n 2000]
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from harness import OFFER, request, start_fleet, wait_until
from harness.procs import Addrs, Procs


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    a = ap.parse_args()
    procs, addrs = Procs(Path(tempfile.mkdtemp(prefix="huntlb-fwdcost-"))), Addrs()
    try:
        x, y = start_fleet(procs, addrs, 2, policy="always", agent_opts={"fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 60000})
        hold = [threading.Thread(target=request, args=(x.agent, "GET", f"/hold/{uuid.uuid4()}?work_ms=120000"),
                                 kwargs={"timeout": 180}, daemon=True) for _ in range(12)]
        for t in hold:
            t.start()
        wait_until(lambda: x.metrics()["huntlb_inflight"] == 12)
        for kind, headers in [("forwarded", OFFER), ("kept", {"hunt-offer": "1", "hunt-target": "2"})]:
            lat = []
            c0 = cpu(x.agent_proc.pid) + cpu(y.agent_proc.pid)
            for i in range(a.n):
                t = time.perf_counter()
                request(x.agent, "GET", f"/{kind}/{i}", headers=headers)
                lat.append((time.perf_counter() - t) * 1e6)
            c1 = cpu(x.agent_proc.pid) + cpu(y.agent_proc.pid)
            print(f"{kind}: median latency {statistics.median(lat):.0f} us, agents' CPU per request {(c1 - c0) / a.n * 1e6:.0f} us")
        m = x.metrics()
        sent = int(m['huntlb_forwards_total{outcome="sent"}'])
        print(f"forwards sent {sent} of {a.n} offers")
    finally:
        procs.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
