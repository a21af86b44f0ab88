"""The same scripted load against every policy host: the Rust agent, the
proxy-wasm sidecar in a real Envoy with 2 worker threads, and the Lua sidecar in
HAProxy 2.6 (Lua 5.3) and 3.0 (Lua 5.4). All must refuse exactly when SR_c /
SR_dyn say so: the policy code is held to the same vectors; this checks the load
counting and state handling around it."""

import threading

import pytest
from harness import FINAL, OFFER, app_stats, request, start_hunter, wait_until

KINDS = ["agent", "sidecar", "haproxy-2.6", "haproxy-3.0"]


def hold(addr, n, work_ms, front=None):
    """n finals held work_ms at the app, from the front named `front` if given."""
    headers = {**FINAL, "hunt-front": front} if front else FINAL
    ts = []
    for _ in range(n):
        # each on its own connection, so Envoy spreads them over its worker threads
        t = threading.Thread(target=request, args=(addr, "GET", f"/hold?work_ms={work_ms}"), kwargs={"headers": headers}, daemon=True)
        t.start()
        ts.append(t)
    return ts


@pytest.mark.parametrize("kind", KINDS)
def test_static_refuses_exactly_when_busy_reaches_c(procs, addrs, kind):
    host = addrs.host()
    _, app = procs.workload(host, port=9000, cores=64, demand="const:0")
    h = start_hunter(kind, procs, host, app, "static:3")
    held = []
    for b in range(6):
        wait_until(lambda: h.inflight() == b, what=f"{b} requests in flight")
        path = f"/probe/{b}"
        status, hdrs, body = request(h.addr, "GET", path, headers=OFFER)
        if b < 3:
            assert status == 200, f"{kind} b={b}: offer should be accepted"
            assert hdrs["hunt-served-by"].endswith(host)
        else:
            assert (status, hdrs.get("hunt"), hdrs.get("content-length"), body) == (425, "busy", "0", b""), f"{kind} b={b}"
        assert app_stats(app)["paths"].get(path, 0) == (1 if b < 3 else 0)
        held += hold(h.addr, 1, work_ms=4000)
    assert (h.accepted(), h.refused()) == (3, 3)
    # the held finals arrived at b = 0..5: the last three at or above c = 3,
    # accepted while busy (the scaling signal, named alike on every host)
    assert h.finals_busy() == 3, f"{kind}: finals accepted while busy"
    if kind == "sidecar":
        per_worker = h.connections_per_worker()
        assert len(per_worker) == 2 and min(per_worker) > 0, f"load did not span both worker threads: {per_worker}"
    for t in held:
        t.join(timeout=15)
    wait_until(lambda: h.inflight() == 0, what="in-flight back to 0")


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_moves_c_as_algorithm_2_says(procs, addrs, kind):
    host = addrs.host()
    _, app = procs.workload(host, port=9000, cores=64, demand="const:0")
    h = start_hunter(kind, procs, host, app, "dynamic:window=10,c0=2")
    # held long enough to outlast the 30 offers below on a slow machine (about a
    # second here; 12 s cost 8 parametrized tests a minute of waiting in make test)
    held = hold(h.addr, 4, work_ms=7000)
    wait_until(lambda: h.inflight() == 4, what="4 held")
    # b = 4, c0 = 2: offers are refused; the 10th and 20th offers close windows with
    # ratio 0 and raise c to 3, then 4; the 30th raises c to 5 > b and is accepted.
    expect_c = {10: 3, 20: 4, 30: 5}
    for i in range(1, 31):
        wait_until(lambda: h.inflight() == 4, what="back to 4 in flight")
        status = request(h.addr, "GET", "/o?work_ms=0", headers=OFFER)[0]
        assert status == (200 if i == 30 else 425), f"{kind} offer {i}: inflight {h.inflight()}, c {h.c()}"
        if i in expect_c:
            assert h.c() == expect_c[i], f"{kind}: c after offer {i}"
    assert h.inflight() == 4, "the held load ended before the offers did: the run proves nothing"
    for t in held:
        t.join(timeout=20)
    wait_until(lambda: h.inflight() == 0, what="held requests done")
    # idle: offers 31-39 accepted; the 40th sees 10/10 (> 0.6) and lowers c to 4
    for i in range(31, 41):
        assert request(h.addr, "GET", "/o?work_ms=0", headers=OFFER)[0] == 200, f"{kind} offer {i}"
    assert h.c() == 4
    assert (h.accepted(), h.refused()) == (11, 29)


@pytest.mark.parametrize("kind", KINDS)
def test_a_front_that_names_itself_is_counted_apart(procs, addrs, kind):
    """An Envoy front sends no hunt-seen but names itself (hunt-front) on every
    try; every host counts what it holds from each name and takes that as the
    front's hunt-seen, so seen_margin accepts the offers of a front whose own count
    is right and refuses one the others loaded this backend for."""
    host = addrs.host()
    _, app = procs.workload(host, port=9000, cores=64, demand="const:0")
    # c stays 1 (a window no test reaches): the policy alone refuses at b >= 1
    h = start_hunter(kind, procs, host, app, "dynamic:seen_margin=1,c0=1,window=1000")
    held = hold(h.addr, 3, work_ms=3500, front="front-a")
    wait_until(lambda: h.inflight() == 3, what="front-a's 3 requests in flight")
    cases = [
        ("front-a, which holds all 3 (seen 3, b 3 <= 3 + 1)", {"hunt-front": "front-a"}, 200),
        ("front-b, which holds none (seen 0, b 3 > 0 + 1)", {"hunt-front": "front-b"}, 425),
        ("no name", {}, 425),
        ("front-a with hunt-seen 0 (hunt-seen wins)", {"hunt-front": "front-a", "hunt-seen": "0"}, 425),
        ("a bad name (counts for no front)", {"hunt-front": "front a"}, 425),
    ]
    for i, (what, extra, want) in enumerate(cases):
        path = f"/named/{i}"
        status = request(h.addr, "GET", path, headers={**OFFER, **extra})[0]
        assert status == want, f"{kind}: offer from {what}: {status}, inflight {h.inflight()}"
        assert app_stats(app)["paths"].get(path, 0) == (1 if want == 200 else 0), f"{kind}: {what}"
    assert h.inflight() == 3, "the held load ended before the offers did: the run proves nothing"
    for t in held:
        t.join(timeout=20)
    wait_until(lambda: h.inflight() == 0, what="held requests done")
    # front-a's requests are over, and so is its count: with front-b holding 2,
    # front-a (seen 0, b 2 > 0 + 1) is refused and front-b (seen 2) is not.
    held = hold(h.addr, 2, work_ms=3500, front="front-b")
    wait_until(lambda: h.inflight() == 2, what="front-b's 2 requests in flight")
    assert request(h.addr, "GET", "/named/after-a", headers={**OFFER, "hunt-front": "front-a"})[0] == 425, kind
    assert request(h.addr, "GET", "/named/after-b", headers={**OFFER, "hunt-front": "front-b"})[0] == 200, kind
    assert h.inflight() == 2, "the held load ended before the offers did: the run proves nothing"
    for t in held:
        t.join(timeout=20)
    assert (h.accepted(), h.refused()) == (2, 5)


@pytest.mark.parametrize("kind", KINDS)
def test_the_old_name_of_seen_margin_is_the_same_policy_with_a_warning(procs, addrs, kind):
    """`slack` is `seen_margin`'s old name. Every host still takes it,
    decides alike (two requests held; c stays 1: an offer whose front counted 1
    here is accepted, 2 <= 1 + 1; one whose front counted none is refused,
    2 > 0 + 1), and logs at load the line the policy crate words for it
    (policy/vectors/specs.json `warning`)."""
    host = addrs.host()
    _, app = procs.workload(host, port=9000, cores=64, demand="const:0")
    h = start_hunter(kind, procs, host, app, "dynamic:slack=1,c0=1,window=1000")
    held = hold(h.addr, 2, work_ms=5000)
    wait_until(lambda: h.inflight() == 2, what="2 requests in flight")
    assert request(h.addr, "GET", "/old/seen-1", headers={**OFFER, "hunt-seen": "1"})[0] == 200, kind
    assert request(h.addr, "GET", "/old/seen-0", headers={**OFFER, "hunt-seen": "0"})[0] == 425, kind
    assert h.inflight() == 2, "the held load ended before the offers did: the run proves nothing"
    for t in held:
        t.join(timeout=20)
    warning = "policy key `slack` is deprecated: write `seen_margin` (same meaning)"
    wait_until(lambda: warning in h.proc.log(), what=f"{kind} logs the warning")
    if kind == "agent":
        assert h.proc.log().count(warning) == 1, "once, at start"
