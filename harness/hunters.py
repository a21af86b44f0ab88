"""Backends: a workload app behind a policy host (the agent, the Envoy Wasm
sidecar or the HAProxy Lua sidecar), with one interface over the hosts."""

from __future__ import annotations

import threading
import uuid

from harness.envoy import envoy_stats, sidecar_config, start_envoy
from harness.haproxy import HaproxyRoot, haproxy_config, start_haproxy
from harness.net import app_stats, metrics, request, wait_tcp, wait_until
from harness.procs import Addrs, Procs
from harness.testbed import Backend, FleetSpec, Loopback, Testbed, heard_of


def start_backends(procs: Procs, addrs: Addrs, n: int, policy: str, app_opts: dict | None = None,
                   agent_opts: dict | None = None) -> list[Backend]:
    out = []
    for _ in range(n):
        host = addrs.host()
        app_proc, app = procs.workload(host, **{"demand": "const:0", **(app_opts or {})})
        agent_proc, agent, admin = procs.agent(host, app, policy=policy, **(agent_opts or {}))
        out.append(Backend(host, app, agent, admin, app_proc, agent_proc))
    return out


def start_fleet(procs: Procs, addrs: Addrs, n: int, policy: str = "dynamic", app_opts: dict | None = None,
                agent_opts: dict | None = None, wanting: bool = True, absent: list[str] = (),
                key_files: list[str] | None = None) -> list[Backend]:
    """`n` backends on loopback whose agents form a forwarding tier
    (harness.testbed: every agent a peer of every other), returned once each
    hears its sample. wanting: first send each agent an offer with no
    `hunt-seen` (served where it lands: all are idle), so that every agent
    wants every change of its peers' counts, as with several fronts, and wait
    until each peer knows. absent, key_files: FleetSpec's."""
    spec = FleetSpec([{"demand": "const:0", **(app_opts or {})}] * n, policy=policy, agent=dict(agent_opts or {}),
                     absent=tuple(absent), key_files=key_files)
    out = Testbed(spec, Loopback(procs, addrs)).start().backends
    if wanting:
        for b in out:
            status, _, _ = request(b.agent, "GET", "/fleet-warm-up", headers={"hunt-offer": "1", "hunt-target": "1"})
            assert status == 200, f"warm-up offer to {b.id}: {status}"
        # every agent samples `heard` others, so as many subscriptions to changes stand, spread over the fleet
        heard = heard_of(n, spec.sample)
        wait_until(lambda: sum(b.metrics()["huntlb_fleet_peers_wanting"] for b in out) == n * heard,
                   what="every agent's sample knowing that it wants their changes")
    return out


def hold(b: Backend, n: int, work_ms: int = 4000) -> list:
    """`n` plain requests working at `b`'s app for `work_ms`, sent to its agent
    past any front: its count is n (returned once the app has them)."""
    ts = [threading.Thread(target=request, args=(b.agent, "GET", f"/hold/{uuid.uuid4()}?work_ms={work_ms}"),
                           kwargs={"timeout": 30}, daemon=True) for _ in range(n)]
    for t in ts:
        t.start()
    wait_until(lambda: app_stats(b.app)["busy"] >= n, what=f"{n} requests working at {b.host}")
    return ts


def tries_past_a_loaded_one(loaded: Backend, backends: list[Backend], fronts: list[str], prefix: str, headers: dict,
                            body: bytes, check=None) -> list[str]:
    """`loaded` holding 4 requests (hold, past every front), 24 tries through
    `fronts` by turns, GET and POST of `body` by turns, with `headers`: each
    answered 200 and processed at exactly one app. Returns who served each
    (hunt-served-by); check(body): a further look at each answer."""
    hold(loaded, 4)
    wait_until(lambda: loaded.metrics()["huntlb_inflight"] == 4)
    served = []
    for i in range(24):  # Envoy's ties are random: with 3 backends, none of 24 to the loaded one is (2/3)^24
        path = f"{prefix}/{uuid.uuid4()}"
        b = body if i % 2 else None
        status, h, out = request(fronts[i % len(fronts)], "POST" if b else "GET", path, body=b, headers=headers)
        assert status == 200, (status, h, out)
        assert sorted(counts(backends, path)) == [0] * (len(backends) - 1) + [1], counts(backends, path)  # processed once, somewhere
        if check:
            check(out)
        served.append(h["hunt-served-by"])
    return served


def counts(backends: list[Backend], path: str) -> list[int]:
    """How many times each app processed `path`, in order."""
    return [app_stats(b.app)["paths"].get(path, 0) for b in backends]


def path_count(backends: list[Backend], path: str) -> int:
    """How many times the apps processed `path`, summed over all backends."""
    return sum(app_stats(b.app)["paths"].get(path, 0) for b in backends if b.app_proc.alive())


class Hunter:
    """Something that accepts or refuses offers in front of one app."""

    def __init__(self, kind, addr, read, proc, admin=None):
        self.kind, self.addr, self._read, self.proc, self.admin = kind, addr, read, proc, admin

    def connections_per_worker(self) -> list[float]:
        """Sidecar only: downstream connections each Envoy worker thread took."""
        s = envoy_stats(self.admin)
        return [v for k, v in sorted(s.items()) if k.startswith("listener.") and ".worker_" in k and k.endswith(".downstream_cx_total")]

    def inflight(self) -> float:
        return self._read("inflight")

    def c(self) -> float:
        return self._read("c")

    def finals_busy(self) -> float:
        """Finals accepted while at or above the threshold (the scaling signal)."""
        return self._read("finals_busy")

    def accepted(self) -> float:
        return self._read("accepted")

    def refused(self) -> float:
        return self._read("refused")


_AGENT_NAMES = {"inflight": "huntlb_inflight", "c": "huntlb_policy_c", "finals_busy": "huntlb_finals_busy_total",
                "accepted": 'huntlb_offers_total{decision="accept"}', "refused": 'huntlb_offers_total{decision="refuse"}'}
# proxy-wasm metrics carry no labels: the value goes into the name (policy/src/metrics.rs)
_SIDECAR_NAMES = {"inflight": "wasmcustom.huntlb_busy", "c": "wasmcustom.huntlb_policy_c",
                  "finals_busy": "wasmcustom.huntlb_finals_busy_total",
                  "accepted": "wasmcustom.huntlb_offers_accept_total", "refused": "wasmcustom.huntlb_offers_refuse_total"}


def start_hunter(kind: str, procs: Procs, host: str, app: str, policy: str, workers: int = 32) -> Hunter:
    if kind.startswith("haproxy-"):
        hr = HaproxyRoot(kind.split("-", 1)[1])
        procs.cleanups.append(hr.cleanup)
        addr, admin = f"{host}:8080", f"{host}:9901"
        text = haproxy_config(hr, "sidecar.cfg", {"127.0.2.1:9000": app, "127.0.2.1": host}, keep_served_by=False,
                              env_args=f"role=sidecar policy={policy} workers={workers} id=sidecar-{host}")
        text = text.replace("hunt-served-by web1", f"hunt-served-by sidecar-{host}")
        p = start_haproxy(procs, hr, f"haproxy-sidecar-{host}", text)
        wait_tcp(admin, p)
        names = {**_AGENT_NAMES, "inflight": "huntlb_busy"}
        return Hunter(kind, addr, lambda k: metrics(admin).get(names[k], 0.0), p)
    if kind == "agent":
        p, addr, admin = procs.agent(host, app, policy=policy, workers=workers)
        return Hunter(kind, addr, lambda k: metrics(admin).get(_AGENT_NAMES[k], 0.0), p)
    addr, admin = f"{host}:8080", f"{host}:9901"
    p = start_envoy(procs, f"sidecar-{host}", sidecar_config(addr, admin, app, policy, workers, id=f"sidecar-{host}"), concurrency=2)
    return Hunter(kind, addr, lambda k: envoy_stats(admin).get(_SIDECAR_NAMES[k], 0.0), p, admin=admin)


def start_hunted_backends(procs: Procs, addrs: Addrs, n: int, hunter: str, policy: str, app_opts: dict | None = None) -> list[Backend]:
    """n workload apps, each behind a hunter of kind `hunter` (agent, envoy,
    haproxy-2.6, haproxy-3.0); `.agent` is the hunter's address, `.agent_proc` its process."""
    out = []
    for _ in range(n):
        host = addrs.host()
        app_proc, app = procs.workload(host, **{"demand": "const:0", **(app_opts or {})})
        h = start_hunter(hunter, procs, host, app, policy)
        b = Backend(host, app, h.addr, h.admin, app_proc, h.proc)
        b.hunter = h
        out.append(b)
    return out


def each_refused_once_then_served_elsewhere(listen: str, backends: list, n: int, prefix: str) -> None:
    """n GETs through a front over agents that refuse every offer: each must be
    refused by exactly one agent, served by another (its final), and reach an
    app exactly once. The retry path's arrival count, shared by the tests."""
    from harness.net import request
    for i in range(n):
        before = {b.id: b.refused() for b in backends}
        path = f"{prefix}/{i}"
        status, h, _ = request(listen, "GET", path)
        assert status == 200
        refusers = [b.id for b in backends if b.refused() > before[b.id]]
        assert len(refusers) == 1 and refusers[0] != h["hunt-served-by"], \
            f"request {i}: refused by {refusers}, served by {h['hunt-served-by']}"
        assert path_count(backends, path) == 1

