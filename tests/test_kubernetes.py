"""packaging/kubernetes: the agent as a sidecar (a kustomize Component) and an
example app that includes it, checked without a cluster. Rendered by kubectl's
own kustomize; every document against its published schema, unknown fields
included (packaging/validate); the ports, paths and names that must agree
across the documents held together (a planted mismatch of each kind fails);
and the ConfigMap's config taken by the real agent, started with the
container's own args, its key laid out and rotated as the kubelet writes a
Secret. No cluster runs here: nothing is scheduled, no kubelet probes, no
NetworkPolicy is enforced, no DNS answers for the headless Service
(docs/kubernetes.md says so too)."""

from __future__ import annotations

import copy
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
import yaml

from harness import ROOT, TRIXIE, binary, metrics, request, wait_http, wait_until

KUBE = ROOT / "packaging" / "kubernetes"
EXAMPLE = "example"
AGENT = "huntlb-agent"              # the sidecar's container name
DEFAULTS = {"listen": "127.0.0.1:8080", "admin": "127.0.0.1:9901", "app": "127.0.0.1:9000", "health_path": "/.hunt/health"}   # docs/agent.md


def kubectl() -> str:
    """A kubectl whose kustomize renders Components (v5: kubectl 1.27 and
    later): the one on PATH, else trixie's, which make setup installs."""
    seen = []
    for k in (shutil.which("kubectl"), str(TRIXIE / "usr/bin/kubectl")):
        if not k or not os.access(k, os.X_OK):
            continue
        out = subprocess.run([k, "version", "--client"], capture_output=True, text=True, timeout=30).stdout
        m = re.search(r"Kustomize Version: v(\d+)", out)
        if m and int(m[1]) >= 5:
            return k
        seen.append(f"{k} ({out.splitlines()[0] if out else 'no version'})")
    pytest.skip("no kubectl with kustomize v5 (make setup installs trixie's into "
                f"{TRIXIE}; bookworm's kubernetes-client is kubectl 1.20, whose kustomize v2 has no Components)"
                + (f"; found {', '.join(seen)}" if seen else ""))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> list[dict]:
    """`kubectl kustomize packaging/kubernetes/example`, as a user renders it
    once they have made fleet.key (a copy of the tree, with a fresh key)."""
    k = kubectl()
    tree = tmp_path_factory.mktemp("kube") / "kubernetes"
    shutil.copytree(KUBE, tree, ignore=shutil.ignore_patterns("fleet.key"))
    (tree / EXAMPLE / "fleet.key").write_text(secrets.token_hex(32) + "\n")
    p = subprocess.run([k, "kustomize", str(tree / EXAMPLE)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def for_the_api(docs: list[dict]) -> list[dict]:
    """The documents as the API server reads them: kustomize folds a Secret's
    base64 over lines, which Go's decoder skips (encoding/base64 ignores \\r
    and \\n) and the schema's "byte" format does not."""
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
        self.config = {**DEFAULTS, **self.file, **{k: v for k, v in self.args.items() if k != "config"}}

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

    # the NetworkPolicy: members on the fleet ports, fronts on listen, Prometheus on admin, nothing on the app's port
    np = one(docs, "NetworkPolicy")
    if not pod.selects(np["spec"]["podSelector"].get("matchLabels", {})):
        bad.append("the NetworkPolicy does not select the pod")
    rules = np["spec"].get("ingress", [])

    def admitted(pred) -> set:
        return {(p["port"], p.get("protocol", "TCP")) for r in rules if any(pred(f) for f in r.get("from", [])) for p in r.get("ports", [])}
    members = admitted(lambda f: "podSelector" in f and "namespaceSelector" not in f and pod.selects(f["podSelector"].get("matchLabels", {})))
    if members != {(fleet, "UDP"), (peer_port, "TCP")}:
        bad.append(f"the NetworkPolicy admits {sorted(members)} from members, not UDP {fleet} and TCP {peer_port}")
    others = admitted(lambda f: "namespaceSelector" in f)
    if (listen, "TCP") not in others or (admin, "TCP") not in others:
        bad.append(f"the NetworkPolicy admits {sorted(others)} from other namespaces: the fronts need {listen}, Prometheus {admin}")
    if any(port_of(c["app"]) == p for p, _ in members | others):
        bad.append("the NetworkPolicy admits the app's own port")

    # the PodMonitor scrapes admin's /metrics
    pm = one(docs, "PodMonitor")
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
        if not secret or key_name not in secret[0].get("data", {}):
            bad.append(f"no Secret {vol['secret']['secretName']} with {key_name}")
        ctx = {**pod.spec.get("securityContext", {}), **pod.agent.get("securityContext", {})}
        mode = vol["secret"].get("defaultMode", 0o644)
        fs_group = pod.spec.get("securityContext", {}).get("fsGroup")
        if fs_group is not None:
            mode |= 0o440   # the kubelet: group read for fsGroup, whatever defaultMode says
        if fs_group is None and ctx.get("runAsUser", 0) != 0 and not mode & 0o004:
            bad.append("a non-root agent cannot read the key: the pod has no fsGroup and the file is root's")
        if mode & 0o066 and c.get("fleet_key_readable_by_others") is not True:
            bad.append(f"the key is mounted {mode:04o}, which the agent refuses without fleet_key_readable_by_others = true")

    # the pod outlives the agent's drain
    if pod.spec.get("terminationGracePeriodSeconds", 30) * 1000 <= int(c.get("drain_timeout_ms", 30000)):
        bad.append("terminationGracePeriodSeconds is not above drain_timeout_ms: the kubelet kills a draining agent")
    return bad


# --- rendering and schemas ----------------------------------------------------


def test_the_example_renders_every_part(rendered):
    """The Component adds to the example's Deployment and Service what the
    agent needs: its config, the headless Service, the NetworkPolicy, the
    PodMonitor; the overlay brings the Secret."""
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in rendered)
    cm = one(rendered, "ConfigMap")["metadata"]["name"]
    assert re.fullmatch(r"huntlb-agent-[a-z0-9]{10}", cm), cm   # hashed: a new config rolls the pods
    assert kinds == sorted([f"ConfigMap/{cm}", "Secret/huntlb-fleet-key", "Service/huntlb-fleet", "Service/shop",
                            "Deployment/shop", "NetworkPolicy/huntlb-agent", "PodMonitor/huntlb-agent"]), kinds
    assert {d["metadata"].get("namespace") for d in rendered} == {"shop"}
    pod = Pod(rendered)
    assert [c["name"] for c in pod.spec["containers"]] == [AGENT, "app"]
    assert pod.volumes["huntlb-config"]["configMap"]["name"] == cm


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
    doc = copy.deepcopy(one(for_the_api(rendered), kind, lambda d: d["metadata"]["name"] != "huntlb-fleet"))
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
    ("fleet-peers-name", _in_toml('fleet_peers = "huntlb-fleet:9700"', 'fleet_peers = "huntlb-peers:9700"'), "not a headless Service"),
    ("policy-udp-port", _in("NetworkPolicy", "spec.ingress.0.ports.0.port", 9701), "from members"),
    ("policy-fronts-port", _in("NetworkPolicy", "spec.ingress.1.ports.0.port", 9000), "the fronts need 8080"),
    ("podmonitor-port", _in("PodMonitor", "spec.podMetricsEndpoints.0.port", "huntlb"), "the PodMonitor scrapes"),
    ("headless-drops-not-ready", _in("Service", "spec.publishNotReadyAddresses", False, lambda d: d["metadata"]["name"] == "huntlb-fleet"), "not-ready"),
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


def test_the_docs_snippets_are_the_files():
    """Every YAML block of docs/kubernetes.md is lines of a file under
    packaging/kubernetes, as written there (indentation aside): what the page
    tells a user to write is what these tests render and run."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    blocks = [textwrap.dedent(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    assert len(blocks) >= 4
    files = [f.read_text().splitlines() for f in KUBE.rglob("*.yaml")]

    def found(block: str) -> bool:
        want = textwrap.dedent(block).splitlines()
        return any(textwrap.dedent("\n".join(lines[i:i + len(want)])).splitlines() == want
                   for lines in files for i in range(len(lines) - len(want) + 1))
    missing = [b for b in blocks if not found(b)]
    assert not missing, f"not in packaging/kubernetes: {missing}"
