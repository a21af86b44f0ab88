"""Real processes for tests, benchmarks and the demo: each is started in its
own session and stopped by PID (SIGTERM, then SIGKILL), pass or fail. Each test
gets its own 127.A.B.0/24 block, so tests (and several runs) can go side by
side without port clashes."""

from __future__ import annotations

import functools
import itertools
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from harness.net import wait_http

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / os.environ.get("HUNTLB_PROFILE", "debug")

_blocks = itertools.count(1)


def binary(name: str) -> str:
    path = TARGET / name
    if not path.exists():
        raise FileNotFoundError(f"{path} not built: run `cargo build --workspace` first (make test does)")
    return str(path)


@functools.cache
def agent_defaults() -> dict:
    """Every agent key that has a default value, with it, as the agent
    declares it (`huntlb-agent --print-defaults`): read, never copied, so no
    number here can drift from the agent's."""
    out = subprocess.run([binary("huntlb-agent"), "--print-defaults"], capture_output=True, text=True, timeout=30, check=True)
    return json.loads(out.stdout)


def agent_default(key: str):
    """The agent's default for `key` (`fleet_sample`, `llm_kv_busy_at`, ...)."""
    return agent_defaults()[key]


class Addrs:
    """Addresses 127.A.B.1, 127.A.B.2, ... for one test."""

    def __init__(self) -> None:
        a = 100 + os.getpid() % 100
        b = next(_blocks) % 250 + 1
        self.prefix = f"127.{a}.{b}"
        self._host = itertools.count(1)

    def host(self) -> str:
        """The next address whose ports are free: another run on this machine
        (a benchmark, a second pytest) may have drawn the same block."""
        for _ in range(250):
            h = f"{self.prefix}.{next(self._host)}"
            with socket.socket() as probe:
                try:
                    probe.bind((h, 8080))
                except OSError:
                    continue
            return h
        raise RuntimeError(f"no free address left in {self.prefix}.0/24")


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
        self.terminate()
        self.reap(time.monotonic() + 3)

    def terminate(self) -> None:
        """SIGTERM to the process group, without waiting."""
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def reap(self, deadline: float) -> None:
        """Wait until `deadline` (monotonic) for the exit, then SIGKILL the group."""
        if self.alive():
            try:
                self.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.popen.wait(timeout=3)
        self._log.close()


class Procs:
    """Owns the processes one test started."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.all: list[Proc] = []
        self.cleanups: list = []

    def fleet_key(self) -> str:
        """A shared key for the agents' forwarding tier (`fleet_key_file`),
        made once per run in the log folder, readable by its owner only."""
        path = self.log_dir / "fleet.key"
        if not path.exists():
            import secrets
            path.touch(mode=0o600)
            path.write_text(secrets.token_hex(32) + "\n")
        return str(path)

    def start(self, name: str, argv: list[str], env: dict | None = None) -> Proc:
        p = Proc(name, argv, self.log_dir, env)
        self.all.append(p)
        return p

    def stop_all(self) -> None:
        """Every process at once: SIGTERM to all, SIGKILL to what is left after
        0.5 s. A test is over: an agent's drain (drain_grace, 2 s after SIGTERM)
        has nobody left to serve, and waiting for each in turn made every
        teardown take 6 s, a third of the suite."""
        for p in reversed(self.all):
            p.terminate()
        deadline = time.monotonic() + 0.5
        for p in reversed(self.all):
            p.reap(deadline)
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

    def agent(self, host: str, app: str, wait: bool = True, env: dict | None = None, **opts) -> tuple[Proc, str, str]:
        listen, admin = opts.pop("listen", f"{host}:8080"), opts.pop("admin", f"{host}:9901")
        # named, so it says who served (hunt-served-by); id=None: as shipped, it does not
        name = opts.pop("id", f"agent-{host}")
        argv = [binary("huntlb-agent"), "--listen", listen, "--admin", admin, "--app", app] + (["--id", name] if name else [])
        for k, v in opts.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        p = self.start(f"agent-{host}", argv, env={**os.environ, "RUST_LOG": "info", **(env or {})})
        if wait:
            wait_http(admin, "/metrics", proc=p)
        return p, listen, admin
