"""Mesh and gateway packaging (packaging/), checked without a cluster: each
document against its project's published schema (packaging/validate, the
kubernetes-models packages from npm, through conftest.py's `validator`), and
what it configures against the shipped fronts and the real proxies: the Istio
plugin's settings loaded by the real Wasm filter in a real Envoy, the Envoy
Gateway patches applied to a real Envoy config, the HAProxy Ingress lines
assembled and checked by HAProxy."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from harness import ROOT, WASM, envoy_binary, front_config, request, sidecar_config, start_envoy

PKG = ROOT / "packaging"


def docs(path: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((PKG / path).read_text()) if d]


SCHEMA_CHECKED = [("istio/wasmplugin.yaml", "WasmPlugin"), ("envoy-gateway/front.yaml", "HTTPRoute"),
                  ("haproxy-ingress/front.yaml", "ConfigMap"), ("haproxy-ingress/front.yaml", "Ingress")]


@pytest.mark.parametrize("path,kind", SCHEMA_CHECKED)
def test_documents_match_their_schemas(validator, path, kind):
    doc = next(d for d in docs(path) if d["kind"] == kind)
    rc, out = validator([doc])
    assert rc == 0 and out.startswith("ok "), out


def test_the_validator_rejects_what_the_schemas_forbid(validator):
    """Each schema check can fail: a wrong enum, type or shape, or an unknown field, is named."""
    wasm = next(d for d in docs("istio/wasmplugin.yaml"))
    route = next(d for d in docs("envoy-gateway/front.yaml") if d["kind"] == "HTTPRoute")
    ingress = next(d for d in docs("haproxy-ingress/front.yaml") if d["kind"] == "Ingress")
    broken = [
        {**wasm, "spec": {**wasm["spec"], "failStrategy": "FAIL_SOMETIMES"}},
        {**route, "spec": {**route["spec"], "rules": [{**route["spec"]["rules"][0], "backendRefs": [{"name": "shop", "port": "http"}]}]}},
        {**ingress, "metadata": {**ingress["metadata"], "annotations": {"haproxy.org/check": True}}},
        {**ingress, "spec": {**ingress["spec"], "ingressClass": "haproxy"}},   # unknown: ingressClassName is the field
    ]
    for doc in broken:
        rc, out = validator([doc])
        assert rc == 1 and out.startswith("invalid "), out
    rc, out = validator([{"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "BackendTrafficPolicy", "metadata": {"name": "x"}}])
    assert rc == 1 and out.startswith("noschema"), out   # never silently "valid"


def test_istio_plugin_config_is_what_the_filter_accepts(procs, addrs):
    """The WasmPlugin's pluginConfig, given to the real filter in a real Envoy:
    it loads, and the sidecar refuses an offer when busy by its settings."""
    if not WASM.exists():
        pytest.skip("target/huntlb_filter.wasm not built (make wasm; make test builds it)")
    plugin = docs("istio/wasmplugin.yaml")[0]["spec"]["pluginConfig"]
    host = addrs.host()
    app_proc, app = procs.workload(host, workers=4, demand="const:0")
    cfg = sidecar_config(f"{host}:8080", f"{host}:9901", app, plugin["policy"], plugin["workers"], plugin["id"])
    # sidecar_config hands the filter exactly these four keys: the plugin may have no other
    cfg_json = json.dumps({"role": "sidecar", "policy": plugin["policy"], "workers": plugin["workers"], "id": plugin["id"]})
    assert json.loads(cfg_json) == plugin, "pluginConfig has keys the filter's config does not"
    start_envoy(procs, f"istio-sidecar-{host}", cfg, concurrency=1)
    status, headers, _ = request(f"{host}:8080", "GET", "/", headers={"hunt-offer": "1", "hunt-target": "1"})
    assert status == 200 and headers.get("hunt-served-by") == plugin["id"], (status, headers)


def _apply(doc: dict, patch: dict) -> None:
    """One RFC 6902 `add` (what the EnvoyPatchPolicy uses)."""
    op = patch["operation"]
    assert op["op"] == "add"
    *parents, last = op["path"].lstrip("/").split("/")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[last] = op["value"]


def _seconds(d: str) -> float:
    """A duration as Envoy ("0.5s") or Gateway API ("500ms") writes it."""
    m = re.fullmatch(r"([0-9.]+)(ms|s)", d)
    assert m, d
    return float(m[1]) / (1000 if m[2] == "ms" else 1)


def test_envoy_gateway_policies_are_the_shipped_front(tmp_path):
    """The Envoy Gateway resources say what envoy-filter/examples/front.yaml says:
    the patches, applied to a front without them (the cluster as Envoy Gateway
    writes a LeastRequest one: no selection method), give the shipped front's
    fields and a config the real Envoy accepts."""
    route, btp, epp = docs("envoy-gateway/front.yaml")
    # keep_served_by=False: the headers front.yaml itself keeps from clients
    shipped = front_config("127.0.0.1:10000", "127.0.0.1:9902", ["127.0.0.1:8080"], keep_served_by=False)
    vh = shipped["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0]
    retry = vh["routes"][0]["route"]["retry_policy"]
    cluster = shipped["static_resources"]["clusters"][0]
    hc = cluster["health_checks"][0]

    # HTTPRoute: the offer mark, the front's name, the header hygiene. Its `set`
    # is Envoy's OVERWRITE_IF_EXISTS_OR_ADD, and Envoy Gateway passes values
    # through as written, so %DOWNSTREAM_LOCAL_ADDRESS% is formatted per replica.
    filters = {f["type"]: f for f in route["spec"]["rules"][0]["filters"]}
    req = filters["RequestHeaderModifier"]["requestHeaderModifier"]
    added = vh["routes"][0]["request_headers_to_add"] + vh["request_headers_to_add"]
    assert {h["append_action"] for h in added} == {"OVERWRITE_IF_EXISTS_OR_ADD"}
    assert req["set"] == [{"name": h["header"]["key"], "value": h["header"]["value"]} for h in added]
    assert "hunt-front" in [h["name"] for h in req["set"]]
    assert req["remove"] == vh["request_headers_to_remove"]
    assert filters["ResponseHeaderModifier"]["responseHeaderModifier"]["remove"] == vh["response_headers_to_remove"]

    # BackendTrafficPolicy: the pick, one retry on the refusal, health checks
    s = btp["spec"]
    lb = cluster["load_balancing_policy"]["policies"][0]["typed_extension_config"]
    # Envoy Gateway's LeastRequest is this extension (internal/xds/translator/cluster.go); FULL_SCAN is patched in below
    assert s["loadBalancer"] == {"type": "LeastRequest"} and lb["name"] == "envoy.load_balancing_policies.least_request"
    assert "lb_policy" not in cluster
    assert s["retry"]["numRetries"] == retry["num_retries"]
    # the agent's refusals are hunt: busy|unreachable with 425, and only they: an app's own 425 arrives as 400
    assert [h["name"] for h in retry["retriable_headers"]] == ["hunt"] and s["retry"]["retryOn"]["httpStatusCodes"] == [425]
    assert set(s["retry"]["retryOn"]["triggers"]) == set(retry["retry_on"].split(",")) - {"retriable-headers"}
    backoff = s["retry"]["perRetry"]["backOff"]
    assert (_seconds(backoff["baseInterval"]), _seconds(backoff["maxInterval"])) == \
        (_seconds(retry["retry_back_off"]["base_interval"]), _seconds(retry["retry_back_off"]["max_interval"]))
    # active checks: also what Envoy needs to act on the agents' x-envoy-immediate-health-check-fail
    a = s["healthCheck"]["active"]
    assert a["type"] == "HTTP" and a["http"]["path"] == hc["http_health_check"]["path"]
    assert (_seconds(a["interval"]), _seconds(a["timeout"])) == (_seconds(hc["interval"]), _seconds(hc["timeout"]))
    assert (a["unhealthyThreshold"], a["healthyThreshold"]) == (hc["unhealthy_threshold"], hc["healthy_threshold"])
    # passive: the outlier detection, each field as Envoy Gateway maps it (buildXdsOutlierDetection)
    passive = s["healthCheck"]["passive"]
    names = {"consecutive5XxErrors": "consecutive_5xx", "splitExternalLocalOriginErrors": "split_external_local_origin_errors",
             "consecutiveLocalOriginFailures": "consecutive_local_origin_failure", "interval": "interval",
             "baseEjectionTime": "base_ejection_time", "maxEjectionPercent": "max_ejection_percent"}
    norm = lambda k, v: _seconds(v) if k in ("interval", "base_ejection_time") else v
    assert {names[k]: norm(names[k], v) for k, v in passive.items()} == {k: norm(k, v) for k, v in cluster["outlier_detection"].items()}
    assert s["healthCheck"]["panicThreshold"] == cluster["common_lb_config"]["healthy_panic_threshold"]["value"]

    # EnvoyPatchPolicy: applied to the front without those fields, the result is the shipped front's
    bare = front_config("127.0.0.1:10000", "127.0.0.1:9902", ["127.0.0.1:8080"], keep_served_by=False)
    rc = bare["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]
    rc["virtual_hosts"][0].pop("include_request_attempt_count")
    for r in rc["virtual_hosts"][0]["routes"]:
        # (the routes share one retry_policy: front.yaml writes it once, as a YAML anchor)
        r["route"]["retry_policy"].pop("retry_host_predicate", None)
        r["route"]["retry_policy"].pop("host_selection_retry_max_attempts", None)
    bare_cluster = bare["static_resources"]["clusters"][0]
    bare_cluster["load_balancing_policy"]["policies"][0]["typed_extension_config"]["typed_config"].pop("selection_method")
    bare_cluster["common_lb_config"].pop("update_merge_window")   # (the panic threshold is the policy's, above)
    meta = route["metadata"]
    for p in epp["spec"]["jsonPatches"]:
        if p["type"] == "type.googleapis.com/envoy.config.cluster.v3.Cluster":
            assert p["name"] == f"httproute/{meta['namespace']}/{meta['name']}/rule/0"   # the route's one rule
            _apply(bare_cluster, p)
        else:
            assert p["type"] == "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
            _apply(rc, p)
    patched = rc["virtual_hosts"][0]
    assert patched["include_request_attempt_count"] is True
    assert patched["routes"][0]["route"]["retry_policy"] == retry
    assert bare_cluster["load_balancing_policy"] == cluster["load_balancing_policy"]
    assert bare_cluster["common_lb_config"] == cluster["common_lb_config"]
    path = tmp_path / "patched.yaml"
    path.write_text(yaml.safe_dump(bare))
    p = subprocess.run([envoy_binary(), "--mode", "validate", "-c", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def test_haproxy_ingress_lines_are_the_shipped_front(tmp_path):
    """Every line of the Ingress snippet is one of the shipped front's, but the
    pick block, which is least_pick.py's for the controller's backend and server
    slots; every hunting line of the front is there, and HAProxy accepts the
    assembled config."""
    from harness import least_pick
    cm, ing = docs("haproxy-ingress/front.yaml")
    a = ing["metadata"]["annotations"]
    snippet = a["haproxy.org/backend-config-snippet"].splitlines()
    slots = [f"SRV_{i}" for i in range(1, int(a["haproxy.org/server-slots"]) + 1)]
    begin = next(i for i, l in enumerate(snippet) if l.startswith(least_pick.BEGIN))
    end = snippet.index(least_pick.END)
    assert snippet[begin:end + 1] == least_pick.block("shop_svc_shop_http", slots, indent=""), "rewrite the pick block"
    front = (ROOT / "haproxy-lua/examples/front.cfg").read_text()
    hunt = least_pick.PICK_RE.sub("", front[front.index("backend hunt"):])
    shipped = [re.sub(r"\s+#.*$", "", l).strip() for l in hunt.splitlines()]
    mapped = snippet[:begin] + snippet[end + 1:]
    for line in mapped:
        assert line in shipped, f"not in the shipped front: {line}"
    for line in shipped:
        # (the health check path is the Ingress's check-http annotation)
        if ("hunt" in line and line != "backend hunt" and not line.startswith("option httpchk")) \
                or line in ("retry-on conn-failure 425", "retries 1"):
            assert line in mapped, f"the shipped front's hunting line is missing: {line}"

    # assembled as the controller would: global snippet, a backend with the snippet, two servers
    lua_dir = tmp_path / "huntlb"
    shutil.copytree(ROOT / "haproxy-lua/huntlb", lua_dir / "huntlb")
    shutil.copy(ROOT / "haproxy-lua/huntlb.lua", lua_dir / "huntlb.lua")
    glob = cm["data"]["global-config-snippet"].replace("/etc/haproxy/huntlb", str(lua_dir))
    body = "\n".join("    " + l.replace("/etc/haproxy/huntlb", str(lua_dir)) for l in snippet)
    cfg = (f"global\n{glob}\ndefaults\n    mode http\n    timeout connect 250ms\n    timeout client 60s\n    timeout server 60s\n"
           f"frontend front\n    bind 127.0.0.1:18080\n    default_backend shop_svc_shop_http\n"
           f"backend shop_svc_shop_http\n    balance {a['haproxy.org/load-balance']}\n"
           f"    option httpchk GET {a['haproxy.org/check-http']}\n{body}\n"
           f"    default-server check inter {a['haproxy.org/check-interval']}\n"
           + "".join(f"    server {n} 127.0.0.{i + 1}:8080\n" for i, n in enumerate(slots)))
    (tmp_path / "haproxy.cfg").write_text(cfg)
    p = subprocess.run(["/usr/sbin/haproxy", "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
