"""A real Kubernetes cluster here (harness/k8scluster.py, docs/kubernetes.md
"A real cluster here"): started, used, torn down with nothing left.

- the cluster: 3 nodes Ready, CoreDNS answering for a Service's name, a pod
  of the locally built agent image (make image), pushed to the cluster's
  registry and pulled from it by the node, Running and answering
  `/metrics` through a Service, from another node, by its ClusterIP and by
  its name; then `down` leaves no container, network, state, Docker bridge or
  iptables rule of the cluster's;
- who reaches it: anonymous requests and a certificate of another CA are
  refused by the apiserver, node 1's kubelet cannot label node 2, etcd is not
  reachable outside node 0;
- a start killed midway (SIGKILL, nodes up, control plane not): the next
  start removes what it left and comes up clean.

Needs Docker and root, builds Kubernetes the first time (scripts/k8s-build.sh:
about 30 min on 2 cores, cached after): `make test-k8s`, never part of
`make test` (HUNTLB_K8S_TEST=1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import ROOT
from harness import k8scluster as k8s
from harness import k8sevents
from harness.k8sfleet import HELM, Fleet, deployment, doc_commands

pytestmark = pytest.mark.skipif(os.environ.get("HUNTLB_K8S_TEST") != "1",
                                reason="a real cluster needs Docker, root and the Kubernetes build: make test-k8s")


def agent_manifest(image: str) -> str:
    """One agent pod, off the node the test asks from (the Service's answer
    crosses nodes), and a Service over its admin port: JSON documents, which
    kubectl reads as YAML (as harness.k8sfleet's manifests)."""
    off_node_1 = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["huntlb-k8s-1"]}]}]}}}
    agent = {"name": "agent", "image": image,
             "imagePullPolicy": "Always",  # from the cluster's registry, on whichever node
             "args": ["--listen", "0.0.0.0:8080", "--admin", "0.0.0.0:9901", "--app", "127.0.0.1:9000", "--id", "$(POD_NAME)"],
             "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
             "ports": [{"name": "admin", "containerPort": 9901}],
             "readinessProbe": {"httpGet": {"path": "/metrics", "port": "admin"}, "periodSeconds": 1}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "agent"},
               "spec": {"selector": {"app": "agent"}, "ports": [{"name": "admin", "port": 9901, "targetPort": "admin"}]}}
    docs = [deployment("agent", {"app": "agent"}, {"affinity": off_node_1, "containers": [agent]}), service]
    return "\n---\n".join(json.dumps(d) for d in docs)


def bridge() -> str:
    """The Linux bridge Docker made for the cluster's network."""
    return "br-" + subprocess.run(["docker", "network", "inspect", "-f", "{{.Id}}", k8s.NETWORK],
                                  capture_output=True, text=True, check=True).stdout.strip()[:12]


def machine_state() -> dict:
    """What the cluster could leave on this machine: its containers and
    networks, interfaces of the machine's own namespace, the iptables rules
    naming its subnet, its state folder."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    return {"left": k8s.leftovers() if _docker_up() else {},
            "links": sorted(line.split(": ")[1].split("@")[0] for line in links.splitlines()),
            "rules": [r for r in rules.splitlines() if "10.78." in r],
            "state": k8s.STATE.exists()}


def _docker_up() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.fixture
def before():
    k8s.down()  # a killed earlier run's, if any (found by label)
    return machine_state()


def assert_clean(before: dict, bridge: str) -> None:
    after = machine_state()
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert bridge not in rules, [r for r in rules.splitlines() if bridge in r]
    assert not any(after["left"].values()) if after["left"] else True, after["left"]
    # (other work's containers may come and go meanwhile: only the cluster's
    # bridge, whose veths go with it, is checked)
    assert bridge not in after["links"], after["links"]
    assert after["rules"] == [], after["rules"]
    assert not after["state"], k8s.STATE


def attacker(c: k8s.Cluster, tmp: Path) -> None:
    """Who reaches the apiserver, and with what: anonymous requests and a
    certificate of another CA are refused, a kubelet's certificate cannot
    touch another node, etcd is not reachable outside node 0."""
    api = f"https://{k8s.node_ip(0)}:6443/api/v1/nodes"
    ca = str(k8s.STATE / "pki" / "ca.crt")

    def status(*extra: str) -> str:
        return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                               "--cacert", ca, *extra, api], capture_output=True, text=True).stdout

    assert status() == "401"  # anonymous
    # a certificate naming system:masters, signed by a CA of the attacker's own
    ssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subprocess.run([*ssl, "-subj", "/O=system:masters/CN=mallory", "-keyout", str(tmp / "m.key"),
                    "-out", str(tmp / "m.crt")], check=True, capture_output=True)
    assert status("--cert", str(tmp / "m.crt"), "--key", str(tmp / "m.key")) == "401"
    assert status("--cert", ca.replace("ca.crt", "admin.crt"), "--key", ca.replace("ca.crt", "admin.key")) == "200"
    # node 1's kubelet labelling node 2: the Node authorizer and NodeRestriction refuse
    kc = tmp / "kubelet-1.kubeconfig"
    kc.write_text(k8s.kubeconfig("kubelet-1", f"https://{k8s.node_ip(0)}:6443", str(k8s.STATE / "pki")))
    r = subprocess.run([str(k8s.BIN / "kubectl"), "--kubeconfig", str(kc), "label", "node", "huntlb-k8s-2", "x=y"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "forbidden" in r.stderr.lower(), (r.stdout, r.stderr)
    # etcd: node 0's loopback only
    r = subprocess.run(["curl", "-s", "--max-time", "3", f"http://{k8s.node_ip(0)}:2379/version"], capture_output=True)
    assert r.returncode == 7, r  # connection refused
    out = c.docker_exec(1, "curl", "-s", "--max-time", "3", f"http://{k8s.node_ip(0)}:2379/version", check=False)
    assert "etcdserver" not in out


def test_cluster_three_nodes_dns_and_a_service(before, tmp_path):
    t0 = time.monotonic()
    try:
        c = k8s.up(3)
        up_s = time.monotonic() - t0
        br = bridge()
        assert k8s._ready_nodes(c) == {"huntlb-k8s-0", "huntlb-k8s-1", "huntlb-k8s-2"}
        image = c.push(k8s.AGENT_IMAGE)
        assert image == "registry.k8s.local:5000/huntlb/agent:dev", image
        c.kubectl("apply", "-f", "-", input=agent_manifest(image).encode())
        c.kubectl("rollout", "status", "deploy/agent", "--timeout=120s", timeout=130)
        pods = json.loads(c.kubectl("get", "pods", "-l", "app=agent", "-o", "json"))["items"]
        assert len(pods) == 1 and pods[0]["status"]["phase"] == "Running", pods
        assert pods[0]["spec"]["nodeName"] != "huntlb-k8s-1"
        ip = c.kubectl("get", "svc", "agent", "-o", "jsonpath={.spec.clusterIP}")
        assert ip.startswith("10.78.1"), ip  # in the Services' range, 10.78.128.0/20
        # from node 1 (no agent there): kube-proxy's rules to the pod on
        # another node (each kube-proxy writes them within a second or so
        # of the pod's readiness: asked again for at most 20 s)
        out = k8s._wait("the Service from node 1", lambda: c.docker_exec(
            1, "curl", "-sf", "--max-time", "5", f"http://{ip}:9901/metrics", check=False), 20)
        assert "huntlb_" in out, out[:500]
        # CoreDNS: the Service's name, through the DNS Service's own ClusterIP
        host = c.docker_exec(1, "host", "agent.default.svc.cluster.local", k8s.DNS_IP)
        assert f"has address {ip}" in host, host
        out = c.docker_exec(1, "curl", "-sf", "--max-time", "5", "--resolve", f"agent.default.svc.cluster.local:9901:{ip}",
                            "http://agent.default.svc.cluster.local:9901/metrics")
        assert "huntlb_" in out
        attacker(c, tmp_path)
        print(f"\ncluster up in {up_s:.0f} s, the whole test {time.monotonic() - t0:.0f} s", file=sys.stderr)
    finally:
        left = k8s.down()
    assert not any(left.values()), left
    assert_clean(before, br)


def test_killed_start_leaves_the_next_start_clean(before):
    """SIGKILL to a start once its nodes run (the apiserver is not up yet or
    just is): the next start finds the leftovers by label, removes them, and
    comes up with a control plane answering."""
    p = subprocess.Popen([sys.executable, "-m", "harness.k8scluster", "up", "--stage", "control-plane"], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(k8s.leftovers()["containers"]) < 3 and p.poll() is None:
            time.sleep(0.2)
        assert p.poll() is None, p.stderr.read().decode()
        os.killpg(p.pid, signal.SIGKILL)
    finally:
        p.wait(timeout=30)
    assert k8s.leftovers()["containers"], "the killed start left nothing to clean: killed too early"
    try:
        c = k8s.up(3, stage="control-plane")
        br = bridge()
        assert c.kubectl("get", "--raw", "/healthz") == "ok"
        assert len(k8s.leftovers()["containers"]) == 3
    finally:
        left = k8s.down()
    assert not any(left.values()), left
    assert_clean(before, br)


def test_failed_start_tears_down_what_it_made(before, monkeypatch):
    """A start that fails midway (here the registry, after the nodes and the
    control plane run) removes what it made before raising."""
    seen = {}

    def broken(c):
        seen["bridge"] = bridge()
        seen["containers"] = len(k8s.leftovers()["containers"])
        raise RuntimeError("injected: the registry did not start")

    monkeypatch.setattr(k8s, "_start_registry", broken)
    with pytest.raises(RuntimeError, match="injected"):
        k8s.up(3)
    assert seen["containers"] == 3, seen
    assert_clean(before, seen["bridge"])


def test_the_chart_installs_a_fleet_on_the_cluster(before, tmp_path):
    """docs/kubernetes.md's key and install commands, pasted (the images
    under their plain names, which the nodes' containerd takes from the
    cluster's registry), on the real cluster: 3 pods of app and agent Running
    on the 3 nodes, each agent hearing the other two through the headless
    Service (CoreDNS) under the Secret's key, requests through the Service
    answered."""
    if not HELM.exists():
        pytest.skip("no helm: make setup-k8s")
    try:
        c = k8s.up(3)
        c.push(f"huntlb/agent:{chart_version()}")
        c.push("huntlb/app:dev")
        f = Fleet(c, tmp_path)
        for words in doc_commands("openssl rand -hex 32 > fleet.key") + doc_commands("helm install shop charts/huntlb"):
            f.run_doc(words)
        c.kubectl("-n", "shop", "rollout", "status", "deploy/shop", "--timeout=180s", timeout=190)
        pods = json.loads(c.kubectl("-n", "shop", "get", "pods", "-o", "json"))["items"]
        assert len(pods) == 3 and all(p["status"]["phase"] == "Running" for p in pods)
        ips = [p["status"]["podIP"] for p in pods]

        def peers(ip: str) -> int:
            out = c.docker_exec(1, "curl", "-sf", "--max-time", "5", f"http://{ip}:9901/metrics", check=False)
            return next((int(float(line.split()[1])) for line in out.splitlines() if line.startswith("huntlb_fleet_peers ")), -1)
        k8s._wait("each agent hearing the other two", lambda: all(peers(ip) == 2 for ip in ips), 30)
        svc = c.kubectl("-n", "shop", "get", "svc", "shop", "-o", "jsonpath={.spec.clusterIP}")
        codes = [c.docker_exec(1, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                               f"http://{svc}:8080/job{i}", check=False) for i in range(20)]
        assert codes == ["200"] * 20, codes
    finally:
        left = k8s.down()
    assert not any(left.values()), left


def test_every_rollout_event_under_load_through_both_proxies(before, tmp_path):
    """The fleet of docs/kubernetes.md's install with the operator's values
    (12 apps), 4 Envoy and 4 HAProxy front pods (the proxies' own
    least-request, fleet_pass_plain) and a load pod sending 50 req/s to each
    proxy's fronts, every path unique; through each event (harness/k8sevents.py:
    steady, rollout restart, a pod deleted, a node drained, 12 -> 16 -> 12,
    the key rotated by helm upgrade, two fronts restarted): 0 client errors,
    nothing processed twice, every answered request seen at an app; the tier
    forwards at 8 fronts; scaled out, every agent knows the 16 within
    seconds; through the rotation no member leaves any agent's view and no
    report is refused."""
    if not HELM.exists():
        pytest.skip("no helm: make setup-k8s")
    try:
        c = k8s.up(3)
        f = Fleet(c, tmp_path)
        f.install(apps=12, fronts=4)
        rows = {r["event"]: r for r in k8sevents.run(f, list(k8sevents.EVENTS), rate=50)}
    finally:
        left = k8s.down()
    assert not any(left.values()), left
    for name, r in rows.items():
        assert r["error"] is None and not r["outlasted_load"], (name, r["error"], r["took_s"])
        for proxy, t in r["proxies"].items():
            assert t["sent"] > 0 and t["errors"] == 0, (name, proxy, t["errors"], t["error_statuses"], t["failed_arrived_at"])
            assert t["twice"] == [] and t["answered_not_arrived"] == [], (name, proxy, t["twice"][:5], t["answered_not_arrived"][:5])
    assert rows["steady"]["found"]["forwards_sent"] > 0
    scale = rows["scale"]
    assert len(scale["found"]["new"]) == 4 and scale["found"]["members_s"] < 30, scale["found"]
    for proxy, t in scale["proxies"].items():  # each new pod served both proxies' requests
        assert set(scale["found"]["new"]) <= set(t["pods"]), (proxy, scale["found"]["new"], t["pods"])
    rot = rows["rotate"]["found"]
    assert rot["views"] > 10 and rot["view_short"] == 0 and rot["unauthenticated"] == 0, rot
    drain = rows["drain"]["found"]
    assert drain["evicted"] > 0, drain


def chart_version() -> str:
    for line in (ROOT / "charts/huntlb/Chart.yaml").read_text().splitlines():
        if line.startswith("appVersion:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise AssertionError("charts/huntlb/Chart.yaml: no appVersion")


def _llmload_n(n: int, rate: float, seed: int, *flags: str) -> list[str]:
    """huntlb-llmload's arguments for exactly its first n requests (the
    duration ends just past the n-th offset of its schedule, read by --dry-run)."""
    args = ["--rate", str(rate), "--seed", str(seed), *flags]
    sched = subprocess.run([str(ROOT / "target/release/huntlb-llmload"), "--target", "127.0.0.1:9", "--duration", "60", *args,
                            "--dry-run"], capture_output=True, text=True, check=True, timeout=30).stdout.split("\n")
    offsets = [float(line.split()[0]) for line in sched if line.strip()]
    return [*args, "--duration", f"{(offsets[n - 1] + offsets[n]) / 2:.6f}"]


def test_lwepps_pick_of_a_full_server_is_passed_on_and_clients_cannot_pick(before, tmp_path):
    """GIE's lightweight picker (`make lwepp`) on the cluster as
    bench/k8s_lwepp.py installs it (an Envoy and lwepp per gateway pod, over
    the LLM emulator with the chart's agents): a client's
    `x-gateway-destination-endpoint` and `test-epp-endpoint-selection`
    naming one engine steer nothing (the gateway drops them: 8 requests
    through the picker alone, round robin, one at each engine); with one
    engine's 4 seats held by long requests through its agent, 16 requests
    through the picker over agents (round robin: that engine picked twice)
    are all answered, none served at the full engine, its agent passing
    each pick on; every engine finished exactly the requests answered."""
    import k8s_lwepp as lw
    if not HELM.exists():
        pytest.skip("no helm: make setup-k8s")
    if not lw.LWEPP_BIN.exists():
        pytest.skip("no lwepp: make lwepp")
    try:
        c = k8s.up(3)
        lw.images()
        f = Fleet(c, tmp_path)
        lw.install(f, 1)
        servers = lw.servers(f)
        x = servers[0]
        xname, xip = x["metadata"]["name"], x["status"]["podIP"]

        def served() -> dict[str, float]:
            return {k: m["vllm:request_success_total"] for k, m in lw.engines(f).items()}

        # the attacker: a client naming engine x, through the picker alone
        gw = lw.gateways(f, "direct")[0]["status"]["podIP"]
        s0 = served()
        body = '{"model": "m", "prompt": "hello", "max_tokens": 4}'
        for _ in range(8):
            code = c.docker_exec(1, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
                                 "-H", f"x-gateway-destination-endpoint: {xip}:{lw.ENGINE_PORT}",
                                 "-H", f"test-epp-endpoint-selection: {xip}", "-H", "content-type: application/json",
                                 "-d", body, f"http://{gw}:{lw.GATEWAY_PORT}/v1/completions")
            assert code == "200", code
        lw.quiet(f)
        got = {k: v - s0[k] for k, v in served().items()}
        assert sorted(got.values()) == [1.0] * 8, got  # round robin, x's one as any other's

        # engine x full: its 4 seats held by long requests sent to its agent
        # from node 1, chunked (no Content-Length: an agent passes such a
        # request on to no one, so all 4 stay at x)
        long = '{"model": "m", "prompt": "hold", "max_tokens": 2000}'
        k8s.run(["docker", "exec", "-d", c.names[1], "sh", "-c", "for i in 1 2 3 4; do curl -s -o /dev/null --max-time 120 "
                 f"-H 'transfer-encoding: chunked' -H 'content-type: application/json' -d '{long}' "
                 f"http://{xip}:{lw.AGENT_PORT}/v1/completions & done; wait"])
        k8s._wait("engine x's 4 seats taken", lambda: lw.engines(f)[xname]["vllm:num_requests_running"] == 4, 30)
        s1 = served()
        fwd0 = lw.scrape(f, lw.ADMIN_PORT)[xname][lw.FORWARD_SENT]
        gwa = lw.gateways(f, "agents")[0]["status"]["podIP"]
        out = f.kubectl("exec", "llmload", "--", "huntlb-llmload", "--target", f"{gwa}:{lw.GATEWAY_PORT}", "--out", "/tmp/gw.jsonl",
                        *_llmload_n(16, 8, 11), timeout=120)
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["ok"] == 16 and summary["errors"] == 0, summary
        fwd = lw.scrape(f, lw.ADMIN_PORT)[xname][lw.FORWARD_SENT] - fwd0
        assert lw.engines(f)[xname]["vllm:num_requests_running"] == 4  # still held: every pick at x came while full
        lw.quiet(f)
        got = {k: v - s1[k] for k, v in served().items()}
        assert got[xname] == 4, got          # the held ones only: no pick of the gateway's served at x
        assert fwd >= 1, fwd                 # x was picked (16 picks over 8 engines) and passed each on
        assert sum(got.values()) == 16 + 4, got  # each answered request finished once
    finally:
        left = k8s.down()
    assert not any(left.values()), left
