"""Real HAProxy: Debian's 2.6 (Lua 5.3) on the host, 3.0 (Lua 5.4) from the
debootstrapped trixie root; the committed example configs pointed at a test's
addresses, and its runtime API."""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from harness.net import wait_http
from harness.procs import ROOT, Proc, Procs

HAPROXY_EXAMPLES = ROOT / "haproxy-lua" / "examples"
TRIXIE = Path(os.environ.get("HUNTLB_TRIXIE", "/opt/huntlb/trixie"))
HAPROXY_VERSIONS = ["2.6", "3.0"]


class HaproxyRoot:
    """Where a HAProxy runs: the host's 2.6 (Lua 5.3), or 3.0 (Lua 5.4) from the
    debootstrapped trixie root, run in place by trixie's own loader
    (scripts/trixie-haproxy): no chroot, so no root, on the host's files and loopback."""

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
        """A path as HAProxy sees it (both run on the host's files)."""
        return str(p)

    def argv(self, cfg: Path) -> list[str]:
        if self.root == Path("/"):
            return ["/usr/sbin/haproxy", "-db", "-f", str(cfg)]
        return [str(ROOT / "scripts" / "trixie-haproxy"), "-db", "-f", str(cfg)]

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
    if env_args is not None:
        text = re.sub(r'setenv HUNTLB_ARGS "[^"]*"', f'setenv HUNTLB_ARGS "{env_args}"', text)
    if keep_served_by:
        text = text.replace("http-response del-header hunt -m beg", "http-response del-header hunt -m str")
    if balance:
        text = re.sub(r"^(\s*)balance \S+.*$", rf"\1balance {balance}", text, flags=re.M)
    if not hunting:
        # Plain HAProxy from the same file: every hunting line is in a
        # `.if !defined(HUNTLB_OFF)` block, and a global setenv parsed before
        # them turns them off (a comment edit cannot change the baseline).
        text = "global\n    setenv HUNTLB_OFF 1\n" + text
    return text


def bind_source(text: str, ip: str) -> str:
    """Every backend's connections (and health checks) leave from `ip`
    (`source`): agents with `fleet_pass_plain` tell fronts apart by source
    IP, and on one host every front would otherwise leave from 127.0.0.1."""
    return re.sub(r"^(backend \S+.*)$", rf"\1\n    source {ip}", text, flags=re.M)


def start_haproxy(procs: Procs, hr: HaproxyRoot, name: str, cfg_text: str, wait_addr: str | None = None, wait_path: str = "/") -> Proc:
    cfg = hr.dir / f"{name}.cfg"
    cfg.write_text(cfg_text)
    p = procs.start(name, hr.argv(cfg))
    if wait_addr:
        wait_http(wait_addr, wait_path, proc=p, timeout=15)
    return p


def servers_section(backends: list, prefix: str = "web", opts: str = "") -> str:
    return "\n".join(f"    server {prefix}{i + 1} {b.agent}{' ' + opts if opts else ''}" for i, b in enumerate(backends))


def _least_pick():
    """haproxy-lua/tools/least_pick.py (a script users run, so not a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("least_pick", ROOT / "haproxy-lua" / "tools" / "least_pick.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


least_pick = _least_pick()


def random_offer(hr: HaproxyRoot, text: str) -> str:
    """The front with SRLB's random first candidate instead of its least-loaded
    one (the paper's hunting, which the benchmarks reproduce): the module keeps a
    map 0..n-1 -> usable server names, the offer is rand,mod(nbsrv) into it, no
    hunt-seen, and the final is random(1)'s."""
    mapfile = hr.inside(hr.dir / "huntlb-up.map")
    (hr.dir / "huntlb-up.map").write_text("")
    text = text.replace('setenv HUNTLB_ARGS "role=front backend=hunt"',
                        f'setenv HUNTLB_ARGS "role=front backend=hunt map={mapfile}"')
    text = least_pick.PICK_RE.sub("    http-request set-var(txn.hunt_offer) rand,mod(txn.hunt_n),"
                          f"map_str({mapfile}) if {{ var(txn.hunt_n) -m int ge 2 }}\n", text, count=1)
    text = re.sub(r"^\s*http-request add-header hunt-seen .*\n", "", text, flags=re.M)
    return re.sub(r"^(\s*)balance \S+.*$", r"\1balance random(1)", text, count=1, flags=re.M)


def haproxy_front_text(hr: HaproxyRoot, listen: str, stats: str, backends: list, server_opts: str = "",
                       offer: str = "least", example: str = "front.cfg", **kw) -> str:
    """The shipped front over `backends` (servers web1..webN, its pick block
    rewritten for them). offer="random": the paper's random first candidate
    (random_offer). example: front-tier.cfg, the front over a forwarding tier."""
    # Fronts of one test share a host name: each is named by its address.
    text = haproxy_config(hr, example, {"127.0.2.254:10000": listen, "${HAPROXY_LOCALPEER}": listen}, **kw)
    # the runtime API: the shipped unix socket moved to `stats` (a path, or a
    # test's own loopback host:port; `mode` is for unix sockets only)
    text = text.replace("stats socket /run/haproxy/huntlb-front.sock mode 600 level admin",
                        f"stats socket {stats} mode 600 level admin" if stats.startswith("/") else f"stats socket {stats} level admin")
    lines = [l for l in text.splitlines() if not re.match(r"\s*server web\d+ ", l)]
    text = "\n".join(lines) + "\n" + servers_section(backends, opts=server_opts) + "\n"
    if least_pick.BEGIN in text:  # front-tier.cfg has no pick block: leastconn picks
        text = least_pick.rewrite(text)
    return random_offer(hr, text) if offer == "random" else text


def wait_runtime(stats: str, proc: Proc, timeout: float = 15.0) -> None:
    """Until HAProxy answers on its runtime API (a unix socket path or host:port)."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.log()}")
        try:
            haproxy_runtime(stats, "show info")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{proc.name}: no runtime API on {stats} within {timeout}s") from None
            time.sleep(0.05)


def haproxy_runtime(stats: str, command: str) -> str:
    """One runtime API command over `stats`: a unix socket path or host:port."""
    if stats.startswith("/"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(stats)
    else:
        host, port = stats.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=5)
    with s:
        s.sendall(command.encode() + b"\n")
        out = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            out += c
    return out.decode()


def haproxy_servers(stats: str, backend: str = "hunt") -> list[dict[str, str]]:
    """The rows of `show stat` for `backend`'s servers (svname, addr, status, ...)."""
    out = haproxy_runtime(stats, "show stat")
    lines = out.splitlines()
    head = lines[0].lstrip("# ").split(",")
    rows = [dict(zip(head, l.split(","))) for l in lines[1:]]
    return [r for r in rows if r.get("pxname") == backend and r.get("svname") not in ("FRONTEND", "BACKEND", None)]


def haproxy_server_states(stats: str, backend: str = "hunt") -> dict[str, str]:
    """{server name: status} from `show stat` (UP, DOWN, MAINT, ...)."""
    return {r["svname"]: r["status"] for r in haproxy_servers(stats, backend)}
