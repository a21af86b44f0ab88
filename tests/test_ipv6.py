"""IPv6 (docs/agent.md "IPv6 and dual stack"): an agent and its app on the
IPv6 loopback, a listener on `[::]` that takes IPv4 too, and a forwarding
tier whose members, forwards and `hunt-via` are IPv6 addresses, behind real
Envoy and HAProxy fronts whose upstreams are `[::1]:port`. The IPv6 loopback
has one address, so each process here has its own port; two members on one
IP are told apart by their `fleet_listen` ports, and each forwards to the
other's `listen` port (`fleet_peer_port`). Then a dual-stack fleet on hosts
of their own (network namespaces, each with an IPv4 and a ULA IPv6 address;
root, marked slow). Arrivals counted at the apps."""

import json
import os
import socket
import threading
import uuid

import pytest
from harness import FRONTS, ROOT, Backend, binary, counts, hold, request, start_front, wait_until
from harness.testbed import FLEET_PORT
from harness.cluster import Cluster
from test_client_address import client_as_written

SENT = 'huntlb_forwards_total{outcome="sent"}'
TAKEN = 'huntlb_forwards_in_total{outcome="taken"}'


def free_port(host: str = "::1") -> int:
    with socket.socket(socket.AF_INET6) as s:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind((host, 0))
        return s.getsockname()[1]


def seen(out: bytes) -> list[str]:
    lines = json.loads(out)["x_forwarded_for"]
    return [e.strip() for line in lines for e in line.split(",") if e.strip()]


def v6_backend(procs, name: str, listen_port: int | None = None, **agent_opts) -> Backend:
    """An app on [::1] and its agent on [::1] (or where `listen` says), each on ports of its own."""
    app = f"[::1]:{free_port()}"
    app_proc = procs.start(f"workload-{name}", [binary("huntlb-workload"), "--listen", app, "--id", f"app-{name}", "--demand", "const:0"])
    wait_until(lambda: _answers(app, "/.workload/health") or not app_proc.alive(), timeout=15, what=f"{app} serving")
    listen = agent_opts.pop("listen", f"[::1]:{listen_port or free_port()}")
    agent_proc, agent, admin = procs.agent(name, app, listen=listen, admin=f"[::1]:{free_port()}", id=f"agent-{name}", **agent_opts)
    return Backend(name, app, agent, admin, app_proc, agent_proc)


def _answers(addr: str, path: str) -> bool:
    try:
        return request(addr, "GET", path, timeout=2)[0] == 200
    except OSError:
        return False


def test_an_agent_and_its_app_on_the_ipv6_loopback(procs):
    b = v6_backend(procs, "v6-one")
    path = f"/v6/{uuid.uuid4()}"
    status, h, out = request(b.agent, "GET", path)
    assert status == 200 and h["hunt-served-by"] == b.id, out
    assert counts([b], path) == [1]
    assert seen(out) == ["::1"], out  # the client's IPv6 address, bare, as proxies write it
    assert request(b.agent, "GET", "/.hunt/health")[0] == 200


def test_listen_on_any_ipv6_address_takes_ipv4_clients_too(procs):
    # `[::]` as the agent binds it takes both families (IPV6_V6ONLY off,
    # whatever the host's net.ipv6.bindv6only): one listen line serves a
    # dual-stack fleet. An IPv4 client is its IPv4 address to the app, never
    # ::ffff:127.0.0.1.
    port = free_port("::")
    b = v6_backend(procs, "v6-any", listen=f"[::]:{port}")
    for addr, client in ((f"127.0.0.1:{port}", "127.0.0.1"), (f"[::1]:{port}", "::1")):
        path = f"/dual/{uuid.uuid4()}"
        status, _, out = request(addr, "GET", path)
        assert status == 200, (addr, out)
        assert counts([b], path) == [1]
        assert seen(out) == [client], out


def v6_pair(procs) -> list[Backend]:
    """Two agents on [::1] forming a tier: members [::1]:ua and [::1]:ub
    (their fleet_listen), each forwarding to the other's listen port."""
    la, lb, ua, ub = (free_port() for _ in range(4))
    peers = f"[::1]:{ua},[::1]:{ub}"
    tier = {"fleet_peers": peers, "fleet_key_file": procs.fleet_key(), "policy": "dynamic:seen_margin=1",
            "fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000,
            # a debug build on a busy 2-core machine may take past the 10 ms default to say it takes one
            "fleet_commit_ms": 500}
    a = v6_backend(procs, "v6-a", listen_port=la, fleet_listen=f"[::1]:{ua}", fleet_peer_port=lb, **tier)
    b = v6_backend(procs, "v6-b", listen_port=lb, fleet_listen=f"[::1]:{ub}", fleet_peer_port=la, **tier)
    bs = [a, b]
    wait_until(lambda: all(x.metrics()["huntlb_fleet_peers"] == 1 for x in bs), what="each agent hearing the other over IPv6")
    for x in bs:  # as start_fleet: each wants the other's every change
        assert request(x.agent, "GET", "/fleet-warm-up", headers={"hunt-offer": "1", "hunt-target": "1"})[0] == 200
    wait_until(lambda: sum(x.metrics()["huntlb_fleet_peers_wanting"] for x in bs) == 2, what="both subscribed")
    return bs


@pytest.mark.parametrize("kind", ["envoy", "haproxy-3.0"])
def test_a_tier_on_ipv6_forwards_behind_fronts_with_ipv6_upstreams(procs, addrs, kind):
    # The front (on 127.x, its upstreams [::1]:port) sends some tries to a,
    # which holds 4 requests sent past the front: a passes them on to b over
    # IPv6, b taking them from a's address, a member's. Each processed once;
    # b's app sees the client the front wrote and the front (b adds nothing for a's forward).
    a, b = bs = v6_pair(procs)
    assert kind in FRONTS
    front = start_front(kind, procs, addrs, bs, example="front-tier.yaml" if kind == "envoy" else "front-tier.cfg")
    hold(a, 4)
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 4)
    for i in range(16):  # Envoy's ties are random: some of 16 reach a, 1 - (1/2)^16
        path = f"/v6-tier/{uuid.uuid4()}"
        body = b"x" * 3000 if i % 2 else None
        status, h, out = request(front.listen, "POST" if body else "GET", path, body=body)
        assert status == 200, out
        assert sorted(counts(bs, path)) == [0, 1]
        assert h["hunt-served-by"] == b.id, h  # a's tries went on to b
        client, by = seen(out)  # the client as the front wrote it, then the front over IPv6; never a as well
        assert client in client_as_written(kind) and by == "::1", out
    assert a.metrics()[SENT] >= 1 and b.metrics()[TAKEN] == a.metrics()[SENT]


def test_the_docs_and_the_chart_take_an_ipv6_pod_ip():
    # the chart's sidecar advertises the pod's IP alone: the agent brackets an
    # IPv6 one (tests/test_kubernetes.py renders both families)
    helpers = (ROOT / "charts" / "huntlb" / "templates" / "_helpers.tpl").read_text()
    assert "--fleet-advertise=" in helpers and '"huntlb.advertise" -}}\n$(POD_IP)\n' in helpers
    doc = (ROOT / "docs" / "agent.md").read_text()
    section = doc.split("## IPv6 and dual stack", 1)[1].split("\n## ", 1)[0]
    assert "`[::]`" in section and "IPV6_V6ONLY" in section and "$(POD_IP)" in section
    assert "agent.md#ipv6-and-dual-stack" in (ROOT / "docs" / "kubernetes.md").read_text()


def v6_of(host) -> str:
    """The cluster host's IPv6 (ULA) address beside its 10.77.N.x: fd77:N::x."""
    _, _, n, x = host.ip.split(".")
    return f"fd77:{int(n):x}::{x}"


# ~15 s each (a cluster of namespaces, DNS, a front): make test-slow, .ci/run
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
@pytest.mark.parametrize("kind", ["envoy", "haproxy-3.0"])
def test_a_dual_stack_fleet_on_hosts_of_their_own(tmp_path, kind):
    # Three backend hosts (network namespaces on one bridge, harness.cluster),
    # each with an IPv4 and an IPv6 (ULA) address. The agents bind [::] and
    # form their tier over IPv6 (fleet_peers the hosts' IPv6 addresses,
    # fleet_advertise the bare IPv6 IP, as the Kubernetes sidecar passes
    # $(POD_IP)); the front finds them by DNS over IPv4 and reaches the same
    # [::] sockets. b1 is loaded past the front, so the front's tries to b1
    # go on to a peer over IPv6. Each request processed once; each app sees
    # the client and the front, never a member.
    with Cluster(tmp_path) as c:
        bs = [c.backend(publish=True) for _ in range(3)]
        peers = ",".join(f"[{v6_of(b)}]:{FLEET_PORT}" for b in bs)
        for b in bs:
            b.run("ip", "addr", "add", f"{v6_of(b)}/64", "dev", "eth0", "nodad")
            b.agent_proc.stop()
            argv = [binary("huntlb-agent"), "--listen", "[::]:8080", "--admin", "[::]:9901", "--app", b.app, "--id", b.id,
                    "--fleet-listen", f"[::]:{FLEET_PORT}", "--fleet-peers", peers, "--fleet-advertise", v6_of(b),
                    "--fleet-key-file", c.procs.fleet_key(), "--policy", "dynamic:seen_margin=1",
                    "--fleet-heartbeat-ms", "1000", "--fleet-dead-after-ms", "5000", "--fleet-commit-ms", "500"]
            b.agent_proc = b.start(f"agent6-{b.name}", argv, env={**os.environ, "RUST_LOG": "info"})
            c.call(wait_until, lambda b=b: _answers(b.admin, "/metrics") or not b.agent_proc.alive(), timeout=15, what="agent up")
            assert b.agent_proc.alive(), b.agent_proc.log()
        c.wait_fleet()
        front = c.front(kind)
        b1 = bs[0]
        holds = [threading.Thread(target=c.call, args=(request, b1.agent, "GET", f"/hold/{uuid.uuid4()}?work_ms=4000"),
                                  kwargs={"timeout": 30}, daemon=True) for _ in range(4)]
        for t in holds:
            t.start()
        wait_until(lambda: b1.metrics()["huntlb_inflight"] == 4, what="b1 holding 4")
        members = {v6_of(b) for b in bs} | {b.ip for b in bs}
        for i in range(24):  # the fronts' ties are random: some of 24 reach b1, 1 - (2/3)^24
            path = f"/dual/{uuid.uuid4()}"
            status, _, out = c.call(request, front.listen, "GET", path, headers={"x-forwarded-for": "6.6.6.6"})
            assert status == 200, out
            assert sorted(b.paths().get(path, 0) for b in bs) == [0, 0, 1]
            assert seen(out) == ["6.6.6.6", c.client.ip, front.ip], out
            assert not members & set(seen(out))
        sent = b1.metrics()[SENT]
        assert sent >= 1, "b1 forwarded nothing: the test proved nothing about the IPv6 tier"
        assert sum(b.metrics()[TAKEN] for b in bs[1:]) == sent
        for t in holds:
            t.join(10)
