"""The forwarding tier against its own members' sequence numbers and the
wire: a member restarted with its clock stepped back, a key holder forging a
member's sequence from its address, reports recorded on the wire and replayed
after the receiver restarts, and an agent of the earlier version. Real agents
on loopback; the attacker records and forges on `lo` (root), as one on the
network would.

Before each report echoed its receiver's nonce (hunt-fleet/3, docs/protocol.md
§ 8a): the restarted member and the forged one were out of their
peers' view for good; the replayed reports were all taken after a restart,
keeping a frozen member in view. Now no datagram keeps a member out for longer
than fleet_dead_after_ms, and a recording is taken nowhere, ever.
"""

import os
import signal
import subprocess
import time
import uuid

import pytest
from harness import OFFER, path_count, request, start_fleet, wait_until
from harness.testbed import FLEET_PORT, peers_of, tier_opts
from harness.fleetwire import Member, loopback_udp_recorder, parse, record, seal, send_forged, text

# A quiet fleet's beats each half dead_after, as earlier versions sent them:
# these tests record and time a quiet member's reports. The slower default's
# own attacker test is the agent's (fleet::tests, a replayed or forged beat).
PEERS = {"fleet_heartbeat_ms": 50, "fleet_dead_after_ms": 400, "fleet_quiet_beat_ms": 200}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="records and forges datagrams on lo: root")


def restart_agent(procs, b, bs, env=None, **opts):
    """b's agent stopped and started again, as a deploy does (its tables empty)."""
    b.agent_proc.stop()
    tier = tier_opts(b.host, peers_of([x.host for x in bs]), procs.fleet_key())
    b.agent_proc, _, _ = procs.agent(b.host, b.app, env=env, policy="always", **tier, **{**PEERS, **opts})


def peers_over(b, seconds, every=0.02):
    """b's count of peers in view, every 20 ms for `seconds`."""
    out = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        out.append(b.metrics()["huntlb_fleet_peers"])
        time.sleep(every)
    return out


def sniff(src, dst, seconds=1.0):
    rec = loopback_udp_recorder()
    try:
        return [d for _, _, _, d in record(rec, FLEET_PORT, seconds, src=src, dst=dst)]
    finally:
        rec.close()


CLOCK_AHEAD = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
int clock_gettime(clockid_t c, struct timespec *t) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(c, t);
    if (r == 0 && c == CLOCK_REALTIME) t->tv_sec += 3600;
    return r;
}
"""


def test_a_member_restarted_with_its_clock_stepped_back_is_heard_within_dead_after(procs, addrs, tmp_path):
    # b first runs with its wall clock an hour ahead (an LD_PRELOAD shim on
    # clock_gettime), then restarts with the right one, as after an NTP step
    # or a VM restored from a snapshot. Before: a dropped all of b's reports as
    # replayed (its sequence was the clock's), for good.
    src, lib = tmp_path / "ahead.c", tmp_path / "ahead.so"
    src.write_text(CLOCK_AHEAD)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"], check=True)
    a, b = bs = start_fleet(procs, addrs, 2, policy="always", agent_opts=PEERS, wanting=False)
    restart_agent(procs, b, bs, env={"LD_PRELOAD": str(lib)})
    wait_until(lambda: a.metrics()["huntlb_fleet_peers"] == 1, what="b (an hour ahead) heard")
    restart_agent(procs, b, bs)
    up = time.monotonic()
    wait_until(lambda: a.metrics()["huntlb_fleet_peers"] == 1 and a.metrics()["huntlb_fleet_reports_taken_total"] > 0,
               what="b heard again after its clock stepped back", timeout=10)
    took = time.monotonic() - up
    assert took < PEERS["fleet_dead_after_ms"] / 1000, f"b heard {took:.3f} s after it was up"
    assert min(peers_over(a, 1.0)) == 1, "b stays in a's view"


def test_a_forged_sequence_from_a_key_holder_keeps_no_member_out(procs, addrs):
    # A key holder on the network sends one report as b, from b's address
    # (forged), copying b's boot and nonces off the wire, with the highest
    # sequence there is. Before: every later report of b's was dropped as
    # old, and b was out of a's view until a restarted.
    a, b = start_fleet(procs, addrs, 2, policy="always", agent_opts=PEERS, wanting=False)
    seen = sniff(b.host, a.host)
    assert seen, "b reports to a"
    d = seen[-1]
    key = procs.fleet_key()
    r = parse(d[:-33])
    if r is None:  # the earlier wire format: `hunt-fleet/2 FROM SEQ BUSY READY SUB TAG`
        f = d.decode().split(" ")
        forged = seal(key, " ".join([f[0], f[1], str(2**64 - 1), "0", "1", f[5]]))
    else:
        forged = seal(key, text(r["from"], r["to"], r["boot"], 2**64 - 1, 0, True, r["sub"], r["mine"], r["yours"]))
    taken = a.metrics()["huntlb_fleet_reports_taken_total"]
    send_forged(b.host, FLEET_PORT, a.host, FLEET_PORT, forged)
    wait_until(lambda: a.metrics()["huntlb_fleet_reports_taken_total"] > taken, what="the forgery taken (a key holder's)")
    view = peers_over(a, 2.0)
    assert min(view) == 1, f"b left a's view: {view}"
    m = a.metrics()
    assert m['huntlb_fleet_reports_bad_total{reason="replayed"}'] >= 1, "b's own reports were dropped for a while"
    # The forgery, sent again, is taken nowhere.
    bad = sum(v for k, v in m.items() if k.startswith("huntlb_fleet_reports_bad_total"))
    send_forged(b.host, FLEET_PORT, a.host, FLEET_PORT, forged)
    wait_until(lambda: sum(v for k, v in a.metrics().items() if k.startswith("huntlb_fleet_reports_bad_total")) > bad,
               what="the forgery dropped")


def test_reports_replayed_after_the_receiver_restarts_change_no_view(procs, addrs):
    # No key: an attacker records m's sealed reports to a on the wire. m then
    # freezes (SIGSTOP), a restarts (a deploy), and the recording is sent
    # again from m's forged address. Before: a took every one, kept the frozen
    # m in view, and forwarded offers there.
    a, b, m = bs = start_fleet(procs, addrs, 3, policy="always", agent_opts=PEERS, wanting=False)
    recorded = sniff(m.host, a.host, 1.5)
    assert len(recorded) >= 5, len(recorded)
    m.agent_proc.signal(signal.SIGSTOP)
    try:
        restart_agent(procs, a, bs)
        wait_until(lambda: a.metrics()["huntlb_fleet_peers"] == 1, what="a hears b")
        m0 = a.metrics()
        replayed = 0
        until = time.monotonic() + 1.5
        view = []
        while time.monotonic() < until:
            for d in recorded:
                send_forged(m.host, FLEET_PORT, a.host, FLEET_PORT, d)
                replayed += 1
            view.append(a.metrics()["huntlb_fleet_peers"])
            time.sleep(0.05)
        assert max(view) == 1, f"m, frozen, in a's view: {view}"
        m1 = a.metrics()
        dropped = sum(m1[k] - m0[k] for k in m1 if k.startswith("huntlb_fleet_reports_bad_total"))
        assert dropped == replayed and m1["huntlb_fleet_reports_taken_total"] - m0["huntlb_fleet_reports_taken_total"] < replayed, (dropped, replayed)
        # Offers at a go to b or stay: none waits on m.
        for _ in range(10):
            path = f"/replay/{uuid.uuid4()}"
            status, h, _ = request(a.agent, "POST", path, headers=OFFER, body=b"x")
            assert status == 200 and h["hunt-served-by"] != m.id and path_count(bs, path) == 1, (status, h)
        assert a.metrics()['huntlb_forwards_total{outcome="withdrawn"}'] == 0
    finally:
        m.agent_proc.signal(signal.SIGCONT)


def test_an_agent_of_the_earlier_version_is_told_apart_and_never_heard(procs, addrs):
    # A member still running the previous release (hunt-fleet/2) during a
    # rolling upgrade: its reports, sealed with the fleet's key, are counted
    # as `version` and logged as such, never taken; it hears nothing from us
    # it can take either (it drops hunt-fleet/3 as malformed), so no forward
    # goes between versions, and each side's offers are decided as without
    # that peer.
    old = addrs.host()
    a, b = bs = start_fleet(procs, addrs, 2, policy="always", agent_opts=PEERS, absent=[old], wanting=False)
    member = Member(procs.fleet_key(), old)
    procs.cleanups.append(member.close)
    for seq in range(1, 6):
        d = seal(procs.fleet_key(), f"hunt-fleet/2 {old}:{FLEET_PORT} {seq} 0 1 1")
        for x in bs:
            member.sock.sendto(d, (x.host, FLEET_PORT))
    wait_until(lambda: all(x.metrics()['huntlb_fleet_reports_bad_total{reason="version"}'] == 5 for x in bs),
               what="the old agent's reports told apart")
    assert all(x.metrics()["huntlb_fleet_peers"] == 1 for x in bs)
    assert "earlier huntlb" in a.agent_proc.log()
    # What the new agents send it is no hunt-fleet/2 report.
    got = []
    member.sock.settimeout(0.5)
    try:
        while len(got) < 3:
            got.append(member.sock.recvfrom(512)[0])
    except OSError:
        pass
    assert all(g.startswith(b"hunt-fleet/3 ") for g in got), got
