"""A client that forges hunt/1 headers, through each real front (header
leaks). A front sets the marks a backend acts on itself (hunt-offer,
hunt-target, hunt-seen, hunt-front) and must pass nothing of a
client's: every name in policy/src/protocol.rs is sent, with values no front
would set, and what reaches the backend is recorded by a small HTTP server in
the agent's place. The forged `hunt-via` also turned an overloaded final's 503
into a retriable `425 hunt: busy` at the agent (only a peer agent may say a
try was forwarded); that is shown against real agents. And an app's Envoy
controls in a response reach no client (a client Envoy would act on them)."""

import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from harness import FRONTS, app_stats, path_count, request, start_backends, start_front, wait_until

# Every hunt/1 header name (policy/src/protocol.rs), with a value no front sets.
KNOWN = {
    "hunt": "busy",
    "hunt-offer": "forged-offer",
    "hunt-target": "forged-target",
    "hunt-seen": "777",
    "hunt-front": "forged-front",
    "hunt-via": "x",
    "hunt-commit": "5",
    "hunt-pass": "forged-pass",
    "hunt-served-by": "forged-agent",
    "hunt-status": "425",
}
# A name a later version may use: backends ignore it and strip it before the
# app (protocol § 9). HAProxy removes every `hunt*` header; Envoy's route
# config removes names, so the Envoy fronts remove the known ones.
UNKNOWN = {"hunt-x-future": "forged"}
FORGED = {**KNOWN, **UNKNOWN}
# What each front sets itself, per try: every other hunt header is a leak.
FRONT_SETS = {"envoy": {"hunt-offer", "hunt-front"}, "haproxy": {"hunt-offer", "hunt-target", "hunt-seen"},
              "front-tier.cfg": {"hunt-pass"}, "front-tier.yaml": {"hunt-pass"}}
# Every shipped front: (kind, example), the HAProxy front over a tier too.
SHIPPED = [(k, None) for k in FRONTS] + [(k, "front-tier.cfg" if k.startswith("haproxy") else "front-tier.yaml") for k in FRONTS]
# Envoy response headers a client Envoy acts on: ejecting (or degrading) the front.
ENVOY_CONTROLS = {"x-envoy-immediate-health-check-fail": "true", "x-envoy-degraded": "1"}


class Recorder:
    """An HTTP/1.1 server in a backend's place: answers 200 to everything and
    keeps each request's path and headers. A path under /controls answers with
    Envoy's control headers, as an app (or a sidecar passing one on) could."""

    def __init__(self, host: str, port: int = 8080):
        self.agent = f"{host}:{port}"
        self.seen: list[tuple[str, list[tuple[str, str]]]] = []
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_any(self):
                n = int(self.headers.get("content-length") or 0)
                if n:
                    self.rfile.read(n)
                if self.path != "/.hunt/health":
                    rec.seen.append((self.path, [(k.lower(), v) for k, v in self.headers.items()]))
                self.send_response(200)
                if self.path.startswith("/controls"):
                    for k, v in ENVOY_CONTROLS.items():
                        self.send_header(k, v)
                self.send_header("content-length", "3")
                self.end_headers()
                self.wfile.write(b"ok\n")

            do_GET = do_POST = do_HEAD = do_any

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # HAProxy's checks close with a reset
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def requests(self, prefix: str) -> list[list[tuple[str, str]]]:
        return [h for p, h in self.seen if p.startswith(prefix)]


def recorders(procs, addrs, n: int) -> list[Recorder]:
    out = [Recorder(addrs.host()) for _ in range(n)]
    for r in out:
        procs.cleanups.append(r.close)
    return out


@pytest.mark.parametrize("front_kind,example", SHIPPED)
def test_a_clients_hunt_headers_never_reach_a_backend(procs, addrs, front_kind, example):
    rs = recorders(procs, addrs, 2)
    f = start_front(front_kind, procs, addrs, rs, example=example)
    sets = FRONT_SETS[example or front_kind.split("-")[0]]
    prefix = f"/forged/{uuid.uuid4()}"
    for i, (method, body) in enumerate([("GET", None), ("POST", b"x" * 100), ("POST", b"y" * 20_000)] * 2):
        status, _, _ = request(f.listen, method, f"{prefix}/{i}", headers=FORGED, body=body)
        assert status == 200, (method, status)
    tries = [h for r in rs for h in r.requests(prefix)]
    assert len(tries) == 6, f"{len(tries)} tries for 6 requests"
    for h in tries:
        hunt = [(k, v) for k, v in h if k == "hunt" or k.startswith("hunt-")]
        if front_kind == "envoy":
            assert ("hunt-x-future", "forged") in hunt, hunt  # as documented: passed, ignored by backends
            hunt = [(k, v) for k, v in hunt if k in KNOWN]
        names = [k for k, _ in hunt]
        if example == "front-tier.yaml":
            # hunt-pass once, this front's own; the client's other hunt headers
            # pass, and an agent ignores them beside it (tests/test_front_tier.py)
            assert [v for k, v in hunt if k == "hunt-pass"] == [f.listen], hunt
            continue
        # only what the front sets, once each, and none of the client's values
        assert set(names) <= sets and len(names) == len(set(names)), hunt
        assert not {v for _, v in hunt} & set(FORGED.values()), hunt
        if front_kind == "envoy":
            assert dict(hunt).get("hunt-pass" if example else "hunt-front") == f.listen, hunt


@pytest.mark.parametrize("front_kind,example", SHIPPED)
def test_an_apps_envoy_controls_reach_no_client(procs, addrs, front_kind, example):
    rs = recorders(procs, addrs, 2)
    backends = rs
    if example:
        # A tier front is over agents by definition, and removes no x-envoy-*
        # itself: the agents remove an app's (apps here: the recorders, on 8081).
        for r in rs:
            r.close()
        rs = [Recorder(addrs.host(), 8081) for _ in range(2)]
        for r in rs:
            procs.cleanups.append(r.close)
        backends = [SimpleNamespace(agent=procs.agent(r.agent.rsplit(":", 1)[0], r.agent, policy="always")[1]) for r in rs]
    f = start_front(front_kind, procs, addrs, backends, example=example)
    # Two: the Envoy front acts on the header itself and takes each host that
    # sent it out of rotation until its health checks pass (the agent does
    # not let an app's through).
    for i in range(2):
        status, h, _ = request(f.listen, "GET", f"/controls/{i}")
        assert status == 200
        assert not set(ENVOY_CONTROLS) & set(h), h
    assert sum(len(r.requests("/controls")) for r in rs) == 2


@pytest.mark.parametrize("front_kind", FRONTS)
def test_a_forged_hunt_via_does_not_make_an_overloaded_final_retriable(procs, addrs, front_kind):
    # Both agents take one request at a time (max_inflight=1) and refuse every
    # offer; each holds a slow plain request. A client's request is refused
    # by the first (at capacity) and its final meets the second at capacity:
    # the agent's 503, which the client gets. With the client's `hunt-via`
    # passed on, the agent took the final for a peer's forward and answered
    # `425 hunt: busy`: the Envoy front sent it a third time and the client
    # got the leftover 425.
    bs = start_backends(procs, addrs, 2, "static:0", app_opts={"workers": 4}, agent_opts={"max_inflight": 1})
    f = start_front(front_kind, procs, addrs, bs)
    holders = [threading.Thread(target=request, args=(b.agent, "GET", "/hold?work_ms=3000"), kwargs={"timeout": 20})
               for b in bs]
    for t in holders:
        t.start()
    try:
        wait_until(lambda: all(app_stats(b.app)["busy"] >= 1 for b in bs), timeout=5, what="both apps holding a request")
        tries0 = sum(b.metrics()["huntlb_finals_total"] + b.refused() for b in bs)
        path = f"/via/{uuid.uuid4()}"
        status, h, body = request(f.listen, "POST", path, headers={"hunt-via": "x"}, body=b"order=1")
        tries = sum(b.metrics()["huntlb_finals_total"] + b.refused() for b in bs) - tries0
    finally:
        for t in holders:
            t.join(timeout=20)
    assert status == 503 and b"max_inflight" in body, f"client got {status} {h} {body[:200]!r}"
    assert tries == 2, f"{tries} tries: offer and final only"
    assert path_count(bs, path) == 0
    assert f.leftover_refusals() == 0
