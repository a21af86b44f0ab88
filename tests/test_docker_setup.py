"""`scripts/docker-setup.sh start` then `stop` leave the machine as they found
it. dockerd creates iptables chains and rules (and the
filter and nat tables, if absent), sets the FORWARD policy to DROP, turns IPv4
forwarding on (which rewrites every interface's forwarding and turns
conf/all/accept_redirects off) and makes docker0; it leaves them all when it
exits. Before, `stop` fed the saved iptables-save text back to iptables-restore:
on a machine with no rules that restored nothing, and every chain, rule, the
FORWARD DROP and ip_forward=1 stayed. Real dockerd, compared with what
iptables-save, ip6tables-save, nft and /proc/sys say (tests/docker_state.py).

Needs Docker (scripts/docker-setup.sh install) and root or sudo without a
password; skipped without them, and when a dockerd already answers (the script
then starts none). About 5 s a test."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from docker_state import SBIN, as_root, differences, machine_state, root_run

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "docker-setup.sh"


def docker_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


pytestmark = [
    pytest.mark.skipif(not (shutil.which("docker") and shutil.which("dockerd", path=SBIN)),
                       reason="no Docker: scripts/docker-setup.sh install"),
    pytest.mark.skipif(as_root() is None, reason="starting dockerd needs root or sudo without a password"),
]


@pytest.fixture
def no_dockerd():
    if docker_answers():
        pytest.skip("a dockerd is already running: the script starts none, there is nothing to undo")


def script(*args: str) -> str:
    p = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"docker-setup.sh {' '.join(args)} exited {p.returncode}: {p.stderr}"
    return p.stdout.strip()


def start_and_stop(before: dict[str, str]) -> None:
    """start (twice: the second starts nothing), see that dockerd changed the
    machine, stop (twice: the second undoes nothing more); each time as found."""
    pid = script("start")
    try:
        assert pid.isdigit(), f"start printed {pid!r}, not the PID of a dockerd it started"
        assert script("start") == "", "a second start started another dockerd"
        during = differences(before, machine_state())
        # what the test is about: else it proves nothing
        assert during.get("/proc/sys/net/ipv4/ip_forward", (None, None))[1] == "1" or before["/proc/sys/net/ipv4/ip_forward"] == "1", during
        assert ":DOCKER " in machine_state()["iptables-save"], during
    finally:
        if pid.isdigit():
            script("stop", pid)
    assert differences(before, machine_state()) == {}
    script("stop", pid)
    assert differences(before, machine_state()) == {}, "a second stop changed the machine"


def test_start_stop_leaves_the_machine_as_found(no_dockerd):
    start_and_stop(machine_state())


def test_start_stop_keeps_what_was_there(no_dockerd):
    # Rules of the machine's own in the filter table (one dockerd adds to) and
    # in ip6tables, and one interface forwarding on its own while ip_forward is
    # off: writing ip_forward back would turn it off, so it is put back after.
    before = machine_state()
    ipt = [("iptables", "192.0.2.1/32"), ("ip6tables", "2001:db8::1/128")]
    lo = "/proc/sys/net/ipv4/conf/lo/forwarding"
    try:
        for tool, addr in ipt:
            root_run(tool, "-N", "HUNTLB-TEST")
            root_run(tool, "-A", "HUNTLB-TEST", "-j", "RETURN")
            root_run(tool, "-A", "INPUT", "-s", addr, "-j", "HUNTLB-TEST")
        root_run("sh", "-c", f"echo 1 > {lo}")
        start_and_stop(machine_state())
    finally:
        # back to how this test found it
        for tool, addr in ipt:
            for argv in (["-D", "INPUT", "-s", addr, "-j", "HUNTLB-TEST"], ["-F", "HUNTLB-TEST"], ["-X", "HUNTLB-TEST"]):
                subprocess.run((as_root() or []) + [shutil.which(tool, path=SBIN) or tool, *argv], capture_output=True)
        root_run("sh", "-c", f"echo {before[lo]} > {lo}")
        # the tables the rules created, if there were none (iptables-nft)
        for family, tool in (("ip", "iptables-save"), ("ip6", "ip6tables-save")):
            if "*filter" not in before.get(tool, "*filter") and "nf_tables" in root_run(tool.replace("-save", ""), "--version"):
                root_run("nft", "delete", "table", family, "filter")
    assert differences(before, machine_state()) == {}
