"""The forwarding tier (agent `fleet_listen`, policy/src/forward.rs): agents
share their in-flight counts over UDP and send an offer their backend is not the
fleet's least for to the least peer, as a final. Real agents and apps on
loopback; every path counts arrivals at the apps, since a forwarded try that may
have reached a peer must never be sent anywhere else.
"""

import signal
import threading
import time
import uuid

import pytest
from harness.fleetwire import Member, seal, text
from harness import OFFER, app_stats, counts, hold, path_count, request, start_fleet, start_front, wait_until
from harness.testbed import FLEET_PORT
from workload_hash import fnv64


def test_an_offer_goes_to_the_least_loaded_peer_once(procs, addrs):
    # Heartbeats a second apart: the counts below reach the peers only as each
    # change is sent (were they not, b and c would tie at 0 in a's view, and
    # five forwards would all land on b one time in 32).
    # c holds two more than b could seem to hold at any moment (a count read
    # mid-forward, on a loaded machine), so b stays the least.
    # A peer has 500 ms to take a forward, not 10: on a loaded machine a debug
    # build missed 10 ms now and then, and the try was served where it was.
    a, b, c = bs = start_fleet(procs, addrs, 3, agent_opts={"fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000,
                                                             "fleet_commit_ms": 500})
    hold(a, 4)
    hold(c, 3)
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 4)
    for _ in range(5):
        path = f"/fwd/{uuid.uuid4()}"
        status, h, _ = request(a.agent, "POST", path, headers=OFFER, body=b"x" * 1000)
        assert status == 200 and h["hunt-served-by"] == b.id, (status, h)
        assert counts(bs, path) == [0, 1, 0]
    m = a.metrics()
    assert m['huntlb_forwards_total{outcome="sent"}'] == 5
    assert m['huntlb_offers_total{decision="refuse"}'] == 0
    # The front knew a's load (hunt-seen): kept, as with one front.
    path = f"/kept/{uuid.uuid4()}"
    status, h, _ = request(a.agent, "GET", path, headers={**OFFER, "hunt-seen": "4"})
    assert status == 200 and h["hunt-served-by"] == a.id
    assert counts(bs, path) == [1, 0, 0]
    # A final is never forwarded, whatever the loads.
    path = f"/final/{uuid.uuid4()}"
    status, h, _ = request(a.agent, "GET", path, headers={"hunt-offer": "1", "hunt-target": "2"})
    assert status == 200 and h["hunt-served-by"] == a.id
    assert counts(bs, path) == [1, 0, 0]


def test_an_agent_hears_its_sample_and_forwards_only_within_it(procs, addrs):
    # Six agents, each hearing 2 (fleet_sample), drawn once for the test (the
    # next draw is minutes away): a's forwards go only to the 2 it hears, each
    # request is processed once, and the subscriptions stand at 2 per agent.
    opts = {"fleet_sample": 2, "fleet_sample_keep": 1, "fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 600000,
            "fleet_resample_ms": 300000, "fleet_commit_ms": 500}  # 500: as above
    bs = start_fleet(procs, addrs, 6, agent_opts=opts)
    a = bs[0]
    assert [b.metrics()["huntlb_fleet_peers"] for b in bs] == [2] * 6
    assert sum(b.metrics()["huntlb_fleet_peers_wanting"] for b in bs) == 12
    hold(a, 3)
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 3)
    served = set()
    for _ in range(12):
        path = f"/sampled/{uuid.uuid4()}"
        status, h, _ = request(a.agent, "POST", path, headers=OFFER, body=b"x")
        assert status == 200 and h["hunt-served-by"] != a.id, (status, h)
        assert sum(counts(bs, path)) == 1, counts(bs, path)
        served.add(h["hunt-served-by"])
    assert 1 <= len(served) <= 2, f"a hears 2 peers, yet forwarded to {sorted(served)}"
    assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] == 12


def test_with_one_front_no_agent_wants_changes_until_one_decides_by_them(procs, addrs):
    # Offers that carry what the front saw (one front) are kept by it: no
    # agent wants its peers' every change, and counts go out as heartbeats
    # only. The first offer decided by the counts makes that agent want them,
    # and its peers learn so.
    a, b, c = bs = start_fleet(procs, addrs, 3, wanting=False)
    for b_ in bs:
        path = f"/one-front/{uuid.uuid4()}"
        status, h, _ = request(b_.agent, "GET", path, headers={**OFFER, "hunt-seen": "0"})
        assert status == 200 and h["hunt-served-by"] == b_.id
        assert counts(bs, path) == [int(x is b_) for x in bs]
    assert [x.metrics()["huntlb_fleet_peers_wanting"] for x in bs] == [0, 0, 0]
    status, h, _ = request(a.agent, "GET", f"/decided/{uuid.uuid4()}", headers=OFFER)
    assert status == 200
    wait_until(lambda: b.metrics()["huntlb_fleet_peers_wanting"] == 1 and c.metrics()["huntlb_fleet_peers_wanting"] == 1,
               what="b and c told that a wants their changes")
    assert a.metrics()["huntlb_fleet_peers_wanting"] == 0


def test_a_forwarded_apps_425_is_carried_and_processed_once(procs, addrs):
    a, b = bs = start_fleet(procs, addrs, 2)
    hold(a, 2)
    path = f"/too-early/{uuid.uuid4()}"
    # hunt-target: a front that retries by status (HAProxy) gets the carried form.
    status, h, _ = request(a.agent, "POST", f"{path}?status=425", headers=OFFER, body=b"order")
    assert (status, h.get("hunt-status"), h.get("hunt"), h["hunt-served-by"]) == (400, "425", None, b.id)
    assert counts(bs, path) == [0, 1]
    # An Envoy front names its try by attempt count: the app's 425 as it is, no `hunt`.
    path = f"/too-early/{uuid.uuid4()}"
    envoy_offer = {"hunt-offer": "1", "x-envoy-attempt-count": "1"}
    status, h, _ = request(a.agent, "POST", f"{path}?status=425", headers=envoy_offer, body=b"order")
    assert (status, h.get("hunt-status"), h.get("hunt")) == (425, None, None)
    assert counts(bs, path) == [0, 1]


def test_a_dead_peer_costs_nothing_the_offer_is_served_here(procs, addrs):
    # b's agent dies; a still thinks it idle (dead_after is long here) and
    # forwards there, but finds no one: nothing was sent, the body comes back
    # unread, and a serves the offer itself, once. Then b takes no forwards and
    # a's policy decides again.
    a, b = bs = start_fleet(procs, addrs, 2, policy="always", agent_opts={"fleet_dead_after_ms": 30000})
    hold(a, 2)
    wait_until(lambda: b.metrics()["huntlb_inflight"] == 0)
    b.agent_proc.signal(signal.SIGKILL)
    b.agent_proc.wait(5)
    path = f"/dead/{uuid.uuid4()}"
    body = bytes(range(256)) * 20
    status, h, got = request(a.agent, "POST", path, headers=OFFER, body=body)
    assert status == 200 and h["hunt-served-by"] == a.id, (status, h)
    # the app got the whole body, byte for byte
    assert f'"len":{len(body)}' in got.decode() and f'"fnv64":"{fnv64(body):016x}"' in got.decode(), got[:300]
    assert counts(bs, path) == [1, 0]
    m = a.metrics()
    assert m['huntlb_forwards_total{outcome="unreachable"}'] == 1 and m['huntlb_forwards_total{outcome="refused"}'] == 0
    assert m["huntlb_fleet_peers"] == 0
    path = f"/after/{uuid.uuid4()}"
    status, h, _ = request(a.agent, "POST", path, headers=OFFER, body=b"x")
    assert status == 200 and h["hunt-served-by"] == a.id
    assert counts(bs, path) == [1, 0]


def test_a_frozen_peer_costs_a_forward_its_commit_bound_never_an_error(procs, addrs):
    # b's agent is stopped (SIGSTOP) once the peers know it idle: the kernel
    # still takes the connection and the forward's head, but b never says it
    # takes it. Before: 504 after app_timeout_ms + 1 s, the request lost. Now
    # a withdraws it after fleet_commit_ms and serves it itself; thawed, b
    # finds the connection ended before the go byte and gives its app nothing.
    a, b, c = bs = start_fleet(procs, addrs, 3, policy="always",
                               agent_opts={"fleet_dead_after_ms": 30000, "app_timeout_ms": 1500, "fleet_commit_ms": 50})
    hold(a, 2)
    hold(c, 2)
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 2 and c.metrics()["huntlb_inflight"] == 2)
    b.agent_proc.signal(signal.SIGSTOP)
    try:
        path = f"/frozen/{uuid.uuid4()}"
        body = bytes(range(256)) * 8
        status, h, got = request(a.agent, "POST", path, headers=OFFER, body=body, timeout=20)
        assert status == 200 and h["hunt-served-by"] == a.id, (status, got)
        assert f'"fnv64":"{fnv64(body):016x}"' in got.decode(), "the whole body, served here"
        m = a.metrics()
        assert m['huntlb_forwards_total{outcome="withdrawn"}'] == 1 and m['huntlb_forwards_total{outcome="failed"}'] == 0
    finally:
        b.agent_proc.signal(signal.SIGCONT)
    # Thawed, b reads the head, says it takes it, and finds no go: nothing processed there.
    wait_until(lambda: b.metrics()['huntlb_forwards_in_total{outcome="withdrawn"}'] == 1, what="b saw the forward withdrawn")
    assert counts(bs, path) == [1, 0, 0]


def test_a_peer_with_no_connection_slots_reports_itself_not_ready(procs, addrs):
    # Idle connections (a slowloris, no key needed) fill b's max_connections:
    # before, b still reported itself ready, and every forward there waited
    # the connect limit. Now b's reports say not ready while its slots are
    # gone, peers forward elsewhere, and b is back once they are freed.
    import socket
    a, b, c = bs = start_fleet(procs, addrs, 3, policy="always", agent_opts={"max_connections": 64})
    hold(a, 3)
    hold(c, 1)
    wait_until(lambda: a.metrics()["huntlb_fleet_peers"] == 2)
    idle = []
    try:
        for _ in range(70):
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect((b.host, 8080))
            except OSError:
                s.close()
                break
            idle.append(s)
        wait_until(lambda: a.metrics()["huntlb_fleet_peers"] == 1, what="b out of a's view")
        for _ in range(5):
            path = f"/slots/{uuid.uuid4()}"
            status, h, _ = request(a.agent, "POST", path, headers=OFFER, body=b"x")
            assert status == 200 and h["hunt-served-by"] == c.id, (status, h)
            assert counts(bs, path) == [0, 0, 1]
        m = a.metrics()
        assert m['huntlb_forwards_total{outcome="withdrawn"}'] == 0 and m['huntlb_forwards_total{outcome="unreachable"}'] == 0
    finally:
        for s in idle:
            s.close()
    wait_until(lambda: a.metrics()["huntlb_fleet_peers"] == 2, what="b back in a's view once its slots are free")


@pytest.mark.parametrize("front_kind", ["envoy", "haproxy-2.6"])
def test_through_a_real_front_every_request_is_processed_once(procs, addrs, front_kind):
    # Every agent but b is loaded and b's agent is dead, though its peers still
    # count it idle: an offer the front sends to a live agent is forwarded to
    # b, finds no one, and is served where it landed. The client sees 200 every
    # time and every request reaches exactly one app.
    bs = start_fleet(procs, addrs, 3, agent_opts={"fleet_dead_after_ms": 30000})
    a, b, c = bs
    f = start_front(front_kind, procs, addrs, bs)
    hold(a, 3)
    hold(c, 3)
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 3 and c.metrics()["huntlb_inflight"] == 3)
    b.agent_proc.signal(signal.SIGKILL)
    b.agent_proc.wait(5)
    for i in range(8):
        path = f"/front/{uuid.uuid4()}"
        status, h, body = request(f.listen, "POST", path, body=b"order=%d" % i, timeout=20)
        assert status == 200, (status, body[:200])
        assert h["hunt-served-by"] in (a.id, c.id)
        assert path_count([a, c], path) == 1 and app_stats(b.app)["paths"].get(path, 0) == 0
    lost = sum(x.metrics()['huntlb_forwards_total{outcome="unreachable"}'] for x in (a, c))
    assert lost >= 1, "no offer was forwarded to the dead peer: the test proved nothing"


def test_a_peer_that_cannot_take_a_forward_refuses_it_and_nothing_is_processed(procs, addrs):
    # b's app dies after a's last news of b: a forwards there, b cannot reach
    # its app (nothing processed), a turns that into a refusal the front re-sends.
    a, b = bs = start_fleet(procs, addrs, 2, agent_opts={"fleet_dead_after_ms": 30000})
    hold(a, 2)
    wait_until(lambda: b.metrics()["huntlb_fleet_peers"] == 1)
    b.app_proc.signal(signal.SIGKILL)
    b.app_proc.wait(5)
    path = f"/no-app/{uuid.uuid4()}"
    status, h, _ = request(a.agent, "POST", path, headers=OFFER, body=b"order")
    assert (status, h.get("hunt")) == (425, "busy")
    assert app_stats(a.app)["paths"].get(path, 0) == 0
    assert a.metrics()['huntlb_forwards_total{outcome="refused"}'] == 1
    # A forwarded try that finds the peer full reached no app either: refused.
    c, d = start_fleet(procs, addrs, 2, agent_opts={"max_inflight": 2})
    hold(d, 2)
    path = f"/full/{uuid.uuid4()}"
    status, h, _ = request(d.agent, "POST", path, headers={"hunt-target": "forwarded", "hunt-via": c.agent}, body=b"x")
    assert (status, h.get("hunt")) == (425, "busy")
    assert app_stats(d.app)["paths"].get(path, 0) == 0
    assert d.metrics()['huntlb_offers_total{decision="refuse"}'] == 0, "a forwarded try is no offer here"
    # The same try from a front (no hunt-via) is a final: an error, never a refusal.
    status, h, _ = request(d.agent, "POST", path, headers={"hunt-offer": "1", "hunt-target": "2"}, body=b"x")
    assert (status, h.get("hunt")) == (503, None)


def test_reports_from_outside_fleet_peers_are_dropped(procs, addrs):
    import socket
    a, b = start_fleet(procs, addrs, 2)
    hold(a, 2)
    hold(b, 2)
    stray = addrs.host()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((stray, 0))
        for i in range(5):
            s.sendto(f"hunt-fleet/2 {stray}:{FLEET_PORT} {i + 1} 0 1 1 {'00' * 16}".encode(), (a.host, FLEET_PORT))
    wait_until(lambda: a.metrics()['huntlb_fleet_reports_bad_total{reason="stranger"}'] == 5, what="the stray reports counted")
    assert a.metrics()["huntlb_fleet_peers"] == 1
    # Loaded alike, a keeps its offer: the stray "idle" address is no peer.
    path = f"/stray/{uuid.uuid4()}"
    status, h, _ = request(a.agent, "GET", path, headers=OFFER)
    assert status == 200 and h["hunt-served-by"] == a.id


class Listener:
    """A fake HTTP service an attacker would like forwards to reach: counts
    what arrives, answers 200."""

    def __init__(self, host, port):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        self.got = []
        got = self.got

        class H(BaseHTTPRequestHandler):
            def _any(self):
                n = int(self.headers.get("content-length") or 0)
                got.append((self.command, self.path, dict(self.headers), self.rfile.read(n)))
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST = _any

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer((host, port), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def sealed(key_file, text):
    import hashlib
    import hmac
    key = open(key_file).read().strip().encode()
    return f"{text} {hmac.new(key, text.encode(), hashlib.sha256).digest()[:16].hex()}".encode()


def test_a_datagram_never_decides_where_a_request_goes(procs, addrs):
    # fleet_peers lists a fourth member whose agent is not running; an
    # attacker binds its UDP port (no privilege needed) and runs an HTTP
    # listener. Before: a report naming that listener with the least count
    # sent 10 of 10 POSTs there, headers and body, and the apps saw none.
    import socket
    gone = addrs.host()
    bs = start_fleet(procs, addrs, 3, absent=[gone], agent_opts={"fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000})
    front = start_front("envoy", procs, addrs, bs)
    fake = Listener(addrs.host(), 8081)
    procs.cleanups.append(fake.close)
    fake_addr = f"{fake.server.server_address[0]}:8081"
    for b in bs:
        hold(b, 2)
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    procs.cleanups.append(attacker.close)
    attacker.bind((gone, FLEET_PORT))

    def forge(seq):
        # The old format, naming where to send; the new one, unsealed and
        # sealed under a wrong key, with a sequence that would drown the
        # member's own; the front's own listener as a loop target.
        for d in [f"hunt-fleet/1 {fake_addr} {seq} 0 1 1".encode(), f"hunt-fleet/1 {front.listen} {seq} 0 1 1".encode(),
                  f"hunt-fleet/2 {gone}:{FLEET_PORT} 18446744073709551615 0 1 1 {'ab' * 16}".encode()]:
            for b in bs:
                attacker.sendto(d, (b.host, FLEET_PORT))

    forge(1)
    wait_until(lambda: all(b.metrics()['huntlb_fleet_reports_bad_total{reason="unauthenticated"}'] >= 1 for b in bs))
    assert all(b.metrics()["huntlb_fleet_peers"] == 2 for b in bs), "the forged member is no peer"
    paths = []
    for i in range(10):
        forge(i + 2)
        path = f"/hijack/{uuid.uuid4()}"
        status, h, out = request(front.listen, "POST", path, headers={"authorization": "Bearer secret", "cookie": "s=1"}, body=b"card=4111")
        assert status == 200 and out != b"ok", (status, out)
        paths.append(path)
    assert fake.got == [], f"the fake listener received {len(fake.got)} requests"
    assert all(path_count(bs, p) == 1 for p in paths), "each processed once, by the fleet's apps"
    m = [b.metrics() for b in bs]
    assert sum(x['huntlb_fleet_reports_bad_total{reason="malformed"}'] for x in m) >= 60
    # Even with the key (an insider, or the member's own agent gone rogue), a
    # report carries only its sender's count: the forwards it draws go to that
    # member's own address (nothing listens there), are found unreachable and
    # served where they were offered.
    attacker.close()
    insider = Member(procs.fleet_key(), gone)
    procs.cleanups.append(insider.close)
    agents = [f"{b.host}:{FLEET_PORT}" for b in bs]
    for i in range(10):
        insider.report(agents, 0)
        wait_until(lambda: all(b.metrics()["huntlb_fleet_peers"] == 3 for b in bs), what="the keyed member heard")
        path = f"/insider/{uuid.uuid4()}"
        status, h, out = request(front.listen, "POST", path, body=b"x" * 100)
        assert status == 200 and path_count(bs, path) == 1, (status, out)
    assert fake.got == []
    assert sum(b.metrics()['huntlb_forwards_total{outcome="unreachable"}'] for b in bs) >= 1


def test_junk_on_the_fleet_port_is_counted_and_grows_nothing(procs, addrs):
    # Distinct senders named in 20000 datagrams, sealed under the right key
    # but sent from one member's address: before, each became a peer (10-21k,
    # RSS 14 -> 41 MB, offers 10x slower). The table is keyed by member now.
    import socket
    gone = addrs.host()
    a, b = bs = start_fleet(procs, addrs, 2, absent=[gone])
    rss0 = _rss(a.agent_proc.pid)
    key = procs.fleet_key()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((gone, FLEET_PORT))
        for i in range(20_000):
            s.sendto(seal(key, text(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:{FLEET_PORT}", f"{a.host}:{FLEET_PORT}", 1, i + 1, 0)), (a.host, FLEET_PORT))
            if i % 2000 == 1999:
                time.sleep(0.02)  # the kernel's buffer, not the agent, would drop the rest
    wait_until(lambda: a.metrics()['huntlb_fleet_reports_bad_total{reason="replayed"}'] >= 15_000, timeout=20,
               what="the junk read and dropped")
    m = a.metrics()
    assert m["huntlb_fleet_peers"] == 1, "only b"
    assert _rss(a.agent_proc.pid) - rss0 < 8 << 20, "memory grew with the junk"
    path = f"/after-junk/{uuid.uuid4()}"
    assert request(a.agent, "GET", path, headers=OFFER)[0] == 200 and path_count(bs, path) == 1


def _rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_draining_agent_waits_for_what_it_relays(procs, addrs):
    # a relays a slow POST to b and is told to stop (drain_grace_ms 0): it
    # exits only once the relayed answer is through.
    a, b = bs = start_fleet(procs, addrs, 2, agent_opts={"drain_grace_ms": 0})
    hold(a, 2, work_ms=800)
    got = {}
    path = f"/slow/{uuid.uuid4()}"

    def client():
        got["r"] = request(a.agent, "POST", f"{path}?work_ms=1500", headers=OFFER, body=b"order", timeout=20)

    t = threading.Thread(target=client)
    t.start()
    wait_until(lambda: app_stats(b.app)["paths"].get(path, 0) == 1 or app_stats(b.app)["busy"] >= 1, what="the POST at b")
    a.agent_proc.signal(signal.SIGTERM)
    t.join(timeout=20)
    status, h, _ = got["r"]
    assert status == 200 and h["hunt-served-by"] == b.id
    assert counts(bs, path) == [0, 1]
    assert a.agent_proc.wait(10) == 0


def test_no_app_takes_a_backend_out_of_an_envoy_fronts_rotation(procs, addrs):
    # x-envoy-immediate-health-check-fail on an upstream response ejects that
    # host at an Envoy front with health checks. The agent sends it for its own
    # refusals about the whole backend; an app's (here b's, reached through the
    # tier from a) must not reach the front, or one app could eject another's
    # backend.
    from harness import envoy_host_health
    a, b = bs = start_fleet(procs, addrs, 2, agent_opts={"fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000})
    front = start_front("envoy", procs, addrs, bs)
    hold(a, 2)
    wait_until(lambda: b.metrics()["huntlb_fleet_peers"] == 1)
    sent = 0
    for _ in range(6):
        path = f"/eject/{uuid.uuid4()}"
        status, h, _ = request(front.listen, "GET", f"{path}?hdr=x-envoy-immediate-health-check-fail:true&hdr=x-envoy-degraded:1",
                               headers={"x-envoy-attempt-count": "1"})
        assert status == 200, (status, h)
        assert "x-envoy-immediate-health-check-fail" not in h and "x-envoy-degraded" not in h
        assert path_count(bs, path) == 1
        sent += 1
    # Straight at each agent too (a's answer comes through the tier from b).
    for x in bs:
        status, h, _ = request(x.agent, "GET", "/eject-direct?hdr=x-envoy-immediate-health-check-fail:true", headers=OFFER)
        assert status == 200 and "x-envoy-immediate-health-check-fail" not in h, h
    assert a.metrics()['huntlb_forwards_total{outcome="sent"}'] >= 1, "no answer came through the tier: the test proves less"
    health = envoy_host_health(front.envoy_admin)
    assert all(v == "healthy" for v in health.values()), health
