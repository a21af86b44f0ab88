"""charts/huntlb: the agent beside an app's pods as a Helm chart, checked
without a cluster. `helm lint` clean; rendered by the real `helm template`
(built from its Go module by `make setup-k8s`); every document against its
published schema, unknown fields included (packaging/validate); the ports,
paths and names that must agree across the documents held together (a
planted mismatch of each kind fails); the opt-ins (NetworkPolicy, PodMonitor,
the fronts' resources) absent by default, and the NetworkPolicy, when on,
admitting every caller the app had; the values that would start agents that
never work refused with the key named; and the ConfigMap's config taken by
the real agent, started with the container's own args, its key laid out and
rotated as the kubelet writes a Secret. No cluster runs here: nothing is
scheduled, no kubelet probes, no NetworkPolicy is enforced, no DNS answers for
the headless Service (docs/kubernetes.md says so too)."""

from __future__ import annotations

import copy
import ipaddress
import os
import re
import secrets
import shutil
import subprocess
import textwrap
import time
import tomllib
from pathlib import Path

import pytest

from harness.k8sfleet import doc_commands  # the docs' shell commands, as the real cluster's tests run them
import yaml

from harness import ROOT, TRIXIE, agent_default, binary, metrics, request, wait_http, wait_until

CHART = ROOT / "charts" / "huntlb"
EXAMPLE = CHART / "examples" / "shop.yaml"
RELEASE, NAMESPACE = "shop", "shop"
AGENT = "huntlb-agent"              # the sidecar's container name
DEFAULTS = ("listen", "admin", "app", "health_path")   # what the agent takes when the chart gives none
OPT_INS = ["networkPolicy.enabled=true", "podMonitor.enabled=true"]


def helm() -> str:
    """Helm 3, as `make setup-k8s` builds it into .cache/bin (or one on PATH)."""
    for h in (str(ROOT / ".cache" / "bin" / "helm"), shutil.which("helm")):
        if h and os.access(h, os.X_OK):
            return h
    pytest.skip("no helm: make setup-k8s builds it from its Go module into .cache/bin")


def kubectl() -> str:
    """A kubectl whose kustomize takes `patches` (v5: kubectl 1.27 and later),
    for the post-renderer: the one on PATH, else trixie's, which make setup
    installs (bookworm's kubernetes-client is kubectl 1.20, kustomize v2)."""
    for k in (shutil.which("kubectl"), str(TRIXIE / "usr/bin/kubectl")):
        if k and os.access(k, os.X_OK):
            out = subprocess.run([k, "version", "--client"], capture_output=True, text=True, timeout=30).stdout
            m = re.search(r"Kustomize Version: v(\d+)", out)
            if m and int(m[1]) >= 5:
                return k
    pytest.skip(f"no kubectl with kustomize v5 (make setup installs trixie's into {TRIXIE})")


@pytest.fixture(scope="module")
def key_file(tmp_path_factory) -> Path:
    """fleet.key, as a user makes it (out of git)."""
    path = tmp_path_factory.mktemp("key") / "fleet.key"
    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return path


def template(key: Path | None, *sets: str, values: Path | None = EXAMPLE, check: bool = True) -> subprocess.CompletedProcess:
    """`helm template` of the chart as the docs install it, with more --set."""
    argv = [helm(), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values:
        argv += ["-f", str(values)]
    if key:
        argv += ["--set-file", f"fleetKey.value={key}"]
    for s in sets:
        argv += ["--set", s]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def render(key: Path | None, *sets: str, values: Path | None = EXAMPLE) -> list[dict]:
    return [d for d in yaml.safe_load_all(template(key, *sets, values=values).stdout) if d]


@pytest.fixture(scope="module")
def rendered(key_file) -> list[dict]:
    """Every part the chart renders for the example app, the opt-ins on."""
    return render(key_file, *OPT_INS)


def for_the_api(docs: list[dict]) -> list[dict]:
    """The documents as the API server reads them: a Secret's base64 folded
    over lines (as kustomize writes it) is read whole by Go's decoder
    (encoding/base64 ignores \\r and \\n), which the schema's "byte" format
    does not know."""
    docs = copy.deepcopy(docs)
    for d in docs:
        if d["kind"] == "Secret":
            d["data"] = {k: re.sub(r"\s", "", v) for k, v in d.get("data", {}).items()}
    return docs


# --- what the documents say, read once --------------------------------------


def one(docs, kind, pred=lambda d: True) -> dict:
    found = [d for d in docs if d["kind"] == kind and pred(d)]
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


def flags(args: list[str]) -> dict[str, str]:
    """--a-b=value args as {a_b: value} (how the agent reads its flags)."""
    out = {}
    for a in args:
        m = re.fullmatch(r"--([a-z0-9-]+)=(.*)", a)
        assert m, f"arg {a!r}: write flags as --key=value"
        out[m[1].replace("-", "_")] = m[2]
    return out


class Pod:
    """The Deployment's pod as the agent sees it: its containers, its volumes,
    and the agent's effective config (the mounted file, then the args)."""

    def __init__(self, docs: list[dict]):
        self.docs = docs
        self.deployment = one(docs, "Deployment")
        self.spec = self.deployment["spec"]["template"]["spec"]
        self.labels = self.deployment["spec"]["template"]["metadata"]["labels"]
        self.agent = next(c for c in self.spec["containers"] if c["name"] == AGENT)
        self.args = flags(self.agent.get("args", []))
        self.mounts = {m["mountPath"]: m for m in self.agent.get("volumeMounts", [])}
        self.volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        path = self.args["config"]
        self.config_mount = os.path.dirname(path)
        cm_name = self.volumes[self.mounts[self.config_mount]["name"]]["configMap"]["name"]
        self.configmap = one(docs, "ConfigMap", lambda d: d["metadata"]["name"] == cm_name)
        self.toml = self.configmap["data"][os.path.basename(path)]
        self.file = tomllib.loads(self.toml)
        self.config = {**{k: agent_default(k) for k in DEFAULTS}, **self.file, **{k: v for k, v in self.args.items() if k != "config"}}

    def port(self, ref, container=None) -> int | None:
        """A port number, or a container port's name, as a number."""
        if isinstance(ref, int):
            return ref
        c = container or self.agent
        return next((p["containerPort"] for p in c.get("ports", []) if p.get("name") == ref), None)

    def selects(self, selector: dict) -> bool:
        return bool(selector) and all(self.labels.get(k) == v for k, v in selector.items())


def port_of(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


class Caller:
    """A pod that sends to a member: its labels, its namespace's labels."""

    def __init__(self, labels: dict, namespace: dict | None = None, same_namespace: bool = False):
        self.labels, self.same_namespace = labels, same_namespace
        self.namespace = namespace or {"kubernetes.io/metadata.name": NAMESPACE if same_namespace else "elsewhere"}


STRANGER = Caller({"app": "billing"}, {"kubernetes.io/metadata.name": "billing"})     # a caller no value names
PROMETHEUS = Caller({"app.kubernetes.io/name": "prometheus"}, {"kubernetes.io/metadata.name": "monitoring"})


def matches(selector: dict, labels: dict) -> bool:
    """A label selector (matchLabels only: the chart writes no expressions)."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def admits(np: dict, pod: "Pod", caller: Caller, port: int, protocol: str) -> bool:
    """Whether a NetworkPolicy lets `caller` reach `port` of the pod, as the
    API defines it: a rule admits when one of its ports covers the port
    (none: every port; endPort: a range) and one of its peers is the caller
    (none: everyone); a peer with only a podSelector means this namespace."""
    for rule in np["spec"].get("ingress", []):
        ports = rule.get("ports")
        if ports and not any(p.get("protocol", "TCP") == protocol and
                             pod.port(p["port"]) <= port <= p.get("endPort", pod.port(p["port"])) for p in ports):
            continue
        peers = rule.get("from")
        if not peers:
            return True
        for peer in peers:
            assert "ipBlock" not in peer, "ipBlock peers: teach this evaluator"
            ns_ok = matches(peer["namespaceSelector"], caller.namespace) if "namespaceSelector" in peer else caller.same_namespace
            if ns_ok and ("podSelector" not in peer or matches(peer["podSelector"], caller.labels)):
                return True
    return False


def disagreements(docs: list[dict]) -> list[str]:
    """Every way the documents fail to agree with each other and with the
    agent's config; empty when they agree."""
    bad = []
    pod = Pod(docs)
    c = pod.config
    listen, admin = port_of(c["listen"]), port_of(c["admin"])
    peer_port = int(c.get("fleet_peer_port", listen))
    declared = {(p["containerPort"], p.get("protocol", "TCP")) for p in pod.agent.get("ports", [])}

    # listen and admin: reachable from outside the pod, declared, probed
    for key in ("listen", "admin"):
        if c[key].rsplit(":", 1)[0] not in ("0.0.0.0", "[::]", "$(POD_IP)"):
            bad.append(f"{key} {c[key]} is not reachable from outside the pod")
    if (listen, "TCP") not in declared or (admin, "TCP") not in declared:
        bad.append(f"the agent container does not declare listen {listen} and admin {admin}")
    ready = pod.agent.get("readinessProbe", {}).get("httpGet", {})
    if pod.port(ready.get("port")) != listen or ready.get("path") != c["health_path"]:
        bad.append(f"readiness probe {ready} is not health_path {c['health_path']} on listen {listen}")
    live = pod.agent.get("livenessProbe", {}).get("httpGet", {})
    if pod.port(live.get("port")) != admin or live.get("path") != "/metrics":
        bad.append(f"liveness probe {live} is not /metrics on admin {admin} (the agent's own, whatever the app does)")

    # the app: on the pod's loopback, and no other container holds the agent's ports
    if not c["app"].startswith("127.0.0.1:"):
        bad.append(f"app {c['app']} is not on the pod's loopback")
    for other in pod.spec["containers"]:
        if other is not pod.agent and {p["containerPort"] for p in other.get("ports", [])} & {listen, admin}:
            bad.append(f"container {other['name']} declares the agent's port")

    # the Service the fronts use: to the agent's port, never the app's
    served = [s for s in docs if s["kind"] == "Service" and s["spec"].get("clusterIP") != "None"]
    for s in served:
        if not pod.selects(s["spec"].get("selector", {})):
            bad.append(f"Service {s['metadata']['name']} does not select the pod")
        targets = {pod.port(p.get("targetPort", p["port"])) for p in s["spec"]["ports"]}
        if targets != {listen}:
            bad.append(f"Service {s['metadata']['name']} targets {targets}, not the agent's listen {listen}")
    if not served:
        bad.append("no Service for the fronts")

    # the fleet: fleet_listen declared, the headless Service named by fleet_peers
    fleet = port_of(c["fleet_listen"])
    if (fleet, "UDP") not in declared:
        bad.append(f"the agent container does not declare UDP {fleet} (fleet_listen)")
    headless = [s for s in docs if s["kind"] == "Service" and s["spec"].get("clusterIP") == "None"]
    names = {s["metadata"]["name"]: s for s in headless}
    for entry in c["fleet_peers"].split(","):
        host, port = entry.strip().rsplit(":", 1)
        s = names.get(host.split(".")[0])
        if s is None or int(port) != fleet:
            bad.append(f"fleet_peers {entry} is not a headless Service on fleet_listen's port {fleet}")
            continue
        if not s["spec"].get("publishNotReadyAddresses"):
            bad.append(f"Service {host} leaves out not-ready members (their reports say whether they take forwards)")
        if not pod.selects(s["spec"].get("selector", {})):
            bad.append(f"Service {host} does not select the pod")
        if not any(p["port"] == fleet and p.get("protocol") == "UDP" and pod.port(p.get("targetPort", p["port"])) == fleet
                   for p in s["spec"].get("ports", [])):
            bad.append(f"Service {host} has no UDP port {fleet} to fleet_listen")
    adv = c.get("fleet_advertise", "")
    pod_ip = [e for e in pod.agent.get("env", []) if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP"]
    # the IP alone: the agent adds listen's port, bracketing an IPv6 IP (IP:port would not be)
    if not pod_ip or adv != f"$({pod_ip[0]['name']})":
        bad.append(f"fleet_advertise {adv!r} is not the pod's IP alone (the agent adds listen's port {listen})")

    # the NetworkPolicy: members on the fleet ports, anyone on listen (every
    # caller the app had), Prometheus on admin, a stranger never on the fleet's UDP
    # (opt-ins: checked where rendered)
    for np in [d for d in docs if d["kind"] == "NetworkPolicy"]:
        if not pod.selects(np["spec"]["podSelector"].get("matchLabels", {})):
            bad.append("the NetworkPolicy does not select the pod")
        member = Caller(pod.labels, same_namespace=True)
        if not (admits(np, pod, member, fleet, "UDP") and admits(np, pod, member, peer_port, "TCP")):
            bad.append(f"the NetworkPolicy does not admit members on UDP {fleet} and TCP {peer_port}")
        if not np["spec"].get("ingress") or not admits(np, pod, STRANGER, listen, "TCP"):
            bad.append(f"the NetworkPolicy cuts callers it does not know from the serving port {listen}")
        if admits(np, pod, STRANGER, fleet, "UDP") or admits(np, pod, STRANGER, admin, "TCP"):
            bad.append(f"the NetworkPolicy admits a stranger on the fleet's UDP {fleet} or admin {admin}")
        if not admits(np, pod, PROMETHEUS, admin, "TCP"):
            bad.append(f"the NetworkPolicy keeps Prometheus (namespace monitoring) from admin {admin}")

    # the PodMonitor scrapes admin's /metrics
    for pm in [d for d in docs if d["kind"] == "PodMonitor"]:
        if not pod.selects(pm["spec"]["selector"].get("matchLabels", {})):
            bad.append("the PodMonitor does not select the pod")
        if [(pod.port(e.get("port")), e.get("path", "/metrics")) for e in pm["spec"]["podMetricsEndpoints"]] != [(admin, "/metrics")]:
            bad.append(f"the PodMonitor scrapes {pm['spec']['podMetricsEndpoints']}, not admin {admin} /metrics")

    # the key: a Secret mounted whole at fleet_key_file's directory, readable as mounted
    key_dir, key_name = os.path.split(c["fleet_key_file"])
    mount = pod.mounts.get(key_dir)
    vol = pod.volumes.get(mount["name"]) if mount else None
    if not vol or "secret" not in vol:
        bad.append(f"fleet_key_file {c['fleet_key_file']}: no Secret mounted at {key_dir}")
    else:
        if mount.get("subPath"):
            bad.append("the key's Secret is mounted with subPath: the kubelet never updates it (no rotation)")
        secret = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == vol["secret"]["secretName"]]
        items = vol["secret"].get("items")
        if items and not any(i["path"] == key_name for i in items):
            bad.append(f"the key's Secret volume lists items, none at {key_name}")
        data_key = next((i["key"] for i in items or [] if i["path"] == key_name), key_name)
        if not secret or data_key not in secret[0].get("data", {}):
            bad.append(f"no Secret {vol['secret']['secretName']} with {data_key}")
        ctx = {**pod.spec.get("securityContext", {}), **pod.agent.get("securityContext", {})}
        mode = vol["secret"].get("defaultMode", 0o644)
        fs_group = pod.spec.get("securityContext", {}).get("fsGroup")
        if fs_group is not None:
            mode |= 0o440   # the kubelet: group read for fsGroup, whatever defaultMode says
        if fs_group is None and ctx.get("runAsUser", 0) != 0 and not mode & 0o004:
            bad.append("a non-root agent cannot read the key: the pod has no fsGroup and the file is root's")
        if mode & 0o066 and c.get("fleet_key_readable_by_others") is not True:
            bad.append(f"the key is mounted {mode:04o}, which the agent refuses without fleet_key_readable_by_others = true")

    # the app outlives the agent's drain grace (both get SIGTERM at once), the pod the whole drain
    for other in pod.spec["containers"]:
        wait = other.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        if other is not pod.agent and wait * 1000 < int(c.get("drain_grace_ms", 0)):
            bad.append(f"container {other['name']} waits {wait} s on delete, under drain_grace_ms: it stops while the agent relays to it")
    # the pod outlives the agent's drain
    if pod.spec.get("terminationGracePeriodSeconds", 30) * 1000 <= int(c.get("drain_timeout_ms", 30000)):
        bad.append("terminationGracePeriodSeconds is not above drain_timeout_ms: the kubelet kills a draining agent")
    return bad


# --- rendering and schemas ----------------------------------------------------


def test_the_example_renders_every_part(key_file):
    """By default: the app's Deployment with the agent beside its app, the
    Service the fronts use, the agent's config, the headless Service, the key;
    no NetworkPolicy, no PodMonitor (opt-ins: neither cuts a caller nor needs
    the Prometheus Operator's CRDs unasked), no front resources."""
    docs = render(key_file)
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    assert kinds == sorted(["ConfigMap/shop-huntlb-agent", "Secret/shop-fleet-key", "Service/shop-fleet", "Service/shop",
                            "Deployment/shop"]), kinds
    pod = Pod(docs)
    assert [c["name"] for c in pod.spec["containers"]] == [AGENT, "app"]
    assert pod.volumes["huntlb-config"]["configMap"]["name"] == "shop-huntlb-agent"
    assert pod.config["fleet_pass_plain"] is True, "plain fronts are the default"
    on = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in render(key_file, *OPT_INS))
    assert sorted(set(on) - set(kinds)) == ["NetworkPolicy/shop-huntlb", "PodMonitor/shop-huntlb"], on


def test_helm_lint_is_clean(key_file):
    p = subprocess.run([helm(), "lint", "--strict", str(CHART), "-f", str(EXAMPLE), "--set-file", f"fleetKey.value={key_file}",
                        *[a for s in OPT_INS for a in ("--set", s)]], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "0 chart(s) failed" in p.stdout and "[WARNING]" not in p.stdout, p.stdout + p.stderr


def test_every_rendered_document_matches_its_schema(rendered, validator):
    rc, out = validator(for_the_api(rendered))
    lines = out.splitlines()
    assert rc == 0 and len(lines) == len(rendered) and all(l.startswith("ok ") for l in lines), out


def _set(path: str, value):
    """A planted change: doc at a dotted path (list indexes as numbers)."""
    def plant(doc):
        *parents, last = path.split(".")
        node = doc
        for k in parents:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[int(last) if isinstance(node, list) else last] = value
    return plant


PLANTED_ERRORS = [
    ("Deployment", _set("spec.template.spec.containers.0.ports.0.containerPort", "8080"), "must be integer"),
    ("Deployment", _set("spec.template.spec.containers.0.readinessProbe.httpGet.paht", "/.hunt/health"), "unknown field"),
    ("Deployment", _set("spec.template.spec.securityContext.fsGroup", "65532"), "must be integer"),
    ("NetworkPolicy", _set("spec.ingress.0.ports.0.port", {"number": 9700}), "oneOf"),
    ("NetworkPolicy", _set("spec.policyTypes", "Ingress"), "must be array"),
    ("Service", _set("spec.publishNotReadyAddress", True), "unknown field"),
    ("Secret", lambda d: d["data"].update({"fleet.key": "not base64!"}), "byte"),
    ("PodMonitor", _set("spec.podMetricsEndpoints.0.interval", "15 seconds"), "pattern"),
    ("ConfigMap", lambda d: d["data"].update({"agent.toml": 8080}), "must be string"),
]


@pytest.mark.parametrize("kind,plant,why", PLANTED_ERRORS, ids=[f"{k}-{w}" for k, _, w in PLANTED_ERRORS])
def test_a_planted_error_fails_validation(rendered, validator, kind, plant, why):
    doc = copy.deepcopy(one(for_the_api(rendered), kind, lambda d: d["metadata"]["name"] != "shop-fleet"))
    plant(doc)
    rc, out = validator([doc])
    assert rc == 1 and out.startswith("invalid ") and why in out, out


# --- the documents agree with each other and with the agent's config ----------


def test_ports_probes_and_config_agree(rendered):
    assert disagreements(rendered) == []


def _in_toml(old: str, new: str):
    def plant(docs):
        cm = one(docs, "ConfigMap")
        assert old in cm["data"]["agent.toml"]
        cm["data"]["agent.toml"] = cm["data"]["agent.toml"].replace(old, new)
    return plant


def _in(kind: str, path: str, value, pred=lambda d: True):
    def plant(docs):
        _set(path, value)(one(docs, kind, pred))
    return plant


SHOP = lambda d: d["metadata"]["name"] == "shop"
MISMATCHES = [
    ("service-to-the-app", _in("Service", "spec.ports.0.targetPort", 9000, SHOP), "targets {9000}"),
    ("readiness-path", _in("Deployment", "spec.template.spec.containers.0.readinessProbe.httpGet.path", "/healthz"), "readiness probe"),
    ("readiness-on-admin", _in("Deployment", "spec.template.spec.containers.0.readinessProbe.httpGet.port", "huntlb-admin"), "readiness probe"),
    ("liveness-on-health", _in("Deployment", "spec.template.spec.containers.0.livenessProbe.httpGet.path", "/.hunt/health"), "liveness probe"),
    ("listen-moved", _in_toml('listen = "0.0.0.0:8080"', 'listen = "0.0.0.0:8081"'), "listen 8081"),
    ("listen-on-loopback", _in_toml('listen = "0.0.0.0:8080"', 'listen = "127.0.0.1:8080"'), "not reachable"),
    ("fleet-port-moved", _in_toml('fleet_listen = "0.0.0.0:9700"', 'fleet_listen = "0.0.0.0:9800"'), "UDP 9800"),
    ("fleet-peers-name", _in_toml('fleet_peers = "shop-fleet:9700"', 'fleet_peers = "shop-peers:9700"'), "not a headless Service"),
    ("policy-udp-port", _in("NetworkPolicy", "spec.ingress.0.ports.0.port", 9701), "admit members"),
    ("policy-serving-narrowed", _in("NetworkPolicy", "spec.ingress.1.from", [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}}}]), "cuts callers"),
    ("policy-fleet-open", _in("NetworkPolicy", "spec.ingress.0.from", []), "admits a stranger"),
    ("policy-no-prometheus", _in("NetworkPolicy", "spec.ingress.2.from", []), "admits a stranger"),
    ("app-stops-first", _in("Deployment", "spec.template.spec.containers.1.lifecycle", {}), "under drain_grace_ms"),
    ("podmonitor-port", _in("PodMonitor", "spec.podMetricsEndpoints.0.port", "huntlb"), "the PodMonitor scrapes"),
    ("headless-drops-not-ready", _in("Service", "spec.publishNotReadyAddresses", False, lambda d: d["metadata"]["name"] == "shop-fleet"), "not-ready"),
    ("key-flag-off", _in_toml("fleet_key_readable_by_others = true", "fleet_key_readable_by_others = false"), "refuses"),
    ("key-no-fsgroup", _in("Deployment", "spec.template.spec.securityContext", {}), "cannot read the key"),
    ("key-subpath", _in("Deployment", "spec.template.spec.containers.0.volumeMounts.1.subPath", "fleet.key"), "subPath"),
    ("grace-too-short", _in("Deployment", "spec.template.spec.terminationGracePeriodSeconds", 30), "drain_timeout_ms"),
]


@pytest.mark.parametrize("plant,why", [m[1:] for m in MISMATCHES], ids=[m[0] for m in MISMATCHES])
def test_a_planted_mismatch_is_named(rendered, plant, why):
    docs = copy.deepcopy(rendered)
    plant(docs)
    found = disagreements(docs)
    assert any(why in b for b in found), found


# --- the real agent takes the ConfigMap's config ------------------------------


def kubelet_secret(dir: Path, files: dict[str, str], mode: int) -> None:
    """Write a Secret's files as the kubelet does (its AtomicWriter): each
    version in a timestamped directory, `..data` a symlink to the current one,
    each file a symlink through it; a new version replaces `..data` at once."""
    dir.mkdir(parents=True, exist_ok=True)
    version = dir / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    version.mkdir()
    for name, text in files.items():
        (version / name).write_text(text)
        (version / name).chmod(mode)
    old = os.readlink(dir / "..data") if (dir / "..data").is_symlink() else None
    (dir / "..data_tmp").symlink_to(version.name)
    os.replace(dir / "..data_tmp", dir / "..data")
    for name in files:
        if not (dir / name).is_symlink():
            (dir / name).symlink_to(f"..data/{name}")
    if old:
        shutil.rmtree(dir / old)


def mounted_mode(pod: Pod) -> int:
    """The key file's mode as the kubelet writes it for this pod."""
    vol = next(v for v in pod.volumes.values() if "secret" in v)
    mode = vol["secret"].get("defaultMode", 0o644)
    return mode | 0o440 if pod.spec.get("securityContext", {}).get("fsGroup") is not None else mode


def start_pod_agent(procs, pod: Pod, host: str, where: Path, keys: list[str], peers: str | None = None, extra=()):
    """The agent container on this machine: its command and args, $(VAR)
    expanded as Kubernetes does (POD_IP is `host`), the ConfigMap's file at
    the args' --config path and the key at fleet_key_file's, both moved under
    `where`. The one change to the file: the pod's addresses (0.0.0.0 and its
    loopback) become `host`, since this machine's loopback is shared; with
    `peers`, fleet_peers is what the headless Service's DNS would answer."""
    env = {"POD_IP": host, "POD_NAME": f"shop-{host.rsplit('.', 1)[1]}"}
    expand = lambda s: re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], s)
    key_dir, key_name = os.path.split(pod.config["fleet_key_file"])
    kubelet_secret(where / "fleet", {key_name: "\n".join(keys) + "\n"}, mounted_mode(pod))
    text = pod.toml.replace("0.0.0.0", host).replace("127.0.0.1", host).replace(key_dir + "/", f"{where / 'fleet'}/")
    if peers:
        text = re.sub(r'(?m)^fleet_peers = .*$', f'fleet_peers = "{peers}"', text)
    (where / "agent.toml").write_text(text)
    args = [expand(a) for a in pod.agent["args"]]
    args = [f"--config={where / 'agent.toml'}" if a.startswith("--config=") else a for a in args]
    argv = [binary(pod.agent["command"][0]), *pod.agent["command"][1:], *args, *extra]
    p = procs.start(f"pod-agent-{host}", argv, env={**os.environ, "RUST_LOG": "info"})
    cfg = tomllib.loads(text)
    return p, cfg["listen"], cfg["admin"], where / "fleet", key_name


def test_the_agent_takes_its_configmap(procs, addrs, rendered, tmp_path):
    """The ConfigMap's config, with the container's args, as the kubelet mounts
    it: the agent starts (the key 0440, as mounted); the readiness probe's path
    and port answer 200 while the app is up and 503 once it is gone, while the
    liveness probe's keep answering 200 (a dead or busy app restarts no agent);
    the PodMonitor's path serves the metrics; an offer is served, named by the
    pod. The fleet_peers name resolves to nothing here; the agent runs on."""
    pod = Pod(rendered)
    host = addrs.host()
    app_proc, app = procs.workload(host, port=port_of(pod.config["app"]), workers=4, demand="const:0")
    p, listen, admin, _, _ = start_pod_agent(procs, pod, host, tmp_path, [secrets.token_hex(32)])
    ready = pod.agent["readinessProbe"]["httpGet"]
    live = pod.agent["livenessProbe"]["httpGet"]
    assert (pod.port(ready["port"]), pod.port(live["port"])) == (port_of(listen), port_of(admin))
    live_at = f"{host}:{pod.port(live['port'])}"
    ready_at = f"{host}:{pod.port(ready['port'])}"
    wait_http(live_at, live["path"], proc=p, want=200)
    wait_http(ready_at, ready["path"], proc=p, want=200)
    endpoint = one(rendered, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    status, _, body = request(f"{host}:{pod.port(endpoint['port'])}", "GET", endpoint["path"])
    assert status == 200 and b"huntlb_offers_total" in body and b"huntlb_fleet_peers" in body
    status, headers, _ = request(ready_at, "GET", "/", headers={"hunt-offer": "1", "hunt-target": "1"})
    assert status == 200 and headers.get("hunt-served-by") == f"shop-{host.rsplit('.', 1)[1]}", (status, headers)

    app_proc.stop()
    wait_http(ready_at, ready["path"], proc=p, want=503)   # readiness follows the app
    status, _, _ = request(live_at, "GET", live["path"])
    assert status == 200 and p.alive(), "liveness must not fail for the app"
    assert "fleet_key_file" not in p.log(), p.log()


def test_the_key_as_mounted_needs_the_flag(procs, addrs, rendered, tmp_path):
    """Why agent.toml sets fleet_key_readable_by_others: without it, the agent
    refuses the key file as the kubelet writes it under an fsGroup (0440)."""
    pod = Pod(rendered)
    assert mounted_mode(pod) == 0o440
    p, *_ = start_pod_agent(procs, pod, addrs.host(), tmp_path, [secrets.token_hex(32)],
                            extra=["--fleet-key-readable-by-others=false"])
    assert p.wait(timeout=15) == 2
    assert "fleet_key_file" in p.log() and "mode 0440" in p.log(), p.log()


def test_members_hear_each_other_through_a_kubelet_key_rotation(procs, addrs, rendered, tmp_path):
    """Two pods' agents (fleet_peers as the headless Service's DNS answers: both
    addresses) hear each other; the key rotates in docs/kubernetes.md's steps,
    each written as the kubelet updates a Secret, one pod after the other, and
    no report is dropped as unauthenticated at any step. A skipped step (one
    agent on a key the other does not hold) is: the check can fail."""
    pod = Pod(rendered)
    hosts = [addrs.host(), addrs.host()]
    fleet = port_of(pod.config["fleet_listen"])
    peers = ",".join(f"{h}:{fleet}" for h in hosts)
    old, new = secrets.token_hex(32), secrets.token_hex(32)
    agents = []
    for h in hosts:
        procs.workload(h, port=port_of(pod.config["app"]), workers=4, demand="const:0")
        (tmp_path / h).mkdir()
        p, listen, admin, key_dir, key_name = start_pod_agent(procs, pod, h, tmp_path / h, [old], peers=peers)
        wait_http(admin, "/metrics", proc=p)
        agents.append((p, admin, key_dir, key_name))

    def unauthenticated(admin):
        return metrics(admin).get('huntlb_fleet_reports_bad_total{reason="unauthenticated"}', 0)

    def all_hear():
        return all(metrics(a)["huntlb_fleet_peers"] == 1 for _, a, _, _ in agents)
    wait_until(all_hear, timeout=15, what="each agent hears the other")

    steps = [[old, new], [new, old], [new]]    # add the new key second; seal with it; drop the old
    for n, keys in enumerate(steps, 1):
        for p, admin, key_dir, key_name in agents:   # one pod after the other, as kubelets do
            kubelet_secret(key_dir, {key_name: "\n".join(keys) + "\n"}, mounted_mode(pod))
            wait_until(lambda: p.log().count("fleet_key_file changed") == n, timeout=10, what=f"step {n} read")
        time.sleep(0.3)   # more than fleet_dead_after_ms: a member not heard since would be gone
        assert all_hear(), f"step {n}"
        assert [unauthenticated(a) for _, a, _, _ in agents] == [0, 0], f"step {n}"

    # a step skipped: the first agent on a key the second does not hold
    p, admin, key_dir, key_name = agents[0]
    kubelet_secret(key_dir, {key_name: secrets.token_hex(32) + "\n"}, mounted_mode(pod))
    wait_until(lambda: unauthenticated(agents[1][1]) > 0, timeout=10, what="the second agent drops the first's reports")


def test_a_new_config_rolls_the_pods_a_new_key_does_not(key_file, tmp_path):
    """The pod template carries agent.toml's checksum (the agent reads it at
    start: a change must roll the pods) and nothing of the key (a rotation
    reaches running pods in place, without a restart)."""
    checksum = lambda docs: one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/huntlb-config"]
    base = render(key_file)
    assert checksum(render(key_file, "agent.workers=16")) != checksum(base)
    other = tmp_path / "fleet.key"
    other.write_text(secrets.token_hex(32) + "\n")
    rotated = render(other)
    assert checksum(rotated) == checksum(base)
    assert one(rotated, "Secret")["data"] != one(base, "Secret")["data"]


def test_the_networkpolicy_admits_every_caller_the_app_had(key_file):
    """On (networkPolicy.enabled), the policy is never narrower than what
    reached the app before: a caller no value names still reaches the serving
    port and every other port of the pod (the app's own metrics, say); only
    the agent's two new ports are held, the fleet's UDP to members and
    /metrics to Prometheus. servingFrom narrows the serving port when the
    user says so, and otherPortsOpen=false leaves the other ports to their
    own policies."""
    docs = render(key_file, "networkPolicy.enabled=true")
    pod, np = Pod(docs), one(docs, "NetworkPolicy")
    listen, admin, fleet = (port_of(pod.config[k]) for k in ("listen", "admin", "fleet_listen"))
    member = Caller(pod.labels, same_namespace=True)
    for port, proto in [(listen, "TCP"), (9090, "TCP"), (1, "TCP"), (65535, "TCP"), (53, "UDP"), (fleet + 1, "UDP")]:
        assert admits(np, pod, STRANGER, port, proto), (port, proto)
    assert not admits(np, pod, STRANGER, fleet, "UDP") and not admits(np, pod, STRANGER, admin, "TCP")
    assert admits(np, pod, member, fleet, "UDP") and admits(np, pod, PROMETHEUS, admin, "TCP")
    assert disagreements(render(key_file, *OPT_INS)) == []

    narrowed = render(key_file, "networkPolicy.enabled=true", "networkPolicy.otherPortsOpen=false",
                      "networkPolicy.servingFrom[0].namespaceSelector.matchLabels.team=fronts")
    np = one(narrowed, "NetworkPolicy")
    front = Caller({"app": "gateway"}, {"team": "fronts"})
    assert admits(np, pod, front, listen, "TCP") and admits(np, pod, member, listen, "TCP")
    assert not admits(np, pod, STRANGER, listen, "TCP") and not admits(np, pod, STRANGER, 9090, "TCP")


def test_the_pod_drains(rendered):
    """preStop and grace for the agent's drain: the agent has no preStop
    (SIGTERM starts its drain at once: health 503, offers refused), each app
    container waits appPreStopSeconds (at least drain_grace_ms) unless it has
    a preStop of its own, and the pod's grace is above drain_timeout_ms."""
    pod = Pod(rendered)
    assert "lifecycle" not in pod.agent
    app = next(c for c in pod.spec["containers"] if c["name"] == "app")
    assert app["lifecycle"]["preStop"] == {"sleep": {"seconds": 10}}
    assert pod.config["drain_grace_ms"] <= 10_000
    assert pod.spec["terminationGracePeriodSeconds"] == pod.config["drain_timeout_ms"] // 1000 + 15


def test_an_apps_own_prestop_is_kept(key_file, tmp_path):
    values = yaml.safe_load(EXAMPLE.read_text())
    values["workload"]["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["/bin/drain"]}}}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    app = next(c for c in Pod(render(key_file, values=path)).spec["containers"] if c["name"] == "app")
    assert app["lifecycle"] == {"preStop": {"exec": {"command": ["/bin/drain"]}}}


def expand(arg: str, pod_ip: str) -> str:
    return re.sub(r"\$\((\w+)\)", lambda m: {"POD_IP": pod_ip, "POD_NAME": "shop-0"}[m[1]], arg)


def host_port(addr: str) -> tuple[ipaddress._BaseAddress, int]:
    """host:port as the agent reads a socket address: an IPv6 host bracketed."""
    m = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:(\d+)|([0-9.]+):(\d+)", addr)
    assert m, f"{addr!r} is not ip:port ([ip]:port for IPv6)"
    return ipaddress.ip_address(m[1] or m[3]), int(m[2] or m[4])


@pytest.mark.parametrize("family,pod_ip,bind", [("IPv4", "10.244.1.7", "0.0.0.0"), ("IPv6", "fd00:10:244:1::7", "::")])
def test_addresses_are_formatted_for_the_pods_family(key_file, family, pod_ip, bind):
    """fleet_advertise is the pod's IP alone once Kubernetes expands $(POD_IP)
    (the agent adds listen's port, bracketing an IPv6 IP: tests/test_ipv6.py),
    and the agent binds IPv6's unspecified address; IPv4 as before."""
    pod = Pod(render(key_file, f"ipFamily={family}"))
    adv = expand(pod.agent["args"][[a.split("=")[0] for a in pod.agent["args"]].index("--fleet-advertise")].split("=", 1)[1], pod_ip)
    assert ipaddress.ip_address(adv) == ipaddress.ip_address(pod_ip), adv
    for key in ("listen", "admin", "fleet_listen"):
        assert host_port(pod.config[key])[0] == ipaddress.ip_address(bind), (key, pod.config[key])
    assert host_port(pod.config["fleet_peers"].replace("shop-fleet", "10.0.0.1"))[1] == 9700


BAD_VALUES = [
    # by values.schema.json (Helm names the path: /agent/workers)
    (["agent.workers=many"], "agent.workers"),
    (["agent.port=70000"], "agent.port"),
    (["networkPolicies.enabled=true"], "networkPolicies"),       # a misspelt key is refused, not ignored
    (["fronts.mode=offer"], "fronts.mode"),
    (["ipFamily=IPv5"], "ipFamily"),
    (["workload.appPreStopSeconds=1"], "workload.appPreStopSeconds"),
    (["fronts.envoyGateway.enabled=true"], "fronts.envoyGateway.httpRoute.parentRefs"),
    (["fleetKey.existingSecret=mine"], "not both"),
]


@pytest.mark.parametrize("sets,key", BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_bad_values_are_refused_naming_the_key(key_file, sets, key):
    p = template(key_file, *sets, check=False)
    assert p.returncode != 0 and (key in p.stderr or "/" + key.replace(".", "/") in p.stderr), p.stderr


def test_a_missing_key_or_app_is_named():
    p = template(None, check=False)
    assert p.returncode != 0 and "fleetKey" in p.stderr and "openssl rand -hex 32" in p.stderr, p.stderr
    p = template(None, "fleetKey.existingSecret=mine", values=None, check=False)
    assert p.returncode != 0 and "workload.containers" in p.stderr, p.stderr


def test_an_existing_secret_is_mounted_not_made():
    docs = render(None, "fleetKey.existingSecret=shop-key", "fleetKey.secretKey=hunt.key")
    assert not [d for d in docs if d["kind"] == "Secret"]
    vol = Pod(docs).volumes["huntlb-fleet-key"]["secret"]
    assert vol["secretName"] == "shop-key" and vol["items"] == [{"key": "hunt.key", "path": "fleet.key"}]


FRONTS = ["fronts.envoyGateway.enabled=true", "fronts.envoyGateway.httpRoute.parentRefs[0].name=eg",
          "fronts.haproxyIngress.enabled=true"]


def test_plain_fronts_are_the_default(key_file, validator):
    """The fronts a user already runs, as they are: Envoy Gateway's
    least-request with the agents' health check, HAProxy Ingress's leastconn
    with the same check, to the Service the agents serve; no hunt header, the
    agents told fleet_pass_plain. The HTTPRoute and Ingress against their
    schemas (Envoy Gateway's own kind has none here: read field by field)."""
    docs = render(key_file, *FRONTS)
    pod = Pod(docs)
    assert pod.config["fleet_pass_plain"] is True
    route, btp, ing = one(docs, "HTTPRoute"), one(docs, "BackendTrafficPolicy"), one(docs, "Ingress")
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": "shop", "port": 8080}]
    assert "filters" not in route["spec"]["rules"][0]
    assert btp["spec"]["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route["metadata"]["name"]}]
    assert btp["spec"]["loadBalancer"] == {"type": "LeastRequest"}
    assert btp["spec"]["healthCheck"]["active"]["http"]["path"] == pod.config["health_path"]
    a = ing["metadata"]["annotations"]
    assert a["haproxy.org/load-balance"] == "leastconn" and a["haproxy.org/check-http"] == pod.config["health_path"]
    assert "haproxy.org/backend-config-snippet" not in a
    assert ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"] == {"name": "shop", "port": {"name": "http"}}
    assert "hunt" not in yaml.safe_dump([route, btp, ing]).replace(".hunt/health", "").replace("huntlb", "")
    rc, out = validator(for_the_api([route, ing]))
    assert rc == 0, out


def test_hunt_pass_fronts_are_the_option(key_file):
    """fronts.mode=hunt-pass: the agents without fleet_pass_plain, the
    HTTPRoute setting hunt-pass (each gateway pod named by its own address),
    the Ingress's snippet the lines of the shipped tier snippet."""
    docs = render(key_file, *FRONTS, "fronts.mode=hunt-pass")
    assert "fleet_pass_plain" not in Pod(docs).config
    f = one(docs, "HTTPRoute")["spec"]["rules"][0]["filters"]
    assert f == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "hunt-pass", "value": "%DOWNSTREAM_LOCAL_ADDRESS%"}]}}]
    snippet = one(docs, "Ingress")["metadata"]["annotations"]["haproxy.org/backend-config-snippet"].splitlines()
    tier = [re.sub(r"\s+#.*$", "", l).strip() for l in (ROOT / "haproxy-lua/examples/tier-snippet.cfg").read_text().splitlines()]
    assert snippet and all(l in tier for l in snippet), snippet


VENDOR = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: shop, labels: {app: shop}}
spec:
  replicas: 2
  selector: {matchLabels: {app: shop}}
  template:
    metadata: {labels: {app: shop}}
    spec:
      containers:
      - name: app
        image: vendor/shop:1.0
        args: [--listen=127.0.0.1:9000]
---
apiVersion: v1
kind: Service
metadata: {name: shop}
spec:
  selector: {app: shop}
  ports: [{name: http, port: 8080, targetPort: 8080}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: shop-settings}
data: {greeting: hello}
"""


def test_the_post_renderer_puts_the_agent_into_another_charts_deployment(key_file):
    """An app another chart installs (its manifests as Helm pipes them to a
    post-renderer): post-renderer/inject adds the agent as the chart's own
    Deployment has it, and with the huntlb release's parts (workload off,
    opt-ins on) every document agrees, as the chart's own do; the app's
    container and other documents are left as they were."""
    env = {**os.environ, "HUNTLB_RELEASE": RELEASE, "HUNTLB_NAMESPACE": NAMESPACE, "HELM": helm(), "KUBECTL": kubectl()}
    p = subprocess.run([str(CHART / "post-renderer" / "inject"), "shop", "shop", "app"], input=VENDOR, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = [d for d in yaml.safe_load_all(p.stdout) if d]
    fleet = render(key_file, "workload.enabled=false", *OPT_INS)
    assert not [d for d in fleet if d["kind"] == "Deployment" or d["metadata"]["name"] == "shop"]
    assert disagreements(out + fleet) == []
    pod = Pod(out + fleet)
    ours = Pod(render(key_file))
    assert pod.agent == ours.agent and pod.volumes == ours.volumes
    app = next(c for c in pod.spec["containers"] if c["name"] == "app")
    assert app == {"name": "app", "image": "vendor/shop:1.0", "args": ["--listen=127.0.0.1:9000"],
                   "lifecycle": {"preStop": {"sleep": {"seconds": 10}}}}
    assert one(out, "ConfigMap") == yaml.safe_load(VENDOR.split("---")[2])
    assert one(out, "Service")["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "huntlb"}]


def test_the_docs_snippets_are_the_files():
    """Every YAML block of docs/kubernetes.md is lines of a file of the chart,
    as written there (indentation aside): what the page tells a user to write
    is what these tests render and run."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    blocks = [textwrap.dedent(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    assert len(blocks) >= 3
    files = [f.read_text().splitlines() for f in CHART.rglob("*.yaml")]

    def found(block: str) -> bool:
        want = textwrap.dedent(block).splitlines()
        return any(textwrap.dedent("\n".join(lines[i:i + len(want)])).splitlines() == want
                   for lines in files for i in range(len(lines) - len(want) + 1))
    missing = [b for b in blocks if not found(b)]
    assert not missing, f"not in charts/huntlb: {missing}"


def as_template(words: list[str], key: Path) -> tuple[dict, list[str]]:
    """A doc's `helm install` as `helm template` (the same chart, values and
    flags; no cluster), run from the repository, the key file the test's."""
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    assert words[:2] == ["helm", "install"], words
    argv = [helm(), "template", *[w.replace("fleetKey.value=fleet.key", f"fleetKey.value={key}") for w in words[2:]]]
    return env, argv


def test_the_docs_install_command_renders_the_tested_fleet(key_file):
    """docs/kubernetes.md's install command, pasted: it renders what these
    tests check (the example's fleet, its parts in agreement)."""
    [cmd] = doc_commands("helm install shop charts/huntlb")
    env, argv = as_template(cmd, key_file)
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert p.returncode == 0, p.stderr
    docs = [d for d in yaml.safe_load_all(p.stdout) if d]
    assert docs == render(key_file)
    assert disagreements(docs) == []


def test_the_docs_post_renderer_commands_inject_the_agent(key_file, tmp_path):
    """docs/kubernetes.md's two commands for an app another chart installs,
    pasted (the vendor's chart a local one holding VENDOR): the huntlb
    release's parts and the app chart's post-rendered Deployment agree."""
    vendor = tmp_path / "shop"
    (vendor / "templates").mkdir(parents=True)
    (vendor / "Chart.yaml").write_text("apiVersion: v2\nname: shop\nversion: 1.0.0\n")
    (vendor / "templates" / "all.yaml").write_text(VENDOR)
    rendered_docs = []
    for cmd in doc_commands("--post-renderer charts/huntlb/post-renderer/inject"):
        env, argv = as_template(cmd, key_file)
        argv = [str(vendor) if w == "vendor/shop" else w for w in argv]
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "KUBECTL": kubectl(), "HELM": helm(), **env})
        assert p.returncode == 0, p.stderr
        rendered_docs += [d for d in yaml.safe_load_all(p.stdout) if d]
    assert disagreements(rendered_docs) == []
    pod = Pod(rendered_docs)
    assert pod.labels["huntlb.io/fleet"] == "shop-huntlb"
    assert pod.volumes["huntlb-fleet-key"]["secret"]["secretName"] == one(rendered_docs, "Secret")["metadata"]["name"]


def test_extra_config_from_a_values_file_is_taken_by_the_agent(procs, addrs, key_file, tmp_path):
    """agent.extraConfig in a values file, where YAML makes every number a
    float: a whole number is written as a TOML integer (600000.0 the agent
    refuses, naming the key), a string as it is; the agent starts on the
    rendered file and serves its /metrics."""
    values = yaml.safe_load(EXAMPLE.read_text())
    values["agent"]["extraConfig"] = {"app_timeout_ms": 600000, "app_stall_ms": 0, "load": "llm"}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    pod = Pod(render(key_file, values=path))
    assert {k: (pod.file[k], type(pod.file[k])) for k in values["agent"]["extraConfig"]} == {
        "app_timeout_ms": (600000, int), "app_stall_ms": (0, int), "load": ("llm", str)}
    p, _, admin, _, _ = start_pod_agent(procs, pod, addrs.host(), tmp_path, [secrets.token_hex(32)])
    wait_http(admin, "/metrics", proc=p, want=200)
    assert "invalid type" not in p.log(), p.log()
