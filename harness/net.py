"""Talking to what the harness started: HTTP requests, raw bytes, metrics,
and bounded waits (every loop here ends by count or time)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import time
from typing import Protocol


class Proc(Protocol):
    """What a wait needs of the process it watches (harness.procs.Proc is one):
    a wait ends at once, with its log, if that process exits."""
    name: str
    popen: subprocess.Popen

    def alive(self) -> bool: ...

    def log(self) -> str: ...


def host_port(addr: str) -> tuple[str, int]:
    """`host:port` or `[ipv6]:port`, the host as sockets take it (no brackets)."""
    host, port = addr.rsplit(":", 1)
    return host.strip("[]"), int(port)


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


def wait_tcp(addr: str, proc: Proc | None = None, timeout: float = 15.0) -> None:
    host, port = host_port(addr)
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
        host, port = host_port(addr)
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



def concurrent_statuses(addr: str, paths: list[str], timeout: float = 30) -> list[int]:
    """GET each path at once, one thread each (bounded by timeout); their statuses, in no order."""
    import threading
    out: list[int] = []
    ts = [threading.Thread(target=lambda p=p: out.append(request(addr, "GET", p, timeout=timeout)[0]), daemon=True) for p in paths]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    return out

def closed_loop(addrs: list[str], clients: int, seconds: float, prefix: str, timeout: float = 30) -> dict[int, int]:
    """`clients` threads, each sending one GET at a time for `seconds` (client
    i to addrs[i % len(addrs)], paths prefix/i/n); the statuses counted
    (status -> times). Bounded: each thread joined within seconds + timeout + 10."""
    import threading
    out: dict[int, int] = {}
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(i):
        n = 0
        while time.monotonic() < stop:
            status, _, _ = request(addrs[i % len(addrs)], "GET", f"{prefix}/{i}/{n}", timeout=timeout)
            with lock:
                out[status] = out.get(status, 0) + 1
            n += 1

    ts = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + timeout + 10)
    with lock:
        return dict(out)


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
    host, port = host_port(addr)
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
