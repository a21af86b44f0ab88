"""A plain proxy beside each backend, in the agent's place: what a mesh's
sidecar hop costs on this machine, at the same load, as the yardstick for the
agents' CPU (`bench/pairs.py haproxy leastconn leastconn+sc leastconn+esc`).

`+sc`: HAProxy 2.6, one thread, keep-alive both ways; `+esc`: Envoy, one
worker (a sidecar as Istio runs it, without mTLS, telemetry filters or
xDS: the floor of its cost, not its price). Each listens on the backend's own
address (HAProxy on port 8081, Envoy on 8083, its admin 8084), answers the fronts' health path itself (as the
agent does: a check never reaches the app) and passes every other request
to the app. Started once per bench and stopped with it (by PID, through
`Procs`).
"""

from __future__ import annotations

from types import SimpleNamespace

from harness import HaproxyRoot, Procs, start_envoy, start_haproxy, wait_tcp

# kind -> (proxy, port): both kinds can run beside the same backends
KINDS = {"sc": ("haproxy", 8081), "esc": ("envoy", 8083)}
HEALTH = "/.hunt/health"


def _haproxy_text(listen: str, app: str) -> str:
    return f"""global
    nbthread 1
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    option http-keep-alive
frontend sidecar
    bind {listen}
    http-request return status 200 content-type text/plain string "ok\\n" if {{ path {HEALTH} }}
    default_backend app
backend app
    http-reuse always
    server app {app}
"""


def _envoy_cfg(listen: str, admin: str, app: str) -> dict:
    def sock(a: str) -> dict:
        h, p = a.rsplit(":", 1)
        return {"socket_address": {"address": h, "port_value": int(p)}}
    route = {"name": "local", "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
        {"match": {"path": HEALTH}, "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}},
        {"match": {"prefix": "/"}, "route": {"cluster": "app", "timeout": "60s"}}]}]}
    # HAProxy's health checks speak HTTP/1.0 with no Host (`option httpchk`), which Envoy refuses by default
    hcm = {"stat_prefix": "sidecar", "route_config": route,
           "http_protocol_options": {"accept_http_10": True, "default_host_for_http_10": "sidecar"},
           "http_filters": [{"name": "envoy.filters.http.router",
                             "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}
    hcm["@type"] = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
    return {
        "admin": {"address": sock(admin)},
        "static_resources": {
            "listeners": [{"name": "sidecar", "address": sock(listen), "filter_chains": [{"filters": [
                {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}]}],
            "clusters": [{"name": "app", "type": "STATIC", "connect_timeout": "1s",
                          "load_assignment": {"cluster_name": "app", "endpoints": [{"lb_endpoints": [
                              {"endpoint": {"address": sock(app)}}]}]}}]},
    }


def start_sidecars(procs: Procs, hr: HaproxyRoot | None, backends: list, kind: str) -> list[SimpleNamespace]:
    """One `kind` (sc, esc) sidecar per backend; returned as backends a front
    can take (`.agent`: the sidecar's address; `.proc`: its process)."""
    out = []
    for i, b in enumerate(backends):
        proxy, port = KINDS[kind]
        listen = f"{b.host}:{port}"
        if proxy == "haproxy":
            p = start_haproxy(procs, hr, f"sidecar-{i}", _haproxy_text(listen, b.app))
        else:
            p = start_envoy(procs, f"esidecar-{i}", _envoy_cfg(listen, f"{b.host}:{port + 1}", b.app), concurrency=1)
        wait_tcp(listen, p, timeout=30)
        out.append(SimpleNamespace(agent=listen, proc=p, host=b.host))
    return out
