"""The drop-in: `envoy-filter/examples/hunt-snippet.yaml` pasted into a stock
Envoy config that is not ours (the shape of Envoy's own front-proxy example),
as a user would, then validated by Envoy and run against real agents."""

import copy
import re
import subprocess
import uuid

import yaml
from harness import EXAMPLES, ROOT, agent_default, envoy_binary, path_count, request, sock, start_backends, start_envoy, wait_envoy_hosts_healthy

STOCK = """
static_resources:
  listeners:
  - name: listener_0
    address: {socket_address: {address: 0.0.0.0, port_value: 10000}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          use_remote_address: true
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
          route_config:
            name: local_route
            virtual_hosts:
            - name: local_service
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: service, timeout: 60s}
  clusters:
  - name: service
    type: STATIC
    connect_timeout: 0.25s
    load_assignment:
      cluster_name: service
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8080}}}
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 9901}}
"""


def with_snippet(stock: dict, snippet: dict) -> dict:
    """What the snippet's comments tell a user to do, done by hand."""
    cfg = copy.deepcopy(stock)
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    vh = hcm["route_config"]["virtual_hosts"][0]
    vh.update(snippet["virtual_host"])
    theirs = vh["routes"][0]["route"]
    vh["routes"] = [{**m, "route": {**theirs, "retry_policy": snippet["retry_policy"]}} for m in snippet["routes"]]
    cfg["static_resources"]["clusters"][0].update(snippet["cluster"])
    return cfg


def run_stock(procs, addrs, tmp_path, cfg: dict, backends: list, name: str) -> str:
    """`cfg` (a stock config with a snippet pasted) pointed at this test's
    addresses and `backends`, validated by Envoy itself, then run; its
    listener's address once every backend is healthy."""
    host = addrs.host()
    listen, admin = f"{host}:10000", f"{host}:9901"
    cfg["static_resources"]["listeners"][0]["address"] = sock(listen)
    cfg["admin"]["address"] = sock(admin)
    cfg["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"] = [
        {"endpoint": {"address": sock(b.agent)}} for b in backends]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    v = subprocess.run([envoy_binary(), "--mode", "validate", "-c", str(path)], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stdout + v.stderr
    start_envoy(procs, name, cfg, concurrency=1)
    wait_envoy_hosts_healthy(admin, len(backends), cluster="service")
    return listen


def test_snippet_is_short_and_pasted_into_a_stock_config_hunts(procs, addrs, tmp_path):
    text = (EXAMPLES / "hunt-snippet.yaml").read_text()
    assert len(text.splitlines()) <= 27   # 26, and the idle timeout under the agents'
    cfg = with_snippet(yaml.safe_load(STOCK), yaml.safe_load(text))
    bs = start_backends(procs, addrs, 2, "static:0")
    listen = run_stock(procs, addrs, tmp_path, cfg, bs, "envoy-stock")
    refused0 = sum(b.refused() for b in bs)
    # every offer is refused (static:0) and served by the other backend as a final
    for i in range(10):
        p = f"/s/{uuid.uuid4()}"
        status, h, _ = request(listen, "GET", p)
        assert status == 200 and path_count(bs, p) == 1
    assert sum(b.refused() for b in bs) - refused0 == 10
    # an offered POST is replayed intact, once; an app's 503 is not retried
    p = f"/s/{uuid.uuid4()}"
    assert request(listen, "POST", p, body=b"x" * 1000)[0] == 200 and path_count(bs, p) == 1
    p = f"/s/{uuid.uuid4()}"
    assert request(listen, "POST", f"{p}?status=503", body=b"x")[0] == 503 and path_count(bs, p) == 1
    assert sum(b.refused() for b in bs) - refused0 == 12


def seconds(d: str) -> float:
    """An Envoy duration as YAML writes it: `60s`, `0.25s`."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(d))
    assert m, d
    return float(m[1])


def shipped_envoy_clusters() -> dict[str, dict]:
    """Every cluster towards agents (one health-checking `/.hunt/health`) in
    the Envoy configs we ship and the YAML blocks of the docs: the examples'
    `static_resources.clusters` and the snippets' `cluster:` pieces; by where
    it is written."""
    found = {}
    sources = [(p.relative_to(ROOT), p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))]
    for page in sorted((ROOT / "docs").glob("*.md")):
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)):
            sources.append((f"{page.relative_to(ROOT)} block {i + 1}", block))
    for where, text in sources:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            continue   # a fragment in prose, not a config
        if not isinstance(doc, dict):
            continue
        clusters = [doc["cluster"]] if isinstance(doc.get("cluster"), dict) else []
        clusters += (doc.get("static_resources") or {}).get("clusters") or []
        for c in clusters:
            paths = [h.get("http_health_check", {}).get("path") for h in c.get("health_checks", [])]
            if "/.hunt/health" in paths:
                found[f"{where} {c.get('name', 'cluster')}"] = c
    return found


def agent_idle_timeout_s() -> float:
    """The agent's `idle_timeout_ms` default, as the agent declares it."""
    return agent_default("idle_timeout_ms") / 1000


def test_every_shipped_envoy_cluster_closes_idle_connections_before_the_agent():
    """Envoy's upstream idle timeout defaults to 1 h, the agent's to 120 s:
    left at the default, the agent closes an idle connection while Envoy may
    be writing a request on it (docs/agent.md § Timeouts). Every cluster to
    agents that we ship sets Envoy's under the agent's."""
    clusters = shipped_envoy_clusters()
    where = {k.split(" ")[0] for k in clusters}
    # the files and pages a user pastes from are all here (none skipped unseen)
    for must in ["envoy-filter/examples/front.yaml", "envoy-filter/examples/front-tier.yaml",
                 "envoy-filter/examples/hunt-snippet.yaml", "envoy-filter/examples/tier-snippet.yaml",
                 "envoy-filter/examples/plain-snippet.yaml", "docs/drop-in.md", "docs/envoy.md"]:
        assert must in where, (must, sorted(clusters))
    agent = agent_idle_timeout_s()
    assert agent == 120
    for name, c in clusters.items():
        opts = (c.get("typed_extension_protocol_options") or {}).get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
        assert opts, f"{name}: no HttpProtocolOptions, so Envoy's 1 h idle timeout"
        idle = opts.get("common_http_protocol_options", {}).get("idle_timeout")
        assert idle and seconds(idle) < agent, f"{name}: idle_timeout {idle} is not under the agent's {agent} s"
