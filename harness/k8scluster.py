"""A real Kubernetes cluster here (docs/kubernetes.md, "A real cluster here"):
Kubernetes v1.34.4 built from Go modules (scripts/k8s-build.sh, cached), on
node containers as kind makes them: each node a container of
huntlb/k8s-node:dev (harness/k8snode: Debian's containerd, runc and CNI
plugins) on a Docker network of its own, running containerd, kubelet and
kube-proxy; node 0 also runs etcd, the apiserver, the controller manager and
the scheduler, and the local registry. CoreDNS runs as a Deployment. No image
is pulled from outside: pause and CoreDNS are built here and imported into
each node's containerd; workloads' images (the agent's) are pushed to the
registry (Cluster.push) and pulled from it by the nodes.

  python -m harness.k8scluster up [--nodes 3]   build what is missing, start
  python -m harness.k8scluster down             remove everything it made
  python -m harness.k8scluster status

Why node containers and not a namespace per node: a kubelet owns its node's
mounts (pod volumes), cgroups (one per pod) and iptables (kube-proxy's): in a
container of its own each node has its own mount, cgroup and network
namespaces, so those die with the container, and nothing of a pod's lands in
the machine's tree; kubelets in network namespaces alone would share the
machine's mounts and cgroup hierarchy, each to be undone by hand.

Addresses (none outside what it makes): nodes 10.78.0.10+i on the network
huntlb-k8s (10.78.0.0/24, Docker's bridge the only interface in the machine's
own namespace, removed with the network); pods 10.78.64+i.0/24 on node i
(routes between the nodes, set here); Services 10.78.128.0/20 (the
apiserver's 10.78.128.1, CoreDNS's 10.78.128.10).

Everything is labelled huntlb.k8s-cluster and removed by id: `down` removes
the containers (and their anonymous volumes and tmpfs), the network, the state
folder, and stops the dockerd that `up` started (docker-setup.sh puts back its
iptables and sysctls). `up` first removes what a killed run left.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from harness.netns import starttime

ROOT = Path(__file__).resolve().parent.parent
VERSION = "v1.34.4"
BIN = ROOT / ".cache" / "k8s" / VERSION / "bin"
STATE = Path(os.environ.get("HUNTLB_K8S_STATE", "/run/huntlb-k8s"))
LABEL = "huntlb.k8s-cluster"
NETWORK = "huntlb-k8s"
SUBNET, GATEWAY = "10.78.0.0/24", "10.78.0.1"
POD_CIDR, SVC_CIDR = "10.78.64.0/18", "10.78.128.0/20"
API_SVC_IP, DNS_IP = "10.78.128.1", "10.78.128.10"
NODE_IMAGE = "huntlb/k8s-node:dev"
PAUSE_IMAGE = "registry.k8s.local/pause:3.10"
COREDNS_IMAGE = "registry.k8s.local/coredns:1.15.0"
AGENT_IMAGE = "huntlb/agent:dev"
# the local registry, as pods name it (containerd's mirror: node 0's :5000)
REGISTRY, REGISTRY_PORT = "registry.k8s.local:5000", 5000
# every capability but SYS_RESOURCE (--privileged fails on this kernel), no
# seccomp/AppArmor/masked paths, every device, a cgroup namespace of its own
# (scripts/swarm_demo.py's nodes, the same)
NODE_FLAGS = ["--init", "--cgroupns", "private", "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
              "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
              "--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm"]
PKI = "/etc/k8s/pki"  # in the nodes


def log(msg: str) -> None:
    print(f"k8s {time.strftime('%H:%M:%S')}: {msg}", file=sys.stderr, flush=True)


def run(argv: list[str], timeout: float = 300, check: bool = True, input: bytes | None = None,
        env: dict | None = None, cwd: Path | None = None) -> str:
    p = subprocess.run(argv, capture_output=True, timeout=timeout, input=input, env=env, cwd=cwd)
    if check and p.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.decode(errors='replace')[-2000:]}")
    return p.stdout.decode(errors="replace")


def node_name(i: int) -> str:
    return f"huntlb-k8s-{i}"


def node_ip(i: int) -> str:
    return f"10.78.0.{10 + i}"


def node_pod_cidr(i: int) -> str:
    return f"10.78.{64 + i}.0/24"


# ---------------------------------------------------------------- build (cached)

def build() -> None:
    """Kubernetes' binaries, etcd, CoreDNS (k8s-build.sh), the node image, the
    pause and CoreDNS images: each only when missing."""
    run([str(ROOT / "scripts/k8s-build.sh")], timeout=7200)
    run([str(ROOT / "scripts/docker-setup.sh"), "base"], timeout=600)
    # the node image again whenever harness/k8snode's files change (its label
    # carries their hash): a stale containerd config would pass unnoticed
    node_dir = ROOT / "harness/k8snode"
    digest = hashlib.sha256(b"".join((node_dir / f).read_bytes() for f in ("Dockerfile", "entry.sh", "containerd.toml")))
    want = digest.hexdigest()[:16]
    have = run(["docker", "image", "inspect", "-f", '{{index .Config.Labels "huntlb.k8s-node"}}', NODE_IMAGE], check=False).strip()
    if have != want:
        log(f"building {NODE_IMAGE}")
        run(["nice", "-n", "15", "docker", "build", "-q", "--label", f"huntlb.k8s-node={want}", "-t", NODE_IMAGE,
             str(node_dir)], timeout=900)
    for prog in ("pause", "registry"):  # harness/k8snode's own programs
        out = BIN / f"huntlb-{prog}"
        if not out.exists():
            env = {**os.environ, "CGO_ENABLED": "0", "GOMAXPROCS": "1", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
            run(["nice", "-n", "15", _go(), "build", "-C", str(ROOT / "harness/k8snode" / prog), "-trimpath",
                 "-ldflags", "-s -w", "-o", str(out), "."], timeout=600, env=env)
    if not _image_exists(PAUSE_IMAGE):
        _scratch_image(PAUSE_IMAGE, {"pause": BIN / "huntlb-pause"}, ["/pause"])
    if not _image_exists(COREDNS_IMAGE):
        _scratch_image(COREDNS_IMAGE, {"coredns": BIN / "coredns"}, ["/coredns"])
    if not _image_exists(AGENT_IMAGE):
        run([str(ROOT / "scripts/image.sh")], timeout=3600)


def _go() -> str:
    return shutil.which("go") or "/usr/local/go/bin/go"


def _image_exists(ref: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode == 0


def _scratch_image(ref: str, files: dict[str, Path], entry: list[str]) -> None:
    """An image of static binaries alone (FROM scratch: no shell, no libc)."""
    ctx = Path(run(["mktemp", "-d", "/tmp/huntlb-k8s-img.XXXXXX"]).strip())
    try:
        for name, src in files.items():
            shutil.copy2(src, ctx / name)
        (ctx / "Dockerfile").write_text("FROM scratch\n" + "".join(f"COPY {n} /{n}\n" for n in files)
                                        + f"ENTRYPOINT {json.dumps(entry)}\n")
        run(["docker", "build", "-q", "-t", ref, str(ctx)])
    finally:
        shutil.rmtree(ctx, ignore_errors=True)


# ---------------------------------------------------------------- what it makes, and removing it

def leftovers() -> dict[str, list[str]]:
    """Ids of everything labelled as the cluster's (this run's or a killed run's)."""
    if subprocess.run(["docker", "info"], capture_output=True).returncode:
        return {"containers": [], "networks": []}
    q = ["--filter", f"label={LABEL}", "-q"]
    return {"containers": run(["docker", "ps", "-a", *q]).split(),
            "networks": run(["docker", "network", "ls", *q]).split()}


def down() -> dict[str, list[str]]:
    """Remove the cluster, by id: containers first (their processes, mounts,
    tmpfs, iptables and namespaces go with them), then the network (Docker's
    bridge and its rules), the state folder, and the dockerd that `up` started
    (scripts/docker-setup.sh stop: its iptables and sysctls put back).
    Returns what is still there (empty when all went)."""
    ids = leftovers()
    if ids["containers"]:
        run(["docker", "rm", "-f", "-v", *ids["containers"]], check=False, timeout=180)
    if ids["networks"]:
        run(["docker", "network", "rm", *ids["networks"]], check=False)
    left = leftovers()
    dockerd = STATE / "dockerd.pid"
    if dockerd.exists() and not any(left.values()):
        pid = dockerd.read_text().strip()
        run([str(ROOT / "scripts/docker-setup.sh"), "stop", pid], check=False, timeout=120)
        dockerd.unlink()
    if not any(left.values()):
        shutil.rmtree(STATE, ignore_errors=True)
    return left


# ---------------------------------------------------------------- certificates

def _openssl(*args: str) -> None:
    run(["openssl", *args])


def make_pki(d: Path, nodes: int) -> None:
    """A CA of the cluster's own (made here, in the state folder, root only),
    the apiserver's serving certificate, a client certificate per component and
    per node (CN system:node:<name>, O system:nodes: the Node authorizer's),
    the admin's (O system:masters), the service accounts' key pair."""
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=huntlb-k8s-ca",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    sans = ",".join([f"IP:{node_ip(0)}", f"IP:{API_SVC_IP}", "IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes",
                     "DNS:kubernetes.default", "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local"])
    _cert(d, "apiserver", "/CN=kube-apiserver", f"subjectAltName={sans}\nextendedKeyUsage=serverAuth")
    clients = {"admin": "/O=system:masters/CN=huntlb-admin",
               "controller-manager": "/CN=system:kube-controller-manager",
               "scheduler": "/CN=system:kube-scheduler",
               "kube-proxy": "/CN=system:kube-proxy",
               "apiserver-kubelet-client": "/O=system:masters/CN=kube-apiserver-kubelet-client"}
    for i in range(nodes):
        clients[f"kubelet-{i}"] = f"/O=system:nodes/CN=system:node:{node_name(i)}"
    for name, subj in clients.items():
        _cert(d, name, subj, "extendedKeyUsage=clientAuth")
    _openssl("genpkey", "-algorithm", "RSA", "-out", str(d / "sa.key"))
    _openssl("pkey", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))


def _cert(d: Path, name: str, subj: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext + "\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subj, "-keyout", str(d / f"{name}.key"),
             "-out", str(d / f"{name}.csr"))
    _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
             "-CAcreateserial", "-days", "30", "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.crt"))


def kubeconfig(user: str, server: str, pki: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: huntlb-k8s
  cluster: {{server: "{server}", certificate-authority: "{pki}/ca.crt"}}
users:
- name: {user}
  user: {{client-certificate: "{pki}/{user}.crt", client-key: "{pki}/{user}.key"}}
contexts:
- name: huntlb-k8s
  context: {{cluster: huntlb-k8s, user: {user}}}
current-context: huntlb-k8s
"""


# ---------------------------------------------------------------- the cluster

class Cluster:
    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.names = [node_name(i) for i in range(nodes)]
        self.kubeconfig = STATE / "admin.kubeconfig"

    def docker_exec(self, i: int, *argv: str, timeout: float = 120, check: bool = True, input: bytes | None = None) -> str:
        return run(["docker", "exec", *(["-i"] if input is not None else []), self.names[i], *argv],
                   timeout=timeout, check=check, input=input)

    def daemon(self, i: int, name: str, argv: list[str]) -> None:
        """A long-running process in node i, its output in /var/log/k8s/NAME.log
        there; it dies with the node's container."""
        cmd = " ".join(_sh_quote(a) for a in argv)
        run(["docker", "exec", "-d", self.names[i], "sh", "-c", f"exec {cmd} >/var/log/k8s/{name}.log 2>&1"])

    def node_log(self, i: int, name: str, tail: int = 40) -> str:
        return self.docker_exec(i, "tail", "-n", str(tail), f"/var/log/k8s/{name}.log", check=False)

    def push(self, ref: str) -> str:
        """A local image (Docker's) into the cluster's registry; returns the
        name pods give it (under registry.k8s.local:5000)."""
        path = ref.split("/", 1)[1] if "." in ref.split("/", 1)[0] or ":" in ref.split("/", 1)[0] else ref
        tmp = STATE / "push.tar"
        try:
            tmp.write_bytes(_save(ref))
            run([str(BIN / "crane"), "push", "--insecure", str(tmp), f"{node_ip(0)}:{REGISTRY_PORT}/{path}"], timeout=300)
        finally:
            tmp.unlink(missing_ok=True)
        return f"{REGISTRY}/{path}"

    def kubectl(self, *args: str, timeout: float = 60, check: bool = True, input: bytes | None = None) -> str:
        return run([str(BIN / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
                   timeout=timeout, check=check, input=input)


def _sh_quote(s: str) -> str:
    return shlex.quote(s)


def _wait(what: str, fn, timeout: float, interval: float = 0.5, on_fail=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - the last one is reported
            last = e
        time.sleep(interval)
    extra = on_fail() if on_fail else ""
    raise TimeoutError(f"{what}: not within {timeout:.0f} s (last error: {last}){extra}")


def up(nodes: int = 3, stage: str = "all", keep_on_failure: bool = False) -> Cluster:
    """Build what is missing, remove a killed run's leftovers, start the
    cluster. `stage` stops early ("control-plane": etcd, the apiserver and
    the registry answering; "nodes": kubelets Ready), for the pieces' tests.
    A start that fails tears down what it made (unless keep_on_failure). One
    cluster per machine: refused while the process that started another is
    alive; one whose starter is gone is replaced."""
    if nodes < 1 or nodes > 50:
        raise ValueError(f"nodes: {nodes}, want 1 to 50")
    owner = STATE / "owner"
    try:
        pid, start = owner.read_text().split()
        if int(pid) != os.getpid() and starttime(int(pid)) == start:
            raise RuntimeError(f"a cluster is being run by PID {pid} ({owner}): `python -m harness.k8scluster down` ends it")
    except (OSError, ValueError):
        pass  # none, or torn: no live owner
    STATE.mkdir(parents=True, exist_ok=True)
    owner.write_text(f"{os.getpid()} {starttime(os.getpid())}\n")
    try:
        return _up(nodes, stage)
    except BaseException:
        if not keep_on_failure:
            log("start failed: tearing down what it made")
            down()
        raise


def _up(nodes: int, stage: str) -> Cluster:
    pid = run([str(ROOT / "scripts/docker-setup.sh"), "start"], timeout=120).strip()
    if pid:  # this call started dockerd: `down` stops it (a killed run's too)
        (STATE / "dockerd.pid").write_text(pid + "\n")
    left = down_containers()
    if any(left.values()):
        raise RuntimeError(f"leftovers of an earlier run could not be removed: {left}")
    build()
    c = Cluster(nodes)
    pki = STATE / "pki"
    shutil.rmtree(pki, ignore_errors=True)
    make_pki(pki, nodes)
    self_kc = kubeconfig("admin", f"https://{node_ip(0)}:6443", str(pki))
    c.kubeconfig.write_text(self_kc)
    os.chmod(c.kubeconfig, 0o600)

    run(["docker", "network", "create", "--label", LABEL, "--subnet", SUBNET, "--gateway", GATEWAY,
         "-o", "com.docker.network.bridge.enable_ip_masquerade=false", NETWORK])
    for i, name in enumerate(c.names):
        run(["docker", "run", "-d", "--name", name, "--hostname", name, "--label", LABEL, *NODE_FLAGS,
             "--network", NETWORK, "--ip", node_ip(i),
             # containerd's overlayfs cannot sit on the node's own overlay; tmpfs goes with the container
             "--tmpfs", "/var/lib/containerd:rw,exec,size=4g", "--tmpfs", "/var/lib/kubelet:rw,exec,size=1g",
             "--tmpfs", "/var/lib/etcd:rw,size=1g", "--tmpfs", "/run:rw,exec,size=256m",
             # kubelet's OOM watcher reads the kernel's log
             *(["--device", "/dev/kmsg"] if Path("/dev/kmsg").exists() else []),
             "-v", f"{BIN}:/opt/k8s/bin:ro", NODE_IMAGE])
    for i in range(nodes):
        _setup_node(c, i, pki)
    _start_control_plane(c)
    _start_registry(c)
    if stage == "control-plane":
        return c
    for i in range(nodes):
        _start_node(c, i)
    _wait("every node Ready", lambda: _ready_nodes(c) == set(c.names), 180,
          on_fail=lambda: "\n" + c.kubectl("get", "nodes", "-o", "wide", check=False) + c.node_log(0, "kubelet"))
    if stage == "nodes":
        return c
    _start_coredns(c)
    return c


def down_containers() -> dict[str, list[str]]:
    ids = leftovers()
    if ids["containers"]:
        log(f"removing {len(ids['containers'])} container(s) of an earlier run")
        run(["docker", "rm", "-f", "-v", *ids["containers"]], check=False, timeout=180)
    if ids["networks"]:
        run(["docker", "network", "rm", *ids["networks"]], check=False)
    return leftovers()


def _setup_node(c: Cluster, i: int, pki: Path) -> None:
    """Certificates, kubeconfigs, CNI config, routes to the other nodes' pods,
    and the images, into node i."""
    name = c.names[i]
    c.docker_exec(i, "mkdir", "-p", PKI)
    # the node's identity for kubelet's machine info (the image has none)
    c.docker_exec(i, "sh", "-c", "tr -d - </proc/sys/kernel/random/uuid >/etc/machine-id")
    mine = ["ca.crt", f"kubelet-{i}.crt", f"kubelet-{i}.key", "kube-proxy.crt", "kube-proxy.key"]
    if i == 0:
        mine = [p.name for p in pki.iterdir() if p.suffix in (".crt", ".key", ".pub") and p.name != "ca.key"] + ["ca.key"]
    for f in mine:
        run(["docker", "cp", str(pki / f), f"{name}:{PKI}/{f}"])
    server = f"https://{node_ip(0)}:6443"
    files = {
        "/etc/k8s/kubelet.kubeconfig": kubeconfig(f"kubelet-{i}", server, PKI),
        "/etc/k8s/kube-proxy.kubeconfig": kubeconfig("kube-proxy", server, PKI),
        "/etc/k8s/kubelet.yaml": KUBELET_CONFIG.format(dns=DNS_IP, pki=PKI),
        "/etc/k8s/kube-proxy.yaml": KUBE_PROXY_CONFIG.format(cidr=POD_CIDR, node=name),
        "/etc/cni/net.d/10-huntlb.conflist": json.dumps(_cni(node_pod_cidr(i)), indent=1),
    }
    if i == 0:
        files["/etc/k8s/controller-manager.kubeconfig"] = kubeconfig("controller-manager", "https://127.0.0.1:6443", PKI)
        files["/etc/k8s/scheduler.kubeconfig"] = kubeconfig("scheduler", "https://127.0.0.1:6443", PKI)
    for path, text in files.items():
        c.docker_exec(i, "sh", "-c", f"mkdir -p $(dirname {path}) && cat > {path}", input=text.encode())
    for j in range(c.nodes):
        if j != i:
            c.docker_exec(i, "ip", "route", "replace", node_pod_cidr(j), "via", node_ip(j))
    _wait(f"{name}: containerd", lambda: c.docker_exec(i, "ctr", "version", check=False, timeout=10).count("Version") >= 2, 30)
    # the cluster's own images, before any registry runs; workloads' come
    # from the local registry (Cluster.push)
    for ref in (PAUSE_IMAGE, COREDNS_IMAGE):
        c.docker_exec(i, "ctr", "-n", "k8s.io", "images", "import", "-", input=_save(ref), timeout=120)


def _save(ref: str) -> bytes:
    p = subprocess.run(["docker", "save", ref], capture_output=True, timeout=120)
    if p.returncode:
        raise RuntimeError(f"docker save {ref}: {p.stderr.decode(errors='replace')}")
    return p.stdout


def _cni(subnet: str) -> dict:
    # a bridge per node, host-local addresses from the node's own range;
    # between nodes, plain routes (set above): no overlay, no masquerade
    return {"cniVersion": "0.4.0", "name": "huntlb-k8s", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "loopback"}]}


KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {pki}/ca.crt}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
clusterDNS: [{dns}]
clusterDomain: cluster.local
# a node container: no swap rule, cgroup v1 allowed (this machine's), no
# eviction on the tmpfs it runs on
failSwapOn: false
failCgroupV1: false
evictionHard: {{memory.available: "0%", nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}}
imageGCHighThresholdPercent: 100
resolvConf: /etc/k8s/resolv.conf
# a pod's Secret and ConfigMap files follow their objects within about 20 s
# (the default, 1 min, makes a key rotation's four steps take minutes each)
syncFrequency: 10s
"""

KUBE_PROXY_CONFIG = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: /etc/k8s/kube-proxy.kubeconfig}}
mode: iptables
clusterCIDR: {cidr}
hostnameOverride: {node}
# the node container cannot set the machine's conntrack table size
conntrack: {{maxPerCore: 0}}
"""


def _start_control_plane(c: Cluster) -> None:
    b = "/opt/k8s/bin"
    c.docker_exec(0, "sh", "-c", "printf 'search cluster.local\\n' > /etc/k8s/resolv.conf")
    # etcd on the control plane's loopback only: nothing outside node 0 reaches it
    c.daemon(0, "etcd", [f"{b}/etcd", "--data-dir", "/var/lib/etcd/data", "--name", "cp",
                         "--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
                         "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                         "--initial-cluster", "cp=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn"])
    c.daemon(0, "kube-apiserver", [
        f"{b}/kube-apiserver", "--etcd-servers", "http://127.0.0.1:2379", "--advertise-address", node_ip(0),
        "--bind-address", "0.0.0.0", "--secure-port", "6443", "--service-cluster-ip-range", SVC_CIDR,
        "--client-ca-file", f"{PKI}/ca.crt", "--tls-cert-file", f"{PKI}/apiserver.crt",
        "--tls-private-key-file", f"{PKI}/apiserver.key",
        "--kubelet-client-certificate", f"{PKI}/apiserver-kubelet-client.crt",
        "--kubelet-client-key", f"{PKI}/apiserver-kubelet-client.key",
        "--service-account-key-file", f"{PKI}/sa.pub", "--service-account-signing-key-file", f"{PKI}/sa.key",
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
        "--anonymous-auth=false", "--allow-privileged=true", "--profiling=false"])
    _wait("the apiserver's /healthz", lambda: c.kubectl("get", "--raw", "/healthz", check=False, timeout=10) == "ok", 120,
          on_fail=lambda: "\n" + c.node_log(0, "kube-apiserver") + c.node_log(0, "etcd"))
    c.daemon(0, "kube-controller-manager", [
        f"{b}/kube-controller-manager", "--kubeconfig", "/etc/k8s/controller-manager.kubeconfig",
        "--authentication-kubeconfig", "/etc/k8s/controller-manager.kubeconfig",
        "--authorization-kubeconfig", "/etc/k8s/controller-manager.kubeconfig",
        "--leader-elect=false", "--use-service-account-credentials", "--service-cluster-ip-range", SVC_CIDR,
        "--cluster-signing-cert-file", f"{PKI}/ca.crt", "--cluster-signing-key-file", f"{PKI}/ca.key",
        "--root-ca-file", f"{PKI}/ca.crt", "--service-account-private-key-file", f"{PKI}/sa.key",
        "--bind-address", "127.0.0.1", "--profiling=false"])
    c.daemon(0, "kube-scheduler", [
        f"{b}/kube-scheduler", "--kubeconfig", "/etc/k8s/scheduler.kubeconfig",
        "--authentication-kubeconfig", "/etc/k8s/scheduler.kubeconfig",
        "--authorization-kubeconfig", "/etc/k8s/scheduler.kubeconfig",
        "--leader-elect=false", "--bind-address", "127.0.0.1", "--profiling=false"])


def _start_registry(c: Cluster) -> None:
    """go-containerregistry's registry on node 0, blobs in its memory (gone
    with the node): it takes any push from whoever reaches the cluster's
    network (this machine, the cluster's pods); it holds test images only."""
    c.daemon(0, "registry", ["/opt/k8s/bin/huntlb-registry", "--listen", f"{node_ip(0)}:{REGISTRY_PORT}"])
    url = f"http://{node_ip(0)}:{REGISTRY_PORT}/v2/"
    _wait("the registry", lambda: urllib.request.urlopen(url, timeout=2).status == 200, 30,
          on_fail=lambda: "\n" + c.node_log(0, "registry"))


def _start_node(c: Cluster, i: int) -> None:
    b = "/opt/k8s/bin"
    if i:
        c.docker_exec(i, "sh", "-c", "printf 'search cluster.local\\n' > /etc/k8s/resolv.conf")
    c.daemon(i, "kubelet", [f"{b}/kubelet", "--config", "/etc/k8s/kubelet.yaml",
                            "--kubeconfig", "/etc/k8s/kubelet.kubeconfig", "--hostname-override", c.names[i],
                            "--node-ip", node_ip(i)])
    c.daemon(i, "kube-proxy", [f"{b}/kube-proxy", "--config", "/etc/k8s/kube-proxy.yaml"])


def _ready_nodes(c: Cluster) -> set[str]:
    out = json.loads(c.kubectl("get", "nodes", "-o", "json", timeout=20))
    ready = set()
    for n in out["items"]:
        if any(x["type"] == "Ready" and x["status"] == "True" for x in n["status"].get("conditions", [])):
            ready.add(n["metadata"]["name"])
    return ready


def _start_coredns(c: Cluster) -> None:
    c.kubectl("apply", "-f", "-", input=COREDNS_MANIFEST.format(image=COREDNS_IMAGE, ip=DNS_IP).encode())
    _wait("CoreDNS available", lambda: c.kubectl("-n", "kube-system", "get", "deploy", "coredns", "-o",
                                                 "jsonpath={.status.availableReplicas}", check=False) == "1", 120,
          on_fail=lambda: "\n" + c.kubectl("-n", "kube-system", "describe", "pods", check=False)[-3000:])


COREDNS_MANIFEST = """apiVersion: v1
kind: ServiceAccount
metadata: {{name: coredns, namespace: kube-system}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: "system:coredns"}}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "system:coredns"}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}}
subjects: [{{kind: ServiceAccount, name: coredns, namespace: kube-system}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: coredns, namespace: kube-system}}
data:
  # the cluster's names only: nothing is forwarded outside
  Corefile: |
    .:53 {{
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {{
            pods insecure
        }}
        cache 30
    }}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: coredns, namespace: kube-system, labels: {{k8s-app: kube-dns}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{k8s-app: kube-dns}}}}
  template:
    metadata: {{labels: {{k8s-app: kube-dns}}}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      containers:
      - name: coredns
        image: {image}
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {{name: dns, containerPort: 53, protocol: UDP}}
        - {{name: dns-tcp, containerPort: 53, protocol: TCP}}
        readinessProbe: {{httpGet: {{path: /ready, port: 8181}}}}
        livenessProbe: {{httpGet: {{path: /health, port: 8080}}}}
        volumeMounts: [{{name: config, mountPath: /etc/coredns, readOnly: true}}]
      volumes: [{{name: config, configMap: {{name: coredns}}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: kube-dns, namespace: kube-system, labels: {{k8s-app: kube-dns}}}}
spec:
  clusterIP: {ip}
  selector: {{k8s-app: kube-dns}}
  ports:
  - {{name: dns, port: 53, protocol: UDP}}
  - {{name: dns-tcp, port: 53, protocol: TCP}}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--nodes", type=int, default=3)
    u.add_argument("--stage", choices=["control-plane", "nodes", "all"], default="all")
    u.add_argument("--keep-on-failure", action="store_true", help="leave a failed start's nodes for a look (then `down`)")
    sub.add_parser("down")
    sub.add_parser("status")
    a = ap.parse_args()
    if a.cmd == "up":
        t0 = time.monotonic()
        c = up(a.nodes, a.stage, a.keep_on_failure)
        log(f"up in {time.monotonic() - t0:.0f} s: KUBECONFIG={c.kubeconfig}")
    elif a.cmd == "down":
        left = down()
        if any(left.values()):
            log(f"LEFT BEHIND: {left}")
            return 1
        log("down: no container, network or state of the cluster left")
    else:
        print(json.dumps(leftovers()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
