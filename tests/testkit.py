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

    def start(self, name: str, argv: list[str], env: dict | None = None) -> Proc:
        p = Proc(name, argv, self.log_dir, env)
        self.all.append(p)
        return p

    def stop_all(self) -> None:
        for p in reversed(self.all):
            p.stop()

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
