"""Each agent's view of the forwarding tier (`huntlb_fleet_peers`: its sample's
members heard and taking forwards) through what a running fleet goes through:
its draws (`fleet_resample_ms`, 100 ms), and the fleet key rotated in
docs/kubernetes.md's steps, each agent's key file changed at its own moment as
the kubelets of a Kubernetes fleet write a Secret, seconds apart. Real agents
and apps on loopback, under light offers; every path counted at the apps.

A draw drops members and draws others, and one drawn answers a round trip
later: the view read one short meanwhile (in 60 s, 14 of 11676 reads under
such offers, 63 of 7056 with none) until a dropped member stood in for it
(agent/src/fleet/sample.rs, `redraw`).
"""

import os
import secrets
import threading
import time
import uuid
from collections import Counter

from harness import OFFER, app_stats, request, start_fleet, wait_until

SAMPLE = 8  # the agent's default fleet_sample; 11 other members


def write_key(path: str, keys: list[str]) -> None:
    """The file replaced whole, as the kubelet swaps a Secret's version in: a
    new inode, never a file read half written."""
    tmp = f"{path}.new"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("\n".join(keys) + "\n")
    os.replace(tmp, path)


def test_no_agents_view_reads_short_through_its_draws_and_a_key_rotation(procs, addrs, tmp_path):
    """12 agents (sample 8, drawn every 100 ms), offers to each in turn from 3
    clients, every agent's /metrics read over and over; meanwhile the key
    rotates (old+new, new+old, new), each agent's file 0.1 to 0.5 s after the
    last one's, each step read by every agent before the next. Every read says
    8 members in view (a member benched by a forward it did not take in time,
    heard and out for that, counted apart: `huntlb_fleet_peers_benched`), no
    report is refused as unauthenticated, every offer is answered 200 and every
    path processed once, forwards included."""
    old, new = secrets.token_hex(32), secrets.token_hex(32)
    keys = [str(tmp_path / f"fleet-{i}.key") for i in range(12)]
    for k in keys:
        write_key(k, [old])
    bs = start_fleet(procs, addrs, 12, app_opts={"demand": "const:20"}, key_files=keys)

    stop = threading.Event()
    answered: list[tuple[str, int]] = []
    reads, short, benched = [0], [], [0]
    t0 = time.monotonic()

    def offers(k: int) -> None:
        for i in range(5000):  # bounded: ~60 s of offers at most
            if stop.is_set():
                return
            path = f"/view/{k}/{uuid.uuid4()}"
            try:
                # the three clients offer to the same agent in turn, each request
                # working 20 ms there: the second and third find it busy, and are
                # forwarded to the least of its sample
                status, _, _ = request(bs[i % len(bs)].agent, "GET", path, headers=OFFER, timeout=10)
            except OSError as e:
                status = repr(e)
            answered.append((path, status))
            stop.wait(0.01)

    def watch() -> None:
        for _ in range(100000):  # bounded; ~12 reads every 30 ms on this machine
            if stop.is_set():
                return
            for b in bs:
                m = b.metrics()
                reads[0] += 1
                if m["huntlb_fleet_peers"] + m["huntlb_fleet_peers_benched"] != SAMPLE:
                    short.append({"at_s": round(time.monotonic() - t0, 3), "agent": b.host, "peers": m["huntlb_fleet_peers"],
                                  "benched": m["huntlb_fleet_peers_benched"], "unheard": m["huntlb_fleet_peers_unheard"]})
                benched[0] += m["huntlb_fleet_peers_benched"] > 0

    threads = [threading.Thread(target=offers, args=(k,), daemon=True) for k in range(3)]
    threads.append(threading.Thread(target=watch, daemon=True))
    for t in threads:
        t.start()
    try:
        time.sleep(2)  # the draws alone first
        for n, step in enumerate(([old, new], [new, old], [new]), 1):
            for k in keys:
                write_key(k, step)
                time.sleep(0.1 + 0.4 * secrets.randbelow(100) / 100)
            wait_until(lambda: all(b.agent_proc.log().count("fleet_key_file changed") == n for b in bs),
                       timeout=10, what=f"every agent reading step {n + 1}")
            assert all(f"keys={len(step)}" in b.agent_proc.log().rsplit("fleet_key_file changed", 1)[1].splitlines()[0]
                       for b in bs), f"step {n + 1}"
        time.sleep(2)  # the new key alone
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    assert reads[0] > 1000 and not short, (f"{len(short)} of {reads[0]} reads short ({benched[0]} with a member benched)", short[:10])
    bad = {b.host: b.metrics()['huntlb_fleet_reports_bad_total{reason="unauthenticated"}'] for b in bs}
    assert set(bad.values()) == {0}, bad
    errors = [(p, s) for p, s in answered if s != 200]
    assert len(answered) > 300 and not errors, (len(answered), errors[:5])
    processed = Counter()
    for b in bs:
        processed.update(app_stats(b.app)["paths"])
    twice = [p for p, _ in answered if processed[p] != 1]
    assert not twice, [(p, processed[p]) for p in twice[:5]]
    forwarded = sum(b.metrics()['huntlb_forwards_total{outcome="sent"}'] for b in bs)
    assert forwarded > 0, "no offer was forwarded: the paths counted say nothing of the tier"
