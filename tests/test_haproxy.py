"""The hunting front on real HAProxy: Debian's 2.6 (Lua 5.3) and 3.0 (Lua 5.4,
in a debootstrapped trixie root), over real agents and workload apps."""

import time

import pytest
from dnsserver import NAME, naming
from harness import (HAPROXY_VERSIONS, HaproxyRoot, haproxy_config, haproxy_front_text, haproxy_runtime,
                     haproxy_server_states, least_pick, request, start_backends, start_haproxy, wait_runtime,
                     wait_tcp, wait_until)
from workload_hash import post_once

pytestmark = pytest.mark.parametrize("version", HAPROXY_VERSIONS)


@pytest.fixture
def hroot(version):
    hr = HaproxyRoot(version)
    yield hr
    hr.cleanup()


@pytest.fixture
def front(procs, addrs, hroot):
    def start(backends, **kw):
        host = addrs.host()
        listen, stats = f"{host}:10000", str(hroot.dir / f"{host}.sock")  # the shipped unix socket
        p = start_haproxy(procs, hroot, f"haproxy-{host}", haproxy_front_text(hroot, listen, stats, backends, **kw))
        wait_runtime(stats, p)
        # ready once the health checks pass (and, for random offers, the module
        # has published the usable servers)
        if kw.get("hunting", True):
            wait_until(lambda: all(s.startswith("UP") for s in haproxy_server_states(stats).values()), timeout=15, what="servers UP")
            if kw.get("offer") == "random":
                time.sleep(0.3)  # one map refresh (every_ms=100)
        return listen, stats
    return start


@pytest.mark.parametrize("size,offered", [(1_000, True), (10_000, True), (64_000, False), (900_000, False)])
def test_post_processed_once_with_body_intact(procs, addrs, front, size, offered):
    # Bodies up to 12000 bytes are offered (and replayed when refused); larger ones
    # are sent to one server as a final: they could not be replayed.
    bs = start_backends(procs, addrs, 3, "static:0")
    listen, _ = front(bs)
    assert post_once(listen, bs, size) == (1 if offered else 0)


def front_map(hroot, stats) -> dict[int, str]:
    """The module's index -> usable-server map, read back through the runtime API."""
    out = haproxy_runtime(stats, f"show map {hroot.inside(hroot.dir / 'huntlb-up.map')}")
    return {int(k): v for _, k, v in (line.split() for line in out.splitlines() if line.strip())}


class Held:
    """Slow requests held open through a front, one at a time, each once the
    previous one is in flight at an app; and quick ones, each checked to be
    served by `backend`. The backends' own in-flight counts are the truth."""

    def __init__(self, listen, backends):
        self.listen, self.bs, self.threads = listen, backends, []

    def inflight(self) -> list[int]:
        return [int(b.metrics()["huntlb_inflight"]) for b in self.bs]

    def hold(self, n: int) -> None:
        import threading
        for _ in range(n):
            i = len(self.threads)
            t = threading.Thread(target=request, args=(self.listen, "GET", f"/slow/{i}?work_ms=4000"), kwargs={"timeout": 20},
                                 daemon=True)
            t.start()
            self.threads.append(t)
            wait_until(lambda: sum(self.inflight()) == i + 1, timeout=5, what=f"{i + 1} held")

    def quick_all_to(self, backend, n: int) -> None:
        for i in range(n):
            time.sleep(0.05)  # HAProxy counts the previous quick request until its stream is released
            status, headers, _ = request(self.listen, "GET", f"/quick/{i}")
            assert status == 200 and headers.get("hunt-served-by") == backend.id, (i, self.inflight())

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=20)


# Agents that refuse every offer except one whose hunt-seen is at least their
# true in-flight count: an offer is accepted only if the front sent the right
# count of the right server.
COUNT_CHECKING = "dynamic:c0=0,c_max=0,seen_margin=0"


def test_offered_to_the_least_loaded_server_with_its_count(procs, addrs, front):
    # Slow requests held one by one land one per server (the least loaded each
    # time); with 2, 2 and 1 held, every new request is offered to the 1.
    bs = start_backends(procs, addrs, 3, COUNT_CHECKING)
    listen, _ = front(bs)
    h = Held(listen, bs)
    h.hold(3)
    assert h.inflight() == [1, 1, 1], "each slow request went to a server with none"
    h.hold(2)
    assert sorted(h.inflight()) == [1, 2, 2]
    h.quick_all_to(bs[h.inflight().index(1)], 10)
    assert sum(b.refused() for b in bs) == 0, "an offer carried a count below the server's in-flight requests"
    assert sum(b.metrics()['huntlb_offers_total{decision="accept"}'] for b in bs) == 15
    h.join()


def test_a_server_down_is_never_the_offer(procs, addrs, front):
    # The idle server, the least loaded by count, taken out: each pick rule
    # compares the count first and the state second (least_pick.py), so this
    # holds the second: the offers go to the least loaded of the servers up,
    # and they are offers (accepted as such), not finals leastconn placed.
    bs = start_backends(procs, addrs, 3, COUNT_CHECKING)
    listen, stats = front(bs)
    h = Held(listen, bs)
    h.hold(2)
    idle = h.inflight().index(0)
    haproxy_runtime(stats, f"set server hunt/web{idle + 1} state maint")
    wait_until(lambda: haproxy_server_states(stats)[f"web{idle + 1}"] == "MAINT", timeout=5, what="idle server MAINT")
    before = sum(b.metrics()['huntlb_offers_total{decision="accept"}'] for b in bs)
    for i in range(10):
        time.sleep(0.05)  # HAProxy counts the previous quick request until its stream is released
        status, headers, _ = request(listen, "GET", f"/quick/{i}")
        assert status == 200 and headers.get("hunt-served-by") in {b.id for k, b in enumerate(bs) if k != idle}, i
    assert sum(b.metrics()['huntlb_offers_total{decision="accept"}'] for b in bs) - before == 10, "not offered"
    assert sum(b.refused() for b in bs) == 0
    h.join()


def test_least_pick_with_unnumbered_server_names(procs, addrs, hroot):
    # Servers not named PREFIX1..N get least_pick.py's other form (a pair of
    # rules per server, the name kept in a variable): the same pick. Two slow
    # requests held land on two servers; every quick one then goes to the third.
    bs = start_backends(procs, addrs, 3, COUNT_CHECKING)
    host = addrs.host()
    listen, stats = f"{host}:10000", f"{host}:9999"
    text = haproxy_front_text(hroot, listen, stats, bs)
    for i, name in enumerate(["alpha", "beta", "gamma"]):
        text = text.replace(f"server web{i + 1} ", f"server {name} ")
    text = least_pick.rewrite(text)
    assert "str(gamma)" in text and "concat" not in text
    wait_tcp(stats, start_haproxy(procs, hroot, f"haproxy-{host}", text))
    wait_until(lambda: all(s.startswith("UP") for s in haproxy_server_states(stats).values()), timeout=15, what="servers UP")
    h = Held(listen, bs)
    h.hold(2)
    assert sorted(h.inflight()) == [0, 1, 1]
    h.quick_all_to(bs[h.inflight().index(0)], 5)
    assert sum(b.refused() for b in bs) == 0
    h.join()


def test_not_offered_with_one_usable_server(procs, addrs, front, hroot):
    # Agents refuse every offer. With one usable server an offer's retry would
    # come back to it, refused again: the config must not offer (nbsrv < 2).
    bs = start_backends(procs, addrs, 2, "static:0")
    listen, stats = front(bs)
    for i in range(10):
        assert request(listen, "GET", f"/two/{i}")[0] == 200
    assert sum(b.refused() for b in bs) == 10, "with two usable servers every request is offered (and refused once)"
    haproxy_runtime(stats, "set server hunt/web2 state maint")
    wait_until(lambda: haproxy_server_states(stats)["web2"] == "MAINT", timeout=5, what="web2 MAINT")
    for i in range(30):
        status, headers, _ = request(listen, "GET", f"/one/{i}")
        assert status == 200 and headers.get("hunt-served-by") == bs[0].id
    assert sum(b.refused() for b in bs) == 10, "an offer was made with one usable server"


def test_not_offered_with_one_usable_server_before_the_map_catches_up(procs, addrs, front, hroot):
    # Random offers (the paper's, as the benchmarks run them). Agents refuse every
    # offer. With one usable server an offer's retry would come back to it,
    # refused again: the config must not offer, from HAProxy's own count, even
    # while the module's map still names two servers.
    bs = start_backends(procs, addrs, 2, "static:0")
    mapfile = hroot.inside(hroot.dir / "huntlb-up.map")
    listen, stats = front(bs, offer="random", env_args=f"role=front backend=hunt map={mapfile} every_ms=60000")
    wait_until(lambda: front_map(hroot, stats) == {0: "web1", 1: "web2"}, timeout=5, what="map of 2 usable")
    for i in range(20):
        assert request(listen, "GET", f"/two/{i}")[0] == 200
    refused_with_two = sum(b.refused() for b in bs)
    assert refused_with_two == 20, "with two usable servers every request is offered (and refused once)"
    haproxy_runtime(stats, "set server hunt/web2 state maint")
    wait_until(lambda: haproxy_server_states(stats)["web2"] == "MAINT", timeout=5, what="web2 MAINT")
    assert front_map(hroot, stats) == {0: "web1", 1: "web2"}, "the module's next refresh is a minute away"
    served = []
    for i in range(50):
        status, headers, _ = request(listen, "GET", f"/one/{i}")
        assert status == 200
        served.append(headers.get("hunt-served-by"))
    assert served == [bs[0].id] * 50
    assert sum(b.refused() for b in bs) == refused_with_two, "an offer was made with one usable server"


def test_runtime_api_adds_a_backend_live(procs, addrs, hroot):
    bs = start_backends(procs, addrs, 3, "always")
    host = addrs.host()
    listen, stats = f"{host}:10000", f"{host}:9999"
    # two live servers and one pre-declared empty slot (Lua in 2.6 cannot see
    # servers created with `add server`; filling a declared slot works everywhere)
    text = least_pick.rewrite(haproxy_front_text(hroot, listen, stats, bs[:2]) + "    server web3 127.0.0.1:1 disabled\n")
    wait_tcp(stats, start_haproxy(procs, hroot, f"haproxy-{host}", text))
    served = lambda n: {request(listen, "GET", f"/rt/{i}")[1].get("hunt-served-by") for i in range(n)}
    wait_until(lambda: served(30) == {bs[0].id, bs[1].id}, timeout=10, what="two servers serving")
    haproxy_runtime(stats, f"set server hunt/web3 addr {bs[2].host} port 8080")
    haproxy_runtime(stats, "set server hunt/web3 state ready")
    wait_until(lambda: haproxy_server_states(stats)["web3"] == "UP", timeout=10, what="web3 UP")
    wait_until(lambda: bs[2].id in served(30), timeout=10, what="new server receives traffic")
    # and it takes part in hunting: offers are refused/accepted by it like the others
    assert bs[2].metrics()["huntlb_finals_total"] + bs[2].metrics()['huntlb_offers_total{decision="accept"}'] > 0


def dns_slots(text: str, dns) -> str:
    """The front's servers as 4 server-template slots filled from NAME's A
    records, asked of `dns` (short timeouts: the tests wait on changes)."""
    text = text.replace("defaults\n", f"resolvers huntdns\n    nameserver ns1 {dns.addr[0]}:{dns.addr[1]}\n"
                                      "    hold valid 1s\n    timeout resolve 200ms\n    timeout retry 200ms\n\ndefaults\n", 1)
    return least_pick.rewrite(text + f"    server-template web 4 {NAME}:8080 resolvers huntdns init-addr none\n")


def test_dns_discovery_adds_a_backend(procs, addrs, hroot):
    bs = start_backends(procs, addrs, 3, "always")
    with naming(addrs, [b.host for b in bs[:2]]) as dns:
        host = addrs.host()
        listen, stats = f"{host}:10000", f"{host}:9999"
        text = dns_slots(haproxy_front_text(hroot, listen, stats, []), dns)
        wait_tcp(stats, start_haproxy(procs, hroot, f"haproxy-{host}", text))
        served = lambda n: {request(listen, "GET", f"/dns/{i}")[1].get("hunt-served-by") for i in range(n)}
        wait_until(lambda: served(30) == {bs[0].id, bs[1].id}, timeout=15, what="two DNS backends serving")
        dns.records[NAME] = [b.host for b in bs]
        wait_until(lambda: bs[2].id in served(30), timeout=15, what="third backend receives traffic")


def server_addrs(stats: str, backend: str = "hunt") -> dict[str, tuple[str, int]]:
    """{server name: (address, srv_admin_state)} from `show servers state`."""
    out = {}
    for line in haproxy_runtime(stats, f"show servers state {backend}").splitlines():
        f = line.split()
        if len(f) > 6 and f[0].isdigit():
            out[f[3]] = (f[4], int(f[6]))
    return out


def test_dns_named_server_waits_for_its_first_health_probe(procs, addrs, hroot):
    # Docker's DNS names a container before it listens, and HAProxy puts a server
    # DNS fills in service at once, before any check: a final sent there (every
    # offer is refused here, static:0) failed with no try left. With gate_new the
    # module holds it in maintenance until one probe of its health path answers.
    bs = start_backends(procs, addrs, 2, "static:0")
    late = addrs.host()  # named by DNS now, listening only later
    with naming(addrs, [b.host for b in bs]) as dns:
        host = addrs.host()
        listen, stats = f"{host}:10000", f"{host}:9999"
        text = dns_slots(haproxy_front_text(hroot, listen, stats, [], env_args="role=front backend=hunt gate_new=hunt"), dns)
        wait_tcp(stats, start_haproxy(procs, hroot, f"haproxy-{host}", text))
        served = lambda n: [request(listen, "GET", f"/dns/{i}") for i in range(n)]
        wait_until(lambda: {h.get("hunt-served-by") for _, h, _ in served(30)} == {bs[0].id, bs[1].id}, timeout=15,
                   what="two DNS backends serving")
        dns.records[NAME] = [b.host for b in bs] + [late]
        wait_until(lambda: any(a == late for a, _ in server_addrs(stats).values()), timeout=10, what="the late host named")
        statuses = [s for s, _, _ in served(60)]
        slot = next(n for n, (a, _) in server_addrs(stats).items() if a == late)
        assert server_addrs(stats)[slot][1] & 0x01, f"the unprobed server is not held in maintenance: {server_addrs(stats)}"
        assert statuses == [200] * 60, statuses
        # it listens: in service after one probe
        _, app = procs.workload(late, demand="const:0")
        procs.agent(late, app, policy="static:0")
        wait_until(lambda: f"agent-{late}" in {h.get("hunt-served-by") for _, h, _ in served(30)}, timeout=10,
                   what="the late backend serving")
        # DNS drops it: held again (no address), the others serve on
        dns.records[NAME] = [b.host for b in bs]
        wait_until(lambda: all(a != late for a, _ in server_addrs(stats).values()), timeout=10, what="the late host dropped")
        wait_until(lambda: server_addrs(stats)[slot][1] & 0x01, timeout=2, what=f"{slot} held again")


def test_bad_module_arg_fails_the_load_naming_the_key(procs, addrs, hroot):
    host = addrs.host()
    text = haproxy_config(hroot, "sidecar.cfg", {"127.0.2.1": host}, env_args="role=sidecar policy=dynamic:window=0")
    p = start_haproxy(procs, hroot, "haproxy-bad", text)
    assert p.wait(timeout=15) != 0
    assert "huntlb: arg `policy`" in p.log() and "`window`" in p.log(), p.log()
    text = haproxy_config(hroot, "front.cfg", {"127.0.2.254": host}, env_args="role=front backend=hunt mapp=/x")
    p = start_haproxy(procs, hroot, "haproxy-bad2", text)
    assert p.wait(timeout=15) != 0
    assert "`mapp`" in p.log(), p.log()


def test_agent_check_drains_a_server_on_sigterm(procs, addrs, hroot):
    import signal
    bs = []
    for _ in range(2):
        host = addrs.host()
        _, app = procs.workload(host, demand="const:0")
        p, agent, admin = procs.agent(host, app, policy="always", agent_check=f"{host}:9902", drain_grace_ms=5000)
        bs.append((host, p))
    host = addrs.host()
    listen, stats = f"{host}:10000", f"{host}:9999"
    servers = "\n".join(f"    server web{i + 1} {h}:8080 agent-check agent-port 9902 agent-inter 300" for i, (h, _) in enumerate(bs))
    text = haproxy_front_text(hroot, listen, stats, []) + servers + "\n"
    wait_tcp(stats, start_haproxy(procs, hroot, f"haproxy-{host}", text))
    wait_until(lambda: set(haproxy_server_states(stats).values()) == {"UP"}, timeout=10, what="both UP")
    bs[0][1].signal(signal.SIGTERM)

    def drained_by_agent():
        # `show servers state`: srv_admin_state bit 0x08 is a drain set by the agent
        # (the health check, 503 while draining, also marks it DOWN right after).
        for line in haproxy_runtime(stats, "show servers state hunt").splitlines():
            f = line.split()
            if len(f) > 6 and f[3] == "web1":
                return int(f[6]) & 0x08
        return False

    wait_until(drained_by_agent, timeout=5, what="web1 drained via agent-check")
    # a draining server gets no new traffic
    served = {request(listen, "GET", f"/d/{i}")[1].get("hunt-served-by") for i in range(20)}
    assert served == {f"agent-{bs[1][0]}"}
