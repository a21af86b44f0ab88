"""Network namespaces for the emulated cluster (harness.cluster): made and
listed with iproute2, entered by one thread (setns), their processes found
and stopped, and what a run SIGKILLed midway left behind removed (never a
live run's: each run's owner, PID and start time, is written first)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path




PREFIX = "hlb"  # namespaces: hlb<run>-<host>; <run> is 6 hex digits
STATE = Path(os.environ.get("HUNTLB_CLUSTER_STATE", "/run/huntlb-cluster"))
NETNS_ETC = Path("/etc/netns")

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_RUN_NS = re.compile(rf"^{PREFIX}([0-9a-f]{{6}})-")


def run_ip(*args: str) -> str:
    """One `ip` command; its error output in the exception."""
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def _netns_list() -> list[str]:
    return [line.split()[0] for line in run_ip("netns", "list").splitlines() if line.strip()]


def netns_pids(ns: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def starttime(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), which tells it from a
    later process given the same PID; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


@contextlib.contextmanager
def inside(ns: str):
    """This thread (only) in namespace `ns`: sockets it opens meanwhile are
    the namespace's. Its own namespace is restored on the way out."""
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        _setns(fd)
        try:
            yield
        finally:
            _setns(back)
    finally:
        os.close(fd)
        os.close(back)


def kill_and_wait(pids: list[int], timeout: float = 5.0) -> None:
    """SIGKILL each PID, and wait until none is left (not our children:
    polled, by the start time read before the signal)."""
    live = {p: s for p in pids if (s := starttime(p)) is not None}
    for p in live:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        for p in live:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p, os.WNOHANG)  # reaped here if they are ours (a subreaper's)
        live = {p: s for p, s in live.items() if starttime(p) == s and not _zombie(p)}
        time.sleep(0.02)
    for p in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(p, os.WNOHANG)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def remove_run(run: str) -> list[str]:
    """Everything run `run` made: the processes in its namespaces (SIGKILL, by
    PID), the namespaces, their /etc/netns folders, the paths its state lists,
    its state folder. Returns the namespaces removed."""
    mine = [n for n in _netns_list() if n.startswith(f"{PREFIX}{run}-")]
    kill_and_wait([p for n in mine for p in netns_pids(n)])
    for n in mine:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
    for d in NETNS_ETC.glob(f"{PREFIX}{run}-*") if NETNS_ETC.is_dir() else []:
        shutil.rmtree(d, ignore_errors=True)
    state = STATE / run
    made = state / "paths"
    if made.exists():
        for p in made.read_text().splitlines():
            shutil.rmtree(p, ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    for d in (STATE, NETNS_ETC):
        with contextlib.suppress(OSError):
            d.rmdir()  # only if empty: another run's (or tool's) entries keep it
    return mine


def _owner_alive(state: Path) -> bool:
    try:
        pid, start = (state / "owner").read_text().split()
    except (OSError, ValueError):
        # written first thing, atomically: no owner file is a run that died
        # between its mkdir and that write, or a torn state
        return False
    return starttime(int(pid)) == start


def reap_stale() -> list[str]:
    """Remove what earlier runs left behind when their owner died without
    cleaning up (SIGKILL, a power cut of the test process); a live run's
    namespaces are left alone. Returns the runs removed."""
    runs = set()
    if STATE.is_dir():
        runs |= {d.name for d in STATE.iterdir() if d.is_dir() and not _owner_alive(d)}
    for n in _netns_list():
        m = _RUN_NS.match(n)
        if m and not _owner_alive(STATE / m.group(1)):
            runs.add(m.group(1))
    if NETNS_ETC.is_dir():
        for d in NETNS_ETC.iterdir():
            m = _RUN_NS.match(d.name)
            if m and not _owner_alive(STATE / m.group(1)):
                runs.add(m.group(1))
    for run in sorted(runs):
        remove_run(run)
    return sorted(runs)
