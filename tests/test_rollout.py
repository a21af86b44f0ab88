"""A rollout as docs/drop-in.md describes it, through the page's own front
blocks: a fleet of six backends of which two run an agent so far (the other
four are the app alone, which answers 404 on the agents' health path), under
load through a real front of each proxy. Every backend stays in the pool, no
client sees an error, nothing is processed twice, and an agent told to stop
(SIGTERM, as a rolling update does) is taken out by the fronts' health checks
before it closes its connections and exits.

And the agent's drain on its own: health fails first, then idle keep-alive
connections close, busy ones close after their response, late ones are served
once, and it exits when none is left."""

import copy
import http.client
import json
import signal
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import yaml
from harness import FINAL, OFFER, HaproxyRoot, app_stats, metrics, request, start_fleet, wait_tcp, wait_until
from harness.testbed import FLEET_PORT, peers_of
from test_drop_in import blocks
from test_envoy_snippet import STOCK as ENVOY_STOCK, run_stock
from test_tier_snippets import HAPROXY_STOCK

PLAIN = 4          # backends with no agent yet
GRACE_MS = 3000    # the agents' drain_grace_ms: above both fronts' check interval x fall (0.5 s x 3 at most here)
TAKEN_OUT_S = 2.5  # by then every front has seen the draining agent's health fail


class PlainApp:
    """An app with no agent in front of it, on its old address: it answers
    every path 200 but the agents' health path, which it does not know (404,
    as any app), and counts arrivals per path. In this process, on its own
    threads; `stop` ends it."""

    def __init__(self, addr: str):
        self.addr, self.paths, self.lock = addr, {}, threading.Lock()
        app = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the fronts expect of an app

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                if path.startswith("/.hunt/"):
                    body, status = b"not found\n", 404
                else:
                    with app.lock:
                        app.paths[path] = app.paths.get(path, 0) + 1
                    time.sleep(0.01)
                    body, status = json.dumps({"path": path}).encode(), 200
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        host, port = addr.rsplit(":", 1)
        self.server = ThreadingHTTPServer((host, int(port)), Handler)
        self.server.daemon_threads = True
        # stops within 10 ms (the default polls every 0.5 s)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def count(self, path: str) -> int:
        with self.lock:
            return self.paths.get(path, 0)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mixed(procs, addrs):
    """Two agents in a tier (each beside a workload app) and four apps with no
    agent; the fronts' backends are the six addresses, agents first."""
    agented = start_fleet(procs, addrs, 2, policy="dynamic", agent_opts={"drain_grace_ms": GRACE_MS})
    plain = []
    try:
        for _ in range(PLAIN):
            plain.append(PlainApp(f"{addrs.host()}:8080"))
        yield agented, plain
    finally:
        for p in plain:
            p.stop()


class Load:
    """`threads` clients, each sending GETs one after another to the front
    (a new connection each, as many clients do), for at most `limit` seconds
    or until stopped. Each request's path is unique; its send time and answer
    are kept."""

    def __init__(self, listen: str, threads: int = 6, limit: float = 30):
        self.listen, self.done, self.sent, self.lock = listen, threading.Event(), [], threading.Lock()
        self.deadline = time.monotonic() + limit
        self.ts = [threading.Thread(target=self.client, daemon=True) for _ in range(threads)]
        for t in self.ts:
            t.start()

    def client(self):
        while not self.done.is_set() and time.monotonic() < self.deadline:
            path = f"/roll/{uuid.uuid4()}"
            t = time.monotonic()
            try:
                status, h, body = request(self.listen, "GET", f"{path}?work_ms=15", timeout=10)
                if status != 200:
                    status = (status, body[:200], h.get("hunt-served-by"))
            except (OSError, http.client.HTTPException) as e:
                status = repr(e)
            with self.lock:
                self.sent.append((t, path, status))

    def stop(self) -> list:
        self.done.set()
        for t in self.ts:
            t.join(timeout=15)
        return self.sent


def roll_one_agent(front: str, agented, plain):
    """Load through `front`; SIGTERM agent a mid-load; then check what every
    client and every app saw."""
    a = agented[0]
    load = Load(front)
    try:
        time.sleep(1.5)
        sigterm = time.monotonic()
        a.agent_proc.signal(signal.SIGTERM)
        code = a.agent_proc.wait(timeout=GRACE_MS / 1000 + 10)
        exited = time.monotonic()
        time.sleep(1.0)
    finally:
        sent = load.stop()
    assert code == 0
    assert exited - sigterm >= GRACE_MS / 1000, "exited before the fronts could take it out"
    errors = [(round(t - sigterm, 2), p, s) for t, p, s in sent if s != 200]
    assert not errors, f"{len(errors)} client errors of {len(sent)}: {errors[:3]} ... {errors[-3:]}"
    assert any(t > exited for t, _, _ in sent), "the load ended before the agent exited"
    stats = {b.id: app_stats(b.app)["paths"] for b in agented}
    where = {}
    for t, path, _ in sent:
        n = [stats[b.id].get(path, 0) for b in agented] + [p.count(path) for p in plain]
        assert sum(n) == 1, (path, n)  # processed exactly once
        where[path] = n.index(1)
    served = [sum(1 for i in where.values() if i == k) for k in range(len(agented) + PLAIN)]
    # every backend served, the four with no agent too
    assert all(n > 0 for n in served), served
    # the draining agent's app got nothing sent after the fronts' checks took it out
    late = [p for t, p, _ in sent if t > sigterm + TAKEN_OUT_S and where[p] == 0]
    assert not late, f"{len(late)} requests reached the draining agent's app after it was taken out"
    return served, len(sent)


def test_haproxy_front_from_the_page_keeps_unmigrated_backends_and_rolls_an_agent(procs, addrs, mixed):
    agented, plain = mixed
    hr = HaproxyRoot("2.6")
    procs.cleanups.append(hr.cleanup)
    addresses = [b.agent for b in agented] + [p.addr for p in plain]
    # HAProxy's check defaults but the interval (fall 3)
    servers = "\n".join(f"    server web{i + 1} {x} check inter 500" for i, x in enumerate(addresses))
    listen = f"{addrs.host()}:10000"
    cfg = hr.dir / "front.cfg"
    cfg.write_text(HAPROXY_STOCK.format(listen=listen, snippet=blocks()["haproxy"], servers=servers))
    v = subprocess.run(hr.argv(cfg) + ["-c"], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stdout + v.stderr
    wait_tcp(listen, procs.start("haproxy-front", hr.argv(cfg)))
    wait_until(lambda: request(listen, "GET", "/warm")[0] == 200, what="front serving")
    time.sleep(1.6)  # three checks: a backend the checks refused would be down by now
    roll_one_agent(listen, agented, plain)


def test_envoy_front_from_the_page_keeps_unmigrated_backends_and_rolls_an_agent(procs, addrs, tmp_path, mixed):
    agented, plain = mixed
    snippet = yaml.safe_load(blocks()["envoy"])
    cfg = copy.deepcopy(yaml.safe_load(ENVOY_STOCK))
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["route_config"]["virtual_hosts"][0].update(copy.deepcopy(snippet["virtual_host"]))
    cfg["static_resources"]["clusters"][0].update(copy.deepcopy(snippet["cluster"]))
    backends = [*agented, *(SimpleNamespace(agent=p.addr) for p in plain)]
    # returns once all six pass the page's health check
    listen = run_stock(procs, addrs, tmp_path, cfg, backends, "envoy-front")
    roll_one_agent(listen, agented, plain)


def closed_by_peer(conn: http.client.HTTPConnection, within: float) -> bool:
    """Whether the server closes this idle connection within `within` s (EOF)."""
    conn.sock.settimeout(within)
    try:
        return conn.sock.recv(1) == b""
    except TimeoutError:
        return False


def test_the_drain_fails_health_first_then_closes_connections(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, cores=64, demand="const:0")
    proc, agent, admin = procs.agent(host, app, policy="always", drain_grace_ms=2000)
    h, port = agent.rsplit(":", 1)
    idle = http.client.HTTPConnection(h, int(port), timeout=10)
    try:
        assert request(agent, "GET", "/first", conn=idle)[0] == 200
        slow = {}
        t = threading.Thread(target=lambda: slow.setdefault("r", request(agent, "GET", "/slow?work_ms=6000", headers=FINAL)))
        t.start()
        wait_until(lambda: metrics(admin)["huntlb_inflight"] == 1, what="the slow request in flight")
        proc.signal(signal.SIGTERM)
        started = time.monotonic()
        wait_until(lambda: request(agent, "GET", "/.hunt/health")[0] == 503, what="health 503 at once")
        # Within drain_grace: served as before, kept alive (a front that has not
        # yet seen the check fail loses nothing).
        status, hd, _ = request(agent, "GET", "/in-grace", conn=idle)
        assert status == 200 and hd.get("connection") != "close", hd
        assert time.monotonic() - started < 2.0, "the test came too late to see the grace"
        # After it: the idle keep-alive connection is closed by the agent, long
        # before the slow request ends (the agent still runs).
        assert closed_by_peer(idle, within=3.0), "idle keep-alive connection still open after drain_grace"
        assert time.monotonic() - started < 4.5 and proc.alive()
        # A connection opened now (a front late to see the check) is served, once.
        status, hd, _ = request(agent, "GET", "/late")
        assert status == 200 and hd.get("connection") == "close", hd
        # The busy one finishes, told to close; then the agent exits.
        t.join(timeout=10)
        assert slow["r"][0] == 200 and slow["r"][1].get("connection") == "close", slow["r"][1]
        assert proc.wait(timeout=8) == 0
    finally:
        idle.close()


def test_sighup_reloads_fleet_peers_without_dropping_a_request(procs, addrs, tmp_path):
    """a and b list each other only; c lists all three. A new list and SIGHUP
    to a and b: they hear c (and c them), while requests go on at both with
    none failed or run twice. A member taken off the list is no longer heard
    (its sealed reports are dropped as a stranger's); a list that does not
    load changes nothing and is named."""
    hosts = [addrs.host() for _ in range(3)]
    key = procs.fleet_key()

    def conf(i: int, members: list[str], peers: str | None = None):
        path = tmp_path / f"agent-{i}.toml"
        peers = peers or peers_of(members)
        path.write_text(f'fleet_listen = "{hosts[i]}:{FLEET_PORT}"\nfleet_peers = "{peers}"\nfleet_key_file = "{key}"\n'
                        'fleet_heartbeat_ms = 200\nfleet_dead_after_ms = 1000\n')
        return path

    bs = []
    for i, h in enumerate(hosts):
        _, app = procs.workload(h, demand="const:0")
        p, agent, admin = procs.agent(h, app, policy="dynamic", config=conf(i, hosts if i == 2 else hosts[:2]))
        bs.append(SimpleNamespace(proc=p, agent=agent, admin=admin, app=app))
    a, b, c = bs

    def heard():
        return [int(metrics(x.admin)["huntlb_fleet_peers"]) for x in bs]
    # c's reports reach a and b, which drop them: c is no member of theirs; and they send c nothing
    wait_until(lambda: heard() == [1, 1, 0], what="a and b hearing each other only")

    sent, done = [], threading.Event()

    def client(x):
        for _ in range(2000):
            if done.is_set():
                return
            path = f"/hup/{uuid.uuid4()}"
            try:
                status = request(x.agent, "GET", path, headers=OFFER, timeout=10)[0]
            except (OSError, http.client.HTTPException) as e:
                status = repr(e)
            sent.append((path, status))
    ts = [threading.Thread(target=client, args=(x,), daemon=True) for x in (a, b)]
    for t in ts:
        t.start()
    try:
        time.sleep(0.5)
        for i, x in enumerate((a, b)):
            conf(i, hosts)
            x.proc.signal(signal.SIGHUP)
        wait_until(lambda: heard() == [2, 2, 2], what="every agent hearing both others after the reload")
        time.sleep(0.5)
    finally:
        done.set()
        for t in ts:
            t.join(timeout=15)
    assert a.proc.alive() and b.proc.alive()
    assert len(sent) > 20 and all(s == 200 for _, s in sent), [x for x in sent if x[1] != 200][:5]
    stats = [app_stats(x.app)["paths"] for x in bs]
    assert all(sum(st.get(p, 0) for st in stats) == 1 for p, _ in sent)
    # c off a's list: a no longer takes c's reports
    conf(0, hosts[:2])
    a.proc.signal(signal.SIGHUP)
    wait_until(lambda: heard()[0] == 1, what="a no longer hearing c")
    # a list that does not load: the key named, nothing changed, the agent runs on
    conf(0, [], peers="not a peer!")
    a.proc.signal(signal.SIGHUP)
    wait_until(lambda: "SIGHUP: the config does not load" in a.proc.log(), what="the refused reload logged")
    assert "fleet_peers" in a.proc.log().split("SIGHUP: the config does not load", 1)[1].splitlines()[0]
    time.sleep(1.5)  # past fleet_dead_after_ms: b still heard
    assert a.proc.alive() and heard()[0] == 1
