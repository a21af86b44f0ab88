"""An app that closes idle keep-alive connections sooner than the agent would
(gunicorn 2 s, Node and Apache 5 s): a request the agent writes on a
connection the app has closed reached no app, and is sent again on a fresh
connection (agent/src/upstream.rs); one the app may have seen never is.
Arrivals are counted at the app."""

import json
import random
import threading
import uuid

from harness import request, wait_http
from harness.apps import ShortKeepAliveApp
from harness.net import metrics

ROOT_TESTS = __import__("pathlib").Path(__file__).parent


def test_requests_meeting_a_short_keep_alive_are_all_served_once(procs, addrs):
    host = addrs.host()
    app = ShortKeepAliveApp(host, idle_s=0.05)
    procs.cleanups.append(app.close)
    _, agent, admin = procs.agent(host, app.addr, policy="always")
    rng = random.Random(29)
    failed = []
    sent = 0
    # The first requests come well after the app's timeout: the pooled
    # connection is found closed (and the agent learns the app's keep-alive).
    for i in range(160):
        if i < 3:
            threading.Event().wait(0.12)
        path = f"/ka/{i}"
        body = b"x" * rng.choice([0, 0, 700, 70_000])  # some bodies span several writes
        status, _, out = request(agent, "POST" if body else "GET", path, body=body or None,
                                 headers={"hunt-offer": "1", "hunt-target": "1"})
        sent += 1
        if status != 200:
            failed.append((path, status, out[:120]))
        # gaps around the app's 50 ms: the agent's pooled connection is closed
        # by the app just before, at or just after the next request
        threading.Event().wait(rng.uniform(0.035, 0.065))
    assert not failed, f"{len(failed)} of {sent} requests failed: {failed[:3]}"
    assert all(app.paths.get(f"/ka/{i}") == 1 for i in range(sent)), "each processed exactly once"
    m = metrics(admin)
    # The run met the edge it is about: some requests found their connection
    # closed (with a 50 ms keep-alive and a 1 s pool, many do).
    assert m["huntlb_app_resends_total"] >= 1, m["huntlb_app_resends_total"]
    assert m['huntlb_app_errors_total{kind="other"}'] == 0


def test_gunicorn_at_its_default_keep_alive(procs, addrs):
    # gunicorn's threaded worker keeps idle connections 2 s (its default); the
    # agent's pool closes its own after 1 s, so it closes first. Rounds of
    # concurrent requests 1.9-2.6 s apart leave a pool of idle connections
    # across gunicorn's timeout every time.
    import sys
    host = addrs.host()
    app = f"{host}:9000"
    gunicorn = str(__import__("pathlib").Path(sys.executable).parent / "gunicorn")
    procs.start(f"gunicorn-{host}", [gunicorn, "-k", "gthread", "--threads", "8", "-w", "1", "-b", app,
                                     "--chdir", str(ROOT_TESTS), "keepalive_app:app"])
    wait_http(app, "/stats")
    _, agent, admin = procs.agent(host, app, policy="always")
    paths = []
    for rnd in range(3):
        batch = [f"/g/{rnd}/{uuid.uuid4()}" for _ in range(8)]
        got = []
        ts = [threading.Thread(target=lambda p=p: got.append(request(agent, "GET", p, headers={"hunt-offer": "1", "hunt-target": "1"})))
              for p in batch]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=30)
        assert [g[0] for g in got] == [200] * 8, [g[:2] for g in got]
        paths += batch
        threading.Event().wait(1.9 + 0.35 * rnd)
    _, _, body = request(app, "GET", "/stats")
    seen = json.loads(body)["paths"]
    assert all(seen.get(p) == 1 for p in paths), "each processed exactly once"
    assert metrics(admin)['huntlb_app_errors_total{kind="other"}'] == 0
