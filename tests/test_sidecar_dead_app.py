"""The sidecar roles and a dead app: the Envoy Wasm
sidecar and the HAProxy Lua sidecar answer a hunt try (offer or final) whose
app they cannot connect to as the agent does, `425` + `hunt: unreachable`
(and `x-envoy-immediate-health-check-fail: true` to an Envoy front), so the
front re-sends it to another backend. Before, they answered their proxy's own
503, which no front re-sends, though no app had seen the request. An app's
own 503 is the app's answer and passes as it is. Counted at the apps."""

import signal
import socket
import time
import uuid

import pytest
from harness import FINAL, OFFER, app_stats, path_count, request, start_front, start_hunted_backends, wait_until

SIDECARS = ["envoy", "haproxy-2.6", "haproxy-3.0"]
# Each sidecar under both fronts (HAProxy 2.6 and 3.0 share front.cfg; test_exactly_once covers 3.0 as a front).
COMBOS = [(f, h) for f in ("envoy", "haproxy-2.6") for h in SIDECARS]
IDS = [f"{f}-front/{h}-sidecar" for f, h in COMBOS]


def kill_app(b) -> None:
    """SIGKILL a backend's app and wait until its port refuses connections."""
    b.app_proc.signal(signal.SIGKILL)
    host, port = b.app.rsplit(":", 1)

    def refused() -> bool:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return False
        except OSError:
            return True

    wait_until(refused, timeout=5, what="the app's port closed")


@pytest.mark.parametrize("hunter", SIDECARS)
def test_sidecar_answers_a_hunt_try_for_a_dead_app_as_unreachable(procs, addrs, hunter):
    # Straight to the sidecar, no front: the wire answer for each kind of try.
    (b,) = start_hunted_backends(procs, addrs, 1, hunter, "always")
    kill_app(b)
    envoy_offer = {"hunt-offer": "1", "x-envoy-attempt-count": "1"}
    envoy_final = {"hunt-offer": "1", "x-envoy-attempt-count": "2"}
    cases = [
        # (headers, from an Envoy front)
        (envoy_offer, True), (envoy_final, True),   # Envoy names its tries by attempt count
        (OFFER, False), (FINAL, False),             # HAProxy names them with hunt-target
    ]
    for hdrs, from_envoy in cases:
        status, h, body = request(b.agent, "POST", f"/dead/{uuid.uuid4()}", headers=hdrs, body=b"x" * 100)
        assert (status, h.get("hunt"), body) == (425, "unreachable", b""), f"{hdrs}: {status} {h} {body[:200]!r}"
        assert h.get("x-envoy-immediate-health-check-fail") == ("true" if from_envoy else None), f"{hdrs}: {h}"
        assert h.get("content-length") == "0", h
    # Plain traffic and malformed marks are not hunt tries: the proxy's own 503 as before.
    for hdrs in ({}, {"hunt-offer": "a b", "hunt-target": "a b"}):
        status, h, _ = request(b.agent, "POST", "/plain", headers=hdrs, body=b"x")
        assert status == 503 and "hunt" not in h, f"{hdrs}: {status} {h}"


@pytest.mark.parametrize("front_kind,hunter", COMBOS, ids=IDS)
def test_requests_offered_to_a_sidecar_with_a_dead_app_are_served_elsewhere_once(procs, addrs, front_kind, hunter):
    # Two backends behind sidecars that accept every offer; one app dies, its
    # sidecar lives on. Every POST must be answered 200 by the live backend and
    # reach its app exactly once; offers that met the dead app were re-sent.
    bs = start_hunted_backends(procs, addrs, 2, hunter, "always")
    f = start_front(front_kind, procs, addrs, bs)
    dead, live = bs
    kill_app(dead)
    before = dead.hunter.accepted()
    statuses, paths, served = [], [], set()
    for i in range(40):
        path = f"/dead-sidecar/{uuid.uuid4()}"
        paths.append(path)
        status, h, body = request(f.listen, "POST", path, body=b"order=%d" % i)
        statuses.append(status)
        served.add(h.get("hunt-served-by"))
        time.sleep(0.02)  # over 1 s: health checks run meanwhile (an Envoy sidecar's pass: it comes back)
    assert statuses == [200] * len(statuses), {s: statuses.count(s) for s in set(statuses)}
    assert served == {f"sidecar-{live.host}"}, served
    seen = app_stats(live.app)["paths"]
    assert [seen.get(p, 0) for p in paths] == [1] * len(paths), "each request at the live app exactly once"
    met = dead.hunter.accepted() - before
    assert met >= 1, "no offer met the dead app: the run proves nothing"
    assert f.leftover_refusals() == 0
    print(f"{front_kind} front, {hunter} sidecar: {len(paths)} POSTs, {met:.0f} offers met the dead app, all served once by the live one")


@pytest.mark.parametrize("policy", ["always", "static:0"])
@pytest.mark.parametrize("front_kind,hunter", COMBOS, ids=IDS)
def test_an_apps_own_503_through_a_sidecar_reaches_the_client_once(procs, addrs, front_kind, hunter, policy):
    # always: the offer's app answers 503; static:0: every offer is refused and
    # the final's app answers 503. Either way that is the app's answer: not a
    # refusal, not re-sent, seen by one app once.
    bs = start_hunted_backends(procs, addrs, 2, hunter, policy)
    f = start_front(front_kind, procs, addrs, bs)
    for i in range(6):
        path = f"/app-503/{uuid.uuid4()}"
        status, h, body = request(f.listen, "POST", f"{path}?status=503", body=b"order=%d" % i)
        assert status == 503 and b'"path"' in body, f"client got {status} {h} {body[:200]!r}"
        assert h.get("hunt") is None and h.get("x-envoy-immediate-health-check-fail") is None, h
        assert path_count(bs, path) == 1, f"processed {path_count(bs, path)} times"
    assert f.leftover_refusals() == 0
