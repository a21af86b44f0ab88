"""harness.testbed: a fleet described once, started on loopback, waited for
until every agent hears its peers, its agents restarted with other settings;
a spec that does not fit its fleet refused with the key named."""

import uuid

import pytest

from harness import OFFER, counts, hold, request
from harness.testbed import FLEET_PORT, FleetSpec, Loopback, Testbed, heard_of, peers_of, tier_opts


def test_tier_options_name_every_member_on_the_fleet_port():
    assert peers_of(["127.1.1.1", "127.1.1.2"]) == f"127.1.1.1:{FLEET_PORT},127.1.1.2:{FLEET_PORT}"
    assert tier_opts("127.1.1.1", "backends:9700", "/k") == {
        "fleet_listen": "127.1.1.1:9700", "fleet_peers": "backends:9700", "fleet_key_file": "/k"}
    assert [heard_of(3, 0), heard_of(3, 1), heard_of(20, 0), heard_of(20, 4)] == [2, 1, 19, 4]


@pytest.mark.parametrize("key", ["each", "key_files"])
def test_a_spec_whose_lists_do_not_fit_its_backends_is_refused_naming_the_key(key):
    with pytest.raises(ValueError, match=rf"FleetSpec\.{key}: 1 entries for 2 backends"):
        FleetSpec([{}, {}], **{key: [{}] if key == "each" else ["/k"]})


def test_a_tier_started_heard_and_restarted_without_its_tier(procs, addrs):
    # drain_grace_ms 0: a restart's agents stop at once (nothing of theirs is in flight then)
    bed = Testbed(FleetSpec([{"demand": "const:0"}] * 3, policy="always", agent={"drain_grace_ms": 0}), Loopback(procs, addrs)).start()
    a, b, c = bs = bed.backends
    assert len({x.host for x in bs}) == 3
    assert [x.metrics()["huntlb_fleet_peers"] for x in bs] == [2, 2, 2]
    # a is the busiest: its offer goes on to a peer through the tier, and is processed there once
    held = hold(a, 4, work_ms=500)
    path = f"/bed/{uuid.uuid4()}"
    status, h, _ = request(a.agent, "GET", path, headers=OFFER)
    assert status == 200 and h["hunt-served-by"] in (b.id, c.id)
    assert sorted(counts(bs, path)) == [0, 0, 1] and counts(bs, path)[0] == 0
    for t in held:
        t.join(10)
    # the same fleet, its agents fresh and out of the tier: a keeps what it is offered
    bed.restart_agents(tier=False)
    assert [x.metrics().get("huntlb_fleet_peers") for x in bs] == [None, None, None]
    path = f"/bed/{uuid.uuid4()}"
    status, h, _ = request(a.agent, "GET", path, headers=OFFER)
    assert (status, h["hunt-served-by"], counts(bs, path)) == (200, a.id, [1, 0, 0])
    bed.stop()
    assert not any(p.alive() for x in bs for p in (x.agent_proc, x.app_proc))
