"""What dockerd changes on a machine and leaves when it exits, read so that a
test can compare before `scripts/docker-setup.sh start` and after `stop`: the
iptables and ip6tables rules (through the backend `iptables` is on this
machine; iptables-save's comments and counters left out), nftables' tables,
the forwarding sysctls dockerd turns on (and what they rewrite) and the
network interfaces. Reading the rules needs root: sudo -n when not root."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
SYSCTLS = ["/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv4/conf/*/forwarding", "/proc/sys/net/ipv4/conf/all/accept_redirects",
           "/proc/sys/net/ipv6/conf/*/forwarding", "/proc/sys/net/bridge/bridge-nf-call-ip*tables"]


def as_root() -> list[str] | None:
    """The prefix that runs a command as root here ([] as root), or None."""
    if os.geteuid() == 0:
        return []
    sudo = shutil.which("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True).returncode == 0:
        return [sudo, "-n"]
    return None


def root_run(*argv: str) -> str:
    prefix = as_root()
    assert prefix is not None, "needs root or sudo without a password"
    tool = shutil.which(argv[0], path=SBIN) or argv[0]
    p = subprocess.run(prefix + [tool, *argv[1:]], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, f"{' '.join(argv)}: {p.stderr}"
    return p.stdout


def machine_state() -> dict[str, str]:
    state = {}
    for tool in ("iptables-save", "ip6tables-save"):
        if shutil.which(tool, path=SBIN):
            state[tool] = "\n".join(re.sub(r" \[\d+:\d+\]$", "", line) for line in root_run(tool).splitlines()
                                    if not line.startswith("#"))
    if shutil.which("nft", path=SBIN):
        # sorted: the order is the tables' creation order, which means nothing
        state["nft list tables"] = "\n".join(sorted(root_run("nft", "list", "tables").splitlines()))
    for pattern in SYSCTLS:
        for path in sorted(glob.glob(pattern)):
            with open(path) as f:
                state[path] = f.read().strip()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    state["links"] = " ".join(sorted(line.split(": ")[1].split("@")[0] for line in links.splitlines()))
    return state


def differences(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """{key: (before, after)} for every key whose value differs."""
    return {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)}
