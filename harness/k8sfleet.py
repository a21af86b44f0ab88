"""A fleet on the real cluster (harness/k8scluster.py), as a user runs one:
the chart (`helm install`, charts/huntlb) with its apps, plain fronts of both
proxies as their own Deployments, and a load generator pod; every arrival
counted at the apps.

    apps      the chart's Deployment `shop` in namespace `hunt`: the emulated
              app (compose's huntlb/app:dev) beside the agent image (make
              image), fleet_pass_plain (the chart's default front mode); each
              app appends every arriving request's path to
              /var/lib/huntlb-arrivals/<pod> on its node (a hostPath: the
              file outlives the pod, so a rollout's old pods still count)
    fronts    Deployments `envoy` and `haproxy` (compose's images, the
              proxies as the project installs them), each front the proxy's
              own least-request (Envoy LEAST_REQUEST with FULL_SCAN, HAProxy
              leastconn) and the agents' health check, over the apps found by
              CoreDNS through a headless Service of the ready pods
              (`shop-pods`): what Envoy Gateway and HAProxy Ingress do with
              endpoints; every front pod its own IP, so its own front to the
              agents. Each drains on delete (preStop) before it stops.
    load      a pod `load` on node 0 running huntlb-loadgen (kubectl exec) at
              the fronts' Services, each request's path unique
              (/<phase>/<proxy>/<i>), open loop, never re-sent

Nothing outside the cluster is reached: every address is a pod's or a
Service's (10.78.x, harness/k8scluster.py). Everything lives in the namespace
`hunt` and goes with the cluster (`k8scluster.down`).
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import shlex
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness import k8scluster as k8s

ROOT = k8s.ROOT


def hears_sample(agents: dict[str, dict[str, float]], apps: int) -> bool:
    """Every one of the `apps` agents (pod -> its /metrics) hears its sample:
    the chart's `agent.fleetSample` peers, or every other member in a fleet
    no larger (0: every other member), as testbed.heard_of says on loopback."""
    sample = int(yaml.safe_load((ROOT / "charts/huntlb/values.yaml").read_text())["agent"]["fleetSample"])
    heard = apps - 1 if sample == 0 else min(sample, apps - 1)
    return len(agents) == apps and all(m.get("huntlb_fleet_peers", -1) == heard for m in agents.values())
# docs/kubernetes.md's install: the release `shop` in the namespace `shop`
NS, RELEASE = "shop", "shop"
HELM = ROOT / ".cache" / "bin" / "helm"
ARRIVALS = "/var/lib/huntlb-arrivals"  # on each node (a hostPath)
# the fronts' port for the proxy's own least-request (compose/configs.py's :10001)
FRONT_PORT = 10001
PROXIES = ("envoy", "haproxy")
# compose/.env's knobs for the fronts' images
FRONT_ENV = {"HEALTH_INTERVAL_MS": "500", "HEALTH_FALL": "2", "HEALTH_RISE": "2", "KEEPALIVE_S": "60",
             "TCP_SMART": "on", "ENVOY_CONCURRENCY": "1"}


def app_version() -> str:
    for line in (ROOT / "charts/huntlb/Chart.yaml").read_text().splitlines():
        if line.startswith("appVersion:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise RuntimeError("charts/huntlb/Chart.yaml: no appVersion")


def ensure_images() -> None:
    """The agent's image (make image) and compose's (compose/build.sh: the
    app, Envoy, HAProxy), each built when missing (make demo-k8s builds them
    afresh)."""
    def have(ref: str) -> bool:
        return subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode == 0
    if not have(f"huntlb/agent:{app_version()}"):
        subprocess.run([str(ROOT / "scripts/image.sh")], check=True, timeout=3600)
    if not all(have(f"huntlb/{p}:dev") for p in ("app", "envoy", "haproxy")):
        subprocess.run([str(ROOT / "compose/build.sh")], check=True, timeout=3600)


def values(app_image: str, apps: int, workers: int = 8, arrivals: bool = True) -> str:
    """The chart's values: compose's app (`workers` on 2 emulated cores, jobs
    of exp 20 ms unless the load generator sizes them: docs/demo.md),
    writing its arrivals to the node when `arrivals` (the events' tests count
    them; a benchmark's 1,100 requests a second would be as many writes)."""
    trail = (f", --arrivals={ARRIVALS}/$(POD_NAME)]\n    volumeMounts: [{{name: arrivals, mountPath: {ARRIVALS}}}]"
             if arrivals else "]")
    vols = (f"\n  volumes:\n  - name: arrivals\n    hostPath: {{path: {ARRIVALS}, type: DirectoryOrCreate}}"
            if arrivals else "")
    return f"""workload:
  replicas: {apps}
  containers:
  - name: app
    image: {app_image}
    command: [huntlb-workload, --listen=127.0.0.1:9000, --id=$(POD_NAME), --workers={workers}, --cores=2,
              --demand=exp:20{trail}
    env:
    - name: POD_NAME
      valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
    resources:
      requests: {{cpu: 10m, memory: 16Mi}}{vols}
agent:
  workers: {workers}
  resources:
    requests: {{cpu: 10m, memory: 16Mi}}
"""


def front_configs(release: str = RELEASE) -> dict[str, str]:
    """compose's proxy configs (compose/build.sh stages them in compose/dist),
    pointed at the cluster: the apps by CoreDNS, `<release>-pods` in `shop`."""
    dist = ROOT / "compose/dist/config"
    if not (dist / "envoy.yaml").exists():
        subprocess.run([str(ROOT / "compose/build.sh"), "--stage"], check=True, capture_output=True, timeout=1800)
    name = f"{release}-pods.{NS}.svc.cluster.local"
    envoy = (dist / "envoy.yaml").read_text()
    envoy = envoy.replace("address: 127.0.0.11", f"address: {k8s.DNS_IP}").replace("address: backends", f"address: {name}")
    # what the image's entrypoint fills in from compose/.env (Envoy reads no environment)
    ms = int(FRONT_ENV["HEALTH_INTERVAL_MS"])
    for k, v in {"HEALTH_INTERVAL_S": f"{ms // 1000}.{ms % 1000:03d}", "HEALTH_FALL": FRONT_ENV["HEALTH_FALL"],
                 "HEALTH_RISE": FRONT_ENV["HEALTH_RISE"], "KEEPALIVE_S": FRONT_ENV["KEEPALIVE_S"]}.items():
        envoy = envoy.replace("${" + k + "}", v)
    hap = (dist / "haproxy.cfg").read_text()
    # 24 slots: the fleet scales to 16 here
    hap = re.sub(r"server-template web 1-\d+ backends:8080", f"server-template web 1-24 {name}:8080", hap)
    hap = hap.replace("nameserver dns 127.0.0.11:53", f"nameserver dns {k8s.DNS_IP}:53")
    assert name in envoy and name in hap and "127.0.0.11" not in envoy + hap and "${" not in envoy
    return {"envoy.yaml": envoy, "haproxy.cfg": hap}


def doc_commands(first: str) -> list[list[str]]:
    """The shell commands of the docs/kubernetes.md block that has `first`,
    continuation lines joined, each as its words."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if first in b)
    return [shlex.split(c) for c in re.sub(r"\\\n\s*", " ", block).strip().splitlines()]


def deployment(name: str, labels: dict, pod: dict, replicas: int = 1) -> dict:
    """A Deployment of `replicas` pods labelled `labels` (its selector), each
    `pod` (a pod spec)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def fronts_manifest(images: dict[str, str], replicas: int, release: str = RELEASE, load_pod: bool = True) -> str:
    """Each proxy's fronts over `release`'s ready pods (Deployments named by
    the proxy, `-<release>` after it for a release other than the fleet's),
    and the load pod."""
    sfx = "" if release == RELEASE else f"-{release}"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"fronts{sfx}"}, "data": front_configs(release)}
    env = [{"name": k, "value": v} for k, v in FRONT_ENV.items()]
    # On delete, while the endpoints drop the pod, each front sends its
    # clients elsewhere before it stops. Envoy: its listeners drained, every
    # HTTP/1 response then saying `Connection: close` at once (the immediate
    # strategy; the default, gradual over 600 s, leaves a client's kept
    # connection on a front about to exit). HAProxy: a soft stop (SIGUSR1 to
    # the master): no new connection, each open one closed after its response.
    stop = {"envoy": ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9901 && "
                      # (Envoy's admin answers HTTP/1.0 with 426: 1.1, closed after)
                      "printf 'POST /drain_listeners?graceful HTTP/1.1\\r\\nHost: admin\\r\\nContent-Length: 0\\r\\n"
                      "Connection: close\\r\\n\\r\\n' >&3 && cat <&3 >/dev/null; sleep 8"],
            "haproxy": ["sh", "-c", "sleep 3; kill -USR1 1; sleep 10"]}
    cmd = {"envoy": ["envoy", "-c", "/etc/fronts/envoy.yaml", "--concurrency", FRONT_ENV["ENVOY_CONCURRENCY"],
                     "--disable-hot-restart", "-l", "warning", "--drain-time-s", "5", "--drain-strategy", "immediate"],
           "haproxy": ["haproxy", "-W", "-db", "-f", "/etc/fronts/haproxy.cfg"]}
    docs = [cm, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{release}-pods"},
                 # the apps' pods as a gateway sees endpoints: ready ones only
                 "spec": {"clusterIP": "None", "selector": {"app.kubernetes.io/instance": release},
                          "ports": [{"name": "http", "port": 8080, "targetPort": 8080}]}}]
    for p in PROXIES:
        name = p + sfx
        docs.append(deployment(name, {"front": name}, replicas=replicas, pod={
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": p, "image": images[p], "command": cmd[p], "env": env,
                            "ports": [{"containerPort": FRONT_PORT}],
                            "readinessProbe": {"tcpSocket": {"port": FRONT_PORT}, "periodSeconds": 1},
                            "lifecycle": {"preStop": {"exec": {"command": stop[p]}}},
                            "volumeMounts": [{"name": "fronts", "mountPath": "/etc/fronts"}],
                            "resources": {"requests": {"cpu": "10m"}}}],
            "volumes": [{"name": "fronts", "configMap": {"name": f"fronts{sfx}"}}]}))
        docs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                     "spec": {"selector": {"front": name}, "ports": [{"name": "http", "port": FRONT_PORT, "targetPort": FRONT_PORT}]}})
    if load_pod:
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "load"}, "spec": {
            "nodeName": k8s.node_name(0), "terminationGracePeriodSeconds": 1,
            # a CPU request: a BestEffort pod gets the least CPU share on a busy node, and an
            # open-loop generator sending late measures its own queue, not the fleet
            "containers": [{"name": "load", "image": images["app"], "command": ["sleep", "infinity"],
                            "resources": {"requests": {"cpu": "100m"}}}]}})
    return "\n---\n".join(json.dumps(d) for d in docs)


@dataclass
class Load:
    """One phase's load: an open-loop loadgen per proxy, at its fronts' Service."""
    phase: str
    rate: float
    duration: float
    procs: dict = field(default_factory=dict)
    reports: dict = field(default_factory=dict)


class Fleet:
    """The installed fleet on cluster `c`."""

    def __init__(self, c: k8s.Cluster, work: Path) -> None:
        self.c, self.work = c, work
        self.key_file = work / "fleet.key"
        self.values_file = work / "values.yaml"

    def helm(self, *args: str, timeout: float = 180) -> str:
        return k8s.run([str(HELM), *args], timeout=timeout, env={**os.environ, "KUBECONFIG": str(self.c.kubeconfig)})

    def kubectl(self, *args: str, timeout: float = 60, check: bool = True, input: bytes | None = None) -> str:
        return self.c.kubectl("-n", NS, *args, timeout=timeout, check=check, input=input)

    def install(self, apps: int = 12, fronts: int = 4) -> None:
        """docs/kubernetes.md's steps 2 and 4 pasted (the key, `helm install`
        with the example's values), then the operator's own values by `helm
        upgrade` (`apps` replicas of compose's app, arrivals to the node),
        the fronts and the load pod. The images under the names the chart and
        the docs use, served by the cluster's registry (harness/k8snode's
        containerd mirrors docker.io to it)."""
        ensure_images()
        for ref in (f"huntlb/agent:{app_version()}", "huntlb/app:dev", "huntlb/envoy:dev", "huntlb/haproxy:dev"):
            self.c.push(ref)
        images = {p: f"huntlb/{p}:dev" for p in ("app", "envoy", "haproxy")}
        self.work.mkdir(parents=True, exist_ok=True)
        for words in doc_commands("openssl rand -hex 32 > fleet.key") + doc_commands("helm install shop charts/huntlb"):
            self.run_doc(words)
        self.kubectl("rollout", "status", f"deploy/{RELEASE}", "--timeout=300s", timeout=310)
        self.values_file.write_text(values(images["app"], apps))
        self.helm("upgrade", RELEASE, str(ROOT / "charts/huntlb"), "-n", NS, "--reuse-values", "-f", str(self.values_file))
        self.kubectl("apply", "-f", "-", input=fronts_manifest(images, fronts).encode())
        for d in (f"deploy/{RELEASE}", "deploy/envoy", "deploy/haproxy"):
            self.kubectl("rollout", "status", d, "--timeout=300s", timeout=310)
        self.kubectl("wait", "--for=condition=Ready", "pod/load", "--timeout=120s", timeout=130)
        k8s._wait("every agent hearing its sample", lambda: hears_sample(self.agent_metrics(), apps), 60)

    def run_doc(self, words: list[str]) -> None:
        """One of the docs' shell commands as written: `fleet.key` is this
        fleet's (in its work folder), helm the one `make setup-k8s` builds,
        charts/ the repository's."""
        if words[0] == "(umask":  # (umask 077 && openssl rand -hex 32 > fleet.key)
            assert words[-2:] == [">", "fleet.key)"], words
            self.key_file.write_text(secrets.token_hex(32) + "\n")
            self.key_file.chmod(0o600)
            return
        assert words[0] == "helm", words
        argv = [str(HELM), *[w.replace("fleet.key", str(self.key_file)) if w.startswith("fleetKey.value=") else w
                             for w in words[1:]]]
        k8s.run(argv, timeout=180, env={**os.environ, "KUBECONFIG": str(self.c.kubeconfig)}, cwd=ROOT)

    # ------------------------------------------------------------ what runs

    def pods(self, selector: str | None = "app.kubernetes.io/instance=" + RELEASE) -> list[dict]:
        """The namespace's pods, those `selector` picks (None: all)."""
        return json.loads(self.kubectl("get", "pods", *(["-l", selector] if selector else []), "-o", "json"))["items"]

    def app_pods(self, ready_only: bool = True) -> list[dict]:
        pods = [p for p in self.pods() if p["metadata"].get("deletionTimestamp") is None]
        if ready_only:
            pods = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                           for c in p["status"].get("conditions", []))]
        return pods

    def agent_metrics(self) -> dict[str, dict[str, float]]:
        """Each running app pod's agent's /metrics (unlabelled series), read
        from node 1 at the pod's IP."""
        out = {}
        for p in self.app_pods():
            text = self.c.docker_exec(1, "curl", "-sf", "--max-time", "3", f"http://{p['status']['podIP']}:9901/metrics", check=False)
            out[p["metadata"]["name"]] = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                                          if line and not line.startswith("#") and len(line.split()) == 2}
        return out

    def forwards_sent(self) -> dict[str, float]:
        """Each running agent's huntlb_forwards_total{outcome="sent"}."""
        return {p: m.get('huntlb_forwards_total{outcome="sent"}', 0.0) for p, m in self.agent_metrics().items()}

    def arrivals(self) -> dict[str, Counter]:
        """Every path each app processed (its pod name -> paths), from the
        files on the nodes: pods gone included."""
        out: dict[str, Counter] = {}
        for i in range(self.c.nodes):
            text = self.c.docker_exec(i, "sh", "-c", f"cd {ARRIVALS} 2>/dev/null && grep -H . * || true", timeout=60)
            for line in text.splitlines():
                pod, _, path = line.partition(":")
                out.setdefault(pod, Counter())[path] += 1
        return out

    # ------------------------------------------------------------ load

    def start_load(self, phase: str, rate: float, duration: float, seed: int = 1) -> Load:
        """Open-loop Poisson at `rate` req/s to each proxy's fronts for
        `duration` s, from the load pod; each request's path
        /<phase>/<proxy>/<i>, unique, so that its arrivals can be counted."""
        load = Load(phase, rate, duration)
        for k, proxy in enumerate(PROXIES):
            # a trace: Poisson arrivals at `rate`, each its own path
            rng = random.Random(seed * 7919 + k)
            t, lines = 0.0, []
            while True:
                t += rng.expovariate(rate)
                if t >= duration:
                    break
                lines.append(f"{t:.6f} /{phase}/{proxy}/{len(lines)}")
            trace = f"/tmp/{phase}-{proxy}.trace"
            self.kubectl("exec", "-i", "load", "--", "sh", "-c", f"cat > {trace}", input=("\n".join(lines) + "\n").encode())
            svc = self.kubectl("get", "svc", proxy, "-o", "jsonpath={.spec.clusterIP}")
            argv = [str(k8s.BIN / "kubectl"), "--kubeconfig", str(self.c.kubeconfig), "-n", NS, "exec", "load", "--",
                    "sh", "-c", f"huntlb-loadgen --target http://{svc}:{FRONT_PORT} --trace {trace} --timeout-ms 10000 "
                    f"--max-lateness-us 50000 --requests /tmp/{phase}-{proxy}.req --json /tmp/{phase}-{proxy}.json "
                    f">/dev/null 2>&1; echo exit=$?; cat /tmp/{phase}-{proxy}.json; echo; echo REQUESTS; cat /tmp/{phase}-{proxy}.req"]
            load.procs[proxy] = (subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE), lines)
        return load

    def finish(self, load: Load) -> dict[str, dict]:
        """Wait for each loadgen; per proxy: sent, answered 2xx, errors (and
        their paths), the loadgen's report."""
        out = {}
        for proxy, (p, lines) in load.procs.items():
            so, se = p.communicate(timeout=load.duration + 120)
            text = so.decode(errors="replace")
            head, _, reqs = text.partition("\nREQUESTS\n")
            first, _, rest = head.partition("\n")
            if first.strip() != "exit=0":
                raise RuntimeError(f"loadgen for {proxy} in phase {load.phase}: {first} {rest[:500]} {se.decode()[-500:]}")
            report = json.loads(rest)
            paths = [line.split()[1] for line in lines]
            ok, failed = [], []
            for line in reqs.splitlines():
                idx, _off, _lat, status = line.split()
                (ok if 200 <= int(status) < 300 else failed).append((paths[int(idx)], int(status)))
            out[proxy] = {"sent": len(paths), "ok": [p for p, _ in ok], "failed": failed, "report": report}
        return out


def tally(load_out: dict[str, dict], arrivals: dict[str, Counter], phase: str) -> dict[str, dict]:
    """Per proxy: requests sent, client errors, and at the apps: paths of this
    phase processed twice or more, answered ones that never arrived, and
    which pods served the phase."""
    seen: Counter = Counter()
    where: dict[str, set] = {}
    for pod, paths in arrivals.items():
        for path, n in paths.items():
            if path.startswith(f"/{phase}/"):
                seen[path] += n
                where.setdefault(path, set()).add(pod)
    out = {}
    for proxy, r in load_out.items():
        mine = {p: n for p, n in seen.items() if p.startswith(f"/{phase}/{proxy}/")}
        out[proxy] = {"sent": r["sent"], "errors": len(r["failed"]), "error_statuses": Counter(s for _, s in r["failed"]),
                      "twice": sorted(p for p, n in mine.items() if n > 1),
                      "answered_not_arrived": sorted(p for p in r["ok"] if p not in mine),
                      "failed_arrived_at": {p: sorted(where.get(p, ())) for p, _ in r["failed"]},
                      "pods": Counter(pod for p in mine for pod in where[p])}
    return out
