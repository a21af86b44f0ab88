"""What the app sees of the client (`forwarded_for`, docs/agent.md "The
client's address"): the agent appends the address it took a request from to
`X-Forwarded-For` after what came in (with `forwarded_for_trusted`, only
what the peers it names sent), and leaves a member's forward as its member
wrote it. Real Envoy and
HAProxy fronts as shipped (each leaving from its own 127.x address), real
agents and apps; the app says which header lines it saw, arrivals counted."""

import json
import subprocess
import uuid

import pytest
from harness import EXAMPLES, HAPROXY_EXAMPLES, ROOT, counts, hold, request, start_backends, start_fleet, start_front, wait_until

# What a client writes to pass for someone else.
FORGED = "6.6.6.6"
CLIENT = "127.0.0.1"   # the test's own connections leave from here
SENT = 'huntlb_forwards_total{outcome="sent"}'


def seen(out: bytes) -> list[str]:
    """The app's X-Forwarded-For, its lines joined, entry by entry."""
    lines = json.loads(out)["x_forwarded_for"]
    return [e.strip() for line in lines for e in line.split(",") if e.strip()]


def front_ip(front) -> str:
    return front.listen.rsplit(":", 1)[0]


def host_ips() -> set[str]:
    """This machine's addresses other than loopback's."""
    out = subprocess.run(["ip", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3].split("/")[0] for line in out.splitlines()}


def client_as_written(kind: str) -> set[str]:
    """What a front writes for this test's client: its address, but Envoy
    writes its own host's for a loopback client (with use_remote_address:
    it takes a loopback peer for a process on its own host)."""
    return host_ips() if kind == "envoy" else {CLIENT}


@pytest.mark.parametrize("kind", ["envoy", "haproxy-3.0"])
def test_the_app_sees_the_client_as_its_front_wrote_it_and_a_forward_adds_no_member(procs, addrs, kind):
    # Agents as shipped. Each shipped front writes the client (Envoy's
    # use_remote_address, HAProxy's option forwardfor) after what the client
    # forged, and the agent adds the front: counted from the right, the entry
    # before the front's is the client, whatever the client wrote. Through
    # the tier, a is loaded by requests past the front, so the front's tries
    # to a go on to b or c: the app there sees what a's app would have, never a.
    opts = {"fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000}
    a, b, c = bs = start_fleet(procs, addrs, 3, policy="dynamic:seen_margin=1", agent_opts=opts)
    example = "front-tier.yaml" if kind == "envoy" else "front-tier.cfg"
    front = start_front(kind, procs, addrs, bs, example=example, source=True)
    hold(a, 4)
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 4)
    agents = {x.host for x in bs}
    for i in range(24):  # Envoy's ties are random: some of 24 reach a, 1 - (2/3)^24
        path = f"/xff-tier/{uuid.uuid4()}"
        body = b"x" * 3000 if i % 2 else None
        status, h, out = request(front.listen, "POST" if body else "GET", path, body=body, headers={"x-forwarded-for": FORGED})
        assert status == 200, out
        assert sorted(counts(bs, path)) == [0, 0, 1]
        forged, client, by = seen(out)
        assert (forged, by) == (FORGED, front_ip(front)) and client in client_as_written(kind), out
        assert not agents & set(seen(out)), out
    assert a.metrics()[SENT] >= 1, "no try was forwarded: the test proved nothing about forwards"
    # Straight at an agent: the last entry is who connected, whatever came before.
    status, _, out = request(a.agent, "GET", f"/xff/{uuid.uuid4()}", headers={"x-forwarded-for": FORGED})
    assert status == 200 and seen(out) == [FORGED, CLIENT], out


@pytest.mark.parametrize("kind", ["envoy", "haproxy-3.0"])
def test_with_trusted_peers_named_no_one_elses_header_reaches_the_app(procs, addrs, kind):
    # forwarded_for_trusted names the fronts' addresses (this test's
    # 127.A.B.0/24; the client is 127.0.0.1, outside it): through a front the
    # app sees the chain as before; straight at an agent the client's
    # forgery is gone, only its address is left.
    bs = start_backends(procs, addrs, 2, "dynamic", agent_opts={"forwarded_for_trusted": f"{addrs.prefix}.0/24"})
    front = start_front(kind, procs, addrs, bs, source=True)
    for i in range(4):
        path = f"/xff/{uuid.uuid4()}"
        status, _, out = request(front.listen, "GET", path, headers={"x-forwarded-for": FORGED})
        assert status == 200, out
        assert sorted(counts(bs, path)) == [0, 1]
        forged, client, by = seen(out)
        assert (forged, by) == (FORGED, front_ip(front)) and client in client_as_written(kind), out
    path = f"/xff/{uuid.uuid4()}"
    status, _, out = request(bs[0].agent, "GET", path, headers={"x-forwarded-for": f"{FORGED}, 10.0.0.1"})
    assert status == 200 and seen(out) == [CLIENT], out
    assert counts(bs, path) == [1, 0]


def test_trusting_no_peer_gives_the_app_one_entry_the_agents_own(procs, addrs):
    # forwarded_for_trusted = "": every header that came in is replaced by
    # the address the agent saw (a front's, here), forgeries and all.
    bs = start_backends(procs, addrs, 2, "dynamic", agent_opts={"forwarded_for_trusted": ""})
    front = start_front("envoy", procs, addrs, bs, source=True)
    path = f"/xff/{uuid.uuid4()}"
    status, _, out = request(front.listen, "GET", path, headers={"x-forwarded-for": FORGED})
    assert status == 200 and seen(out) == [front_ip(front)], out
    assert sorted(counts(bs, path)) == [0, 1]


def test_a_forward_is_believed_only_from_a_members_address(procs, addrs):
    # A peer's forward, word for word (hunt-commit and its go byte), sent by a
    # client from 127.0.0.1, no member's address: taken as a forward (a
    # hunting front strips a client's hunt headers; fleet_pass_plain refuses
    # it), but the agent adds the client's address as for any request. Only
    # a forward from a member's proven address is left as its member wrote it.
    a, b = bs = start_fleet(procs, addrs, 2, wanting=False)
    path = f"/forged-forward/{uuid.uuid4()}"
    status, _, out = request(a.agent, "POST", path, body=b"G",
                             headers={"hunt-target": "forwarded", "hunt-offer": "1", "hunt-commit": "none", "x-forwarded-for": FORGED})
    assert status == 200, out
    assert counts(bs, path) == [1, 0]
    assert seen(out) == [FORGED, CLIENT], out


def test_forwarded_for_off_passes_the_header_untouched(procs, addrs):
    (b,) = start_backends(procs, addrs, 1, "dynamic", agent_opts={"forwarded_for": "off"})
    status, _, out = request(b.agent, "GET", f"/off/{uuid.uuid4()}", headers={"x-forwarded-for": FORGED})
    assert status == 200 and seen(out) == [FORGED], out
    status, _, out = request(b.agent, "GET", f"/off/{uuid.uuid4()}")
    assert status == 200 and seen(out) == [], out


def test_the_docs_say_what_the_app_sees_through_each_shipped_front():
    doc = (ROOT / "docs" / "agent.md").read_text()
    section = doc.split("## The client's address", 1)[1].split("\n## ", 1)[0]
    for key in ("forwarded_for", "forwarded_for_trusted"):
        assert f"| `{key}` |" in doc, key
    # every shipped front is named, and writes the client's address as the doc says
    for path, line in ((EXAMPLES / "front.yaml", "use_remote_address: true"), (EXAMPLES / "front-tier.yaml", "use_remote_address: true"),
                       (HAPROXY_EXAMPLES / "front.cfg", "option forwardfor"), (HAPROXY_EXAMPLES / "front-tier.cfg", "option forwardfor")):
        assert path.name in section, path.name
        assert line in path.read_text(), (path, line)
    assert "second from the right" in section and "forgery" in section
