"""The agent against a real workload app, driven by a plain HTTP client acting
as the front proxy (hunt/1 headers set by hand)."""

import http.client
import os
import signal
import threading
import time
import uuid

import pytest
from harness import FINAL, OFFER, agent_default, agent_defaults, app_stats, binary, metrics, request, wait_until
from harness.testbed import FLEET_PORT, peers_of


def hold(addr, n, work_ms, headers=None):
    """Start n slow requests in the background; returns the threads."""
    ts = []
    for _ in range(n):
        t = threading.Thread(target=request, args=(addr, "GET", f"/hold?work_ms={work_ms}"), kwargs={"headers": headers or FINAL}, daemon=True)
        t.start()
        ts.append(t)
    return ts


def inflight(admin):
    return metrics(admin)["huntlb_inflight"]


def test_finals_plain_and_malformed_are_never_refused(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    _, agent, admin = procs.agent(host, app, policy="static:0")
    assert request(agent, "GET", "/a", headers=OFFER)[0] == 425
    assert request(agent, "GET", "/b", headers=FINAL)[0] == 200
    assert request(agent, "GET", "/c")[0] == 200
    assert request(agent, "GET", "/d", headers={"hunt-target": "web2"})[0] == 200
    # malformed: a repeated header, and a value that is not a token
    conn = http.client.HTTPConnection(*agent.split(":"))
    conn.putrequest("GET", "/e")
    conn.putheader("hunt-offer", "1")
    conn.putheader("hunt-offer", "1")
    conn.putheader("hunt-target", "1")
    conn.endheaders()
    assert conn.getresponse().status == 200
    conn.close()
    assert request(agent, "GET", "/f", headers={"hunt-offer": "a b", "hunt-target": "a b"})[0] == 200
    m = metrics(admin)
    assert m["huntlb_finals_total"] == 2
    assert m["huntlb_plain_total"] == 1
    assert m["huntlb_malformed_total"] == 2
    paths = app_stats(app)["paths"]
    assert "/a" not in paths and all(paths.get(p) == 1 for p in "/b /c /d /e /f".split())


def test_app_sees_no_hunt_headers(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    _, agent, _ = procs.agent(host, app, policy="always")
    status, h, body = request(agent, "GET", "/x", headers={**OFFER, "hunt": "busy", "hunt-served-by": "evil", "hunt-extra": "1"})
    assert status == 200
    assert '"hunt_headers_seen":[]' in body.decode()
    assert h["hunt-served-by"] == f"agent-{host}"


def test_refused_post_never_reaches_app_and_connection_is_reused(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    _, agent, admin = procs.agent(host, app, policy="static:0")
    conn = http.client.HTTPConnection(*agent.split(":"), timeout=10)
    refused_path, final_path = f"/post/{uuid.uuid4()}", f"/post/{uuid.uuid4()}"
    body = os.urandom(10_000)
    status, h, data = request(agent, "POST", refused_path, headers=OFFER, body=body, conn=conn)
    assert (status, h["hunt"], data) == (425, "busy", b"")
    sock = conn.sock
    assert sock is not None, "connection closed after a refusal"
    port = sock.getsockname()[1]
    status, _, data = request(agent, "POST", final_path, headers=FINAL, body=body, conn=conn)
    assert status == 200
    assert conn.sock is sock and conn.sock.getsockname()[1] == port, "refused connection was not reused"
    assert f'"len":{len(body)}' in data.decode()
    paths = app_stats(app)["paths"]
    assert paths.get(refused_path, 0) == 0 and paths[final_path] == 1
    assert metrics(admin)["huntlb_refusals_closed_total"] == 0
    conn.close()


def test_refusal_of_body_over_drain_limit_closes_connection(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    _, agent, admin = procs.agent(host, app, policy="static:0", drain_limit=1024)
    path = f"/big/{uuid.uuid4()}"
    status, h, _ = request(agent, "POST", path, headers=OFFER, body=os.urandom(64_000))
    assert status == 425 and h.get("connection") == "close"
    assert metrics(admin)["huntlb_refusals_closed_total"] == 1
    assert app_stats(app)["paths"].get(path, 0) == 0
    # the agent is fine afterwards
    assert request(agent, "GET", "/ok", headers=FINAL)[0] == 200


def test_dead_app_refuses_offers_and_finals_as_unreachable(procs, addrs):
    host = addrs.host()
    app = f"{host}:9000"  # nothing listening yet
    _, agent, admin = procs.agent(host, app, policy="always", app_probe_ms=50)
    status, h, _ = request(agent, "GET", "/x", headers=OFFER)
    assert (status, h.get("hunt")) == (425, "busy"), "an offer to an agent whose app is down must be refused"
    # A final reached no app (no connection): the front may send it elsewhere.
    status, h, _ = request(agent, "POST", "/x", headers=FINAL, body=b"order")
    assert (status, h.get("hunt"), h.get("connection")) == (425, "unreachable", "close")
    # Plain traffic has no front that would re-send it: a 502 naming the app.
    status, _, body = request(agent, "GET", "/x")
    assert status == 502 and b"unreachable" in body and app.encode() in body
    assert request(agent, "GET", "/.hunt/health")[0] == 503
    m = metrics(admin)
    assert m['huntlb_refusals_total{reason="app_down"}'] == 1
    assert m['huntlb_app_errors_total{kind="connect"}'] == 2
    # the app comes up: offers are accepted again without any request discovering it
    procs.workload(host, demand="const:0")
    wait_until(lambda: metrics(admin)["huntlb_app_up"] == 1, what="app seen up again")
    assert request(agent, "GET", "/x", headers=OFFER)[0] == 200
    assert request(agent, "GET", "/.hunt/health")[0] == 200


def test_app_killed_mid_run(procs, addrs):
    host = addrs.host()
    app_proc, app = procs.workload(host, demand="const:0")
    _, agent, _ = procs.agent(host, app, policy="always")
    assert request(agent, "GET", "/x", headers=OFFER)[0] == 200
    app_proc.stop()
    assert request(agent, "GET", "/x")[0] == 502
    assert request(agent, "GET", "/x", headers=FINAL)[0] == 425
    assert request(agent, "GET", "/x", headers=OFFER)[0] == 425


def test_health_answers_from_recent_traffic_then_connects(procs, addrs):
    # An answer from the app within app_probe_ms says it is up without a
    # connection to it; once that is old, the check connects and finds it gone.
    host = addrs.host()
    app_proc, app = procs.workload(host, demand="const:0")
    _, agent, admin = procs.agent(host, app, policy="always", app_probe_ms=3000)
    assert request(agent, "GET", "/x", headers=OFFER)[0] == 200
    app_proc.stop()
    assert request(agent, "GET", "/.hunt/health")[0] == 200
    assert metrics(admin)["huntlb_app_up"] == 1
    wait_until(lambda: request(agent, "GET", "/.hunt/health")[0] == 503, timeout=15, what="health connects and finds the app gone")
    assert metrics(admin)["huntlb_app_up"] == 0
    # The request that finds it gone is refused as unreachable, never served.
    assert request(agent, "GET", "/x", headers=OFFER)[0] == 425


def test_idle_health_checks_connect_to_the_app_once_per_app_probe(procs, addrs):
    # Fronts check each agent several times a second; idle, a probe that
    # reached the app within app_probe_ms says it is up for every check in
    # between (a connection each was 8 a second per app with 4 fronts). The
    # app here is a bare TCP listener that counts what it accepts.
    import socket
    host = addrs.host()
    lsn = socket.create_server((host, 9000))
    accepted, stop = [], threading.Event()

    def serve():
        lsn.settimeout(0.1)
        while not stop.is_set():
            try:
                c, _ = lsn.accept()
            except OSError:
                continue
            accepted.append(time.monotonic())
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        _, agent, admin = procs.agent(host, f"{host}:9000", policy="always", app_probe_ms=3000)
        wait_until(lambda: request(agent, "GET", "/.hunt/health")[0] == 200, what="health 200")
        n = len(accepted)
        t0 = time.monotonic()
        for _ in range(10):
            assert request(agent, "GET", "/.hunt/health")[0] == 200
        # at most one probe an app_probe_ms, however long the checks took (a connection each was 10)
        most = 1 + int((time.monotonic() - t0) / 3.0)
        assert len(accepted) - n <= most, f"{len(accepted) - n} connections for 10 checks (at most {most})"
        assert metrics(admin)["huntlb_health_checks_total"] >= 11
        # The app gone: a check past app_probe_ms connects, finds nothing, says so.
        stop.set()
        t.join()
        lsn.close()  # nothing listens: the kernel refuses the probe
        wait_until(lambda: request(agent, "GET", "/.hunt/health")[0] == 503, timeout=15, what="health finds the app gone")
        assert metrics(admin)["huntlb_app_up"] == 0
    finally:
        stop.set()
        lsn.close()


def test_sigterm_drains(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, cores=64, demand="const:0")
    proc, agent, admin = procs.agent(host, app, policy="always", drain_grace_ms=300)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", request(agent, "GET", "/slow?work_ms=1500", headers=FINAL)))
    t.start()
    wait_until(lambda: inflight(admin) == 1, what="slow request in flight")
    proc.signal(signal.SIGTERM)
    wait_until(lambda: request(agent, "GET", "/.hunt/health")[0] == 503, what="health 503 while draining")
    assert request(agent, "GET", "/x", headers=OFFER)[0] == 425
    assert metrics(admin)['huntlb_refusals_total{reason="draining"}'] == 1
    assert proc.alive(), "exited with a request in flight"
    t.join(timeout=10)
    assert result["r"][0] == 200, "in-flight request must finish during drain"
    assert proc.wait(timeout=10) == 0


@pytest.mark.parametrize(
    "args,key",
    [
        (["--policy", "fastest"], "`policy`"),
        (["--policy", "dynamic:window=0"], "`window`"),
        (["--workers", "0"], "`workers`"),
        (["--load", "cpu"], "`load`"),
        (["--listen", "not-an-address"], "`listen`"),
    ],
)
def test_bad_config_fails_naming_the_key(procs, addrs, args, key):
    host = addrs.host()
    p, _, _ = procs.agent(host, f"{host}:9000", wait=False, **dict(zip([a.lstrip("-") for a in args[::2]], args[1::2])))
    assert p.wait(timeout=10) == 2
    assert key in p.log()


def test_unknown_key_in_config_file_is_named(procs, addrs, tmp_path):
    host = addrs.host()
    cfg = tmp_path / "agent.toml"
    cfg.write_text('policy = "static:4"\npolcy = "dynamic"\n')
    p, _, _ = procs.agent(host, f"{host}:9000", wait=False, config=cfg)
    assert p.wait(timeout=10) == 2
    assert "polcy" in p.log()


def test_config_file_and_flag_override(procs, addrs, tmp_path):
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    cfg = tmp_path / "agent.toml"
    cfg.write_text('policy = "static:0"\nworkers = 8\n')
    _, agent, admin = procs.agent(host, app, config=cfg)
    assert request(agent, "GET", "/x", headers=OFFER)[0] == 425
    assert metrics(admin)["huntlb_workers"] == 8
    _, agent2, admin2 = procs.agent(addrs.host(), app, config=cfg, policy="static:5")
    assert request(agent2, "GET", "/x", headers=OFFER)[0] == 200
    assert metrics(admin2)["huntlb_policy_c"] == 5


def test_the_printed_defaults_are_what_an_agent_given_none_runs_with(procs, addrs):
    # `huntlb-agent --print-defaults`, what the harness and the benches read
    # (agent_default) instead of copies: an agent given none of these keys
    # reports them, and its health path answers
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    _, agent, admin = procs.agent(host, app)
    m = metrics(admin)
    assert m["huntlb_workers"] == agent_default("workers")
    assert m["huntlb_connections_max"] == agent_default("max_connections")
    assert request(agent, "GET", agent_default("health_path"))[0] == 200
    assert agent_default("fleet_sample") > 0 and 0 < agent_default("llm_kv_busy_at") <= 1
    assert "fleet_peer_port" not in agent_defaults(), "worked out from other keys: no value to print"
    # it only prints: with a key beside it, it is refused
    p = procs.start("agent-print-defaults", [binary("huntlb-agent"), "--print-defaults", "--workers", "3"])
    assert p.wait(timeout=10) == 2


def test_malformed_and_huge_requests_get_clear_errors(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    _, agent, _ = procs.agent(host, app, policy="always")
    huge = b"GET / HTTP/1.1\r\nHost: x\r\nx-big: " + b"a" * 200_000 + b"\r\n\r\n"
    assert raw_status(agent, huge) == 431
    assert raw_status(agent, b"GARBAGE\r\n\r\n") == 400
    assert raw_status(agent, b"GET / HTTP/1.1\r\nHost: x\r\nbad header\r\n\r\n") == 400
    # still serving
    assert request(agent, "GET", "/x", headers=OFFER)[0] == 200


def raw_status(addr, payload):
    from harness import raw_exchange

    reply = raw_exchange(addr, payload)
    assert reply.startswith(b"HTTP/1.1 "), reply[:80]
    return int(reply[9:12])


def test_frozen_app_is_reported_down_and_back(procs, addrs):
    # A SIGSTOPped app still completes TCP handshakes (the kernel does), so a
    # connect probe says "up" while every request hangs. The agent notices that
    # requests wait with no answer (app_stall_ms), reports 503 and refuses
    # offers; after SIGCONT the app answers and all is well again.
    host = addrs.host()
    app_proc, app = procs.workload(host, demand="const:0")
    _, agent, admin = procs.agent(host, app, policy="always", app_stall_ms=600, app_probe_ms=100)
    assert request(agent, "GET", "/.hunt/health")[0] == 200
    app_proc.signal(signal.SIGSTOP)
    try:
        stuck = hold(agent, 1, 0)
        status, _, body = wait_until(lambda: (r := request(agent, "GET", "/.hunt/health", timeout=5))[0] == 503 and r,
                                     timeout=5, what="health 503 for a frozen app")
        assert b"stalled" in body
        assert request(agent, "GET", "/offer", headers=OFFER, timeout=5)[0] == 425
        m = metrics(admin)
        assert m["huntlb_app_stalled"] == 1 and m['huntlb_refusals_total{reason="app_down"}'] == 1
    finally:
        app_proc.signal(signal.SIGCONT)
    for t in stuck:
        t.join(timeout=10)
    assert app_stats(app)["paths"].get("/hold") == 1  # the held request was served once, late
    wait_until(lambda: request(agent, "GET", "/.hunt/health")[0] == 200, timeout=5, what="health 200 again")
    assert metrics(admin)["huntlb_app_stalled"] == 0
    assert request(agent, "GET", "/after", headers=OFFER)[0] == 200


def test_frozen_app_left_without_traffic_is_seen_coming_back(procs, addrs):
    # Stalled, then every waiting request gave up (app_timeout): no answer will
    # come on its own. The agent asks the app (OPTIONS *) until it answers.
    host = addrs.host()
    app_proc, app = procs.workload(host, demand="const:0")
    _, agent, admin = procs.agent(host, app, policy="always", app_stall_ms=300, app_probe_ms=100, app_timeout_ms=1000)
    app_proc.signal(signal.SIGSTOP)
    try:
        assert request(agent, "GET", "/stuck", timeout=10)[0] == 504
        wait_until(lambda: metrics(admin)["huntlb_inflight"] == 0, timeout=5, what="nothing in flight")
        assert request(agent, "GET", "/.hunt/health")[0] == 503
    finally:
        app_proc.signal(signal.SIGCONT)
    wait_until(lambda: request(agent, "GET", "/.hunt/health")[0] == 200, timeout=5, what="health 200 after SIGCONT")


def test_admin_port_closes_idle_connections(procs, addrs):
    # The metrics port held an idle connection 40 s and more; now 10 s.
    import socket
    import time

    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    _, _, admin = procs.agent(host, app, policy="always")
    h, p = admin.rsplit(":", 1)
    with socket.create_connection((h, int(p)), timeout=20) as s:
        t0 = time.monotonic()
        assert s.recv(1024) == b""  # closed by the agent, nothing sent
        assert time.monotonic() - t0 < 20
    assert metrics(admin)["huntlb_inflight"] == 0  # and it still serves


def test_an_offer_is_decided_with_its_fronts_own_count_at_this_backend(procs, addrs):
    # hunt-front: the agent counts the tries it holds from each named front and
    # takes that as the offer's hunt-seen. The policy refuses every offer but
    # those within seen_margin 1 of what their front holds here, so with two slow
    # requests held from front A: A's offer is accepted (busy 2 <= 2 + 1), B's
    # and an unnamed one are refused (busy 2 > 0 + 1), and a hunt-seen sent
    # with the name wins over the count.
    host = addrs.host()
    _, app = procs.workload(host, workers=8, demand="const:0")
    _, agent, admin = procs.agent(host, app, policy="dynamic:c0=0,c_max=0,seen_margin=1")
    ts = hold(agent, 2, 3000, headers={**FINAL, "hunt-front": "A"})
    wait_until(lambda: inflight(admin) == 2, timeout=5)
    assert request(agent, "GET", "/a", headers={**OFFER, "hunt-front": "A"})[0] == 200
    assert request(agent, "GET", "/b", headers={**OFFER, "hunt-front": "B"})[0] == 425
    assert request(agent, "GET", "/c", headers=OFFER)[0] == 425
    assert request(agent, "GET", "/d", headers={**OFFER, "hunt-front": "B", "hunt-seen": "2"})[0] == 200
    assert request(agent, "GET", "/e", headers={**OFFER, "hunt-front": "bad name"})[0] == 425
    for t in ts:
        t.join(timeout=10)
    # the held ones are done and counted out: an idle backend, busy 0 <= 0 + 1
    wait_until(lambda: inflight(admin) == 0, timeout=5)
    assert request(agent, "GET", "/f", headers={**OFFER, "hunt-front": "B"})[0] == 200


def test_a_fronts_count_holds_a_streamed_response_until_its_body_ends(procs, addrs):
    """What the agent counts for a `hunt-front` name (that front's hunt-seen)
    holds each request until its response body ends, as its in-flight count
    and the front's own count do. Two streams from front-a whose heads have
    arrived: an offer from front-a (seen 2, b 2 <= 2 + 1) is accepted; had the
    count dropped at the response head (seen 0, b 2 > 0 + 1) the policy, with
    c = 1, would refuse it. An offer from front-b is refused either way."""
    from harness.apps import SseApp, start_app_backends
    (b,) = start_app_backends(procs, addrs, 1, "dynamic:seen_margin=1,c0=1,window=1000", SseApp)
    conns = []
    for _ in range(2):
        conn = http.client.HTTPConnection(*b.agent.split(":"), timeout=10)
        conn.request("GET", "/events?n=30&every_ms=100", headers={**FINAL, "hunt-front": "front-a"})
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.fp.readline()  # the first event's chunk: the head is long gone, the body goes on
        conns.append((conn, resp))
    wait_until(lambda: inflight(b.admin) == 2, what="2 streams in flight")
    assert request(b.agent, "GET", "/from-b", headers={**OFFER, "hunt-front": "front-b"})[0] == 425
    assert request(b.agent, "GET", "/from-a", headers={**OFFER, "hunt-front": "front-a"})[0] == 200
    assert inflight(b.admin) == 2, "a stream ended before the offers did: the test proves nothing"
    for conn, resp in conns:
        conn.close()
    wait_until(lambda: inflight(b.admin) == 0, what="streams closed")
    # front-a's count went with its streams: an offer from it at b = 0 is taken
    assert request(b.agent, "GET", "/after", headers={**OFFER, "hunt-front": "front-a"})[0] == 200
    m = metrics(b.admin)
    assert (m['huntlb_offers_total{decision="accept"}'], m['huntlb_offers_total{decision="refuse"}']) == (2, 1)


def test_fds_return_to_their_idle_count_after_a_burst(procs, addrs):
    """The soak saw the agents' file descriptors grow (330 -> 360 over 12
    agents in 10 min): the pool of idle connections to the app kept every
    connection its busiest moment had opened (hyper's pool reaps nothing
    without a timer; here 39 of 40 stayed). Each must close after
    `pool_idle_ms` unused: after a burst of 40 concurrent requests and that
    long, the agent holds what it held before it."""
    host = addrs.host()
    _, app = procs.workload(host, workers=64, cores=64, demand="const:0")
    p, agent, admin = procs.agent(host, app, policy="always", pool_idle_ms=300)
    fds = lambda: len(os.listdir(f"/proc/{p.pid}/fd"))  # noqa: E731
    assert request(agent, "GET", "/warm")[0] == 200
    time.sleep(0.6)  # the warm-up's connection to the app goes idle and closes
    idle = fds()
    for burst in range(3):
        ts = hold(agent, 40, work_ms=300)
        wait_until(lambda: inflight(admin) == 40, what="40 in flight")
        grown = fds()
        for t in ts:
            t.join(timeout=10)
        wait_until(lambda: fds() <= idle, timeout=5, what=f"fds back to {idle} after burst {burst} (at {fds()}, {grown} during it)")
        assert grown >= idle + 40, f"the burst held {grown} fds, {idle} idle: it did not open a connection per request"


def test_a_fleet_key_others_may_read_is_refused_and_a_weak_one_warned_about(procs, addrs, tmp_path):
    # As ssh does with a private key: whoever reads the fleet key speaks for
    # every member. Before, a key file of mode 0644 and a key of 32 identical
    # characters started without a word.
    import os
    import secrets
    host = addrs.host()
    fleet = {"fleet_listen": f"{host}:{FLEET_PORT}", "fleet_peers": peers_of([host, addrs.host()])}
    key = tmp_path / "fleet.key"
    key.write_text(secrets.token_hex(32) + "\n")
    os.chmod(key, 0o644)
    p, _, _ = procs.agent(host, f"{host}:9000", wait=False, fleet_key_file=key, **fleet)
    assert p.wait(timeout=10) == 2
    assert "`fleet_key_file`" in p.log() and "mode 0644" in p.log() and "chmod 600" in p.log()
    assert key.read_text().strip() not in p.log(), "the error never shows the key"
    # Told that a secret store mounts it so: taken.
    p, _, admin = procs.agent(host, f"{host}:9000", fleet_key_file=key, fleet_key_readable_by_others="true", **fleet)
    assert p.alive()
    p.stop()
    # A key that looks guessable: taken, with a warning naming the file and line.
    weak = tmp_path / "weak.key"
    weak.write_text("a" * 32 + "\n")
    os.chmod(weak, 0o600)
    p, _, _ = procs.agent(host, f"{host}:9000", fleet_key_file=weak, **fleet)
    assert p.alive()
    log = p.log()
    assert "looks guessable" in log and str(weak) in log and "line 1" in log and "a" * 32 not in log
