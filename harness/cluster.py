"""An emulated cluster on one machine: hosts as network namespaces on one
bridge, DNS like a Kubernetes headless service, and faults as methods.

```text
 hub namespace:  br0 ── v1 ── v2 ── v3 ── ...      (a bridge; no address)
                        │     │     │
 host namespaces:      eth0  eth0  eth0            10.77.S.x/24, S per run
                       dns   client b1 (app+agent) ... f1 (a front) ...
```

* **Hosts**: one namespace per backend host (its app and agent on the host's
  own address), per front, one for the client (the tests' requests and reads
  come from it: `Cluster.call`, `Cluster.inside`) and one for DNS. Each host
  is joined to the hub's bridge by a veth pair whose ends live in the hub and
  in the host: no interface is ever made in the root namespace, and no route
  leads out of the bridge, so nothing leaves the machine.
* **DNS**: Debian's dnsmasq in the `dns` host answers for `svc.cluster.local`
  from a `--hostsdir` (TTL 1 s): `backends.svc.cluster.local` has an A record
  per published backend host, as a headless service has one per ready pod.
  Scaling is a file written or removed (`publish`, `withdraw`), which dnsmasq
  reads at once (inotify). Each host's `/etc/netns/<ns>/resolv.conf` (which
  `ip netns exec` mounts over /etc/resolv.conf) has `search svc.cluster.local`
  and `options ndots:5`, as a pod's has: the agents' `fleet_peers =
  "backends:9700"` goes through glibc's resolver and its search list; Envoy
  (STRICT_DNS, c-ares) and HAProxy (`resolvers` with `parse-resolv-conf`,
  `server-template`) read the same file.
* **Faults**: `Host.kill` (every process of the host at once, SIGKILL),
  `loss` (iptables `statistic --mode random` on the fleet's UDP port inside
  the hosts), `partition` (the fleet port cut from one host: in, out or both),
  `dns_outage` (port 53 dropped from a host), `publish`/`withdraw` (scaling by
  DNS), `delay` (each packet a host sends held D +- J us by `huntlb-delay`
  on an NFQUEUE in the host: this kernel has no netem). Each rule carries
  this run's comment and is deleted by its exact spec, and a fault's
  processes are stopped by PID (`Fault.heal`).
* **Cleanup**: `with Cluster(log_dir) as c:` (or `cluster(...)`) stops every
  process by PID, deletes every namespace, /etc/netns folder and state file it
  made, pass or fail. Names carry a per-run id (`hlb<run>-<host>`), and the
  run's owner (PID and start time) is written under /run/huntlb-cluster before
  anything is made: a new cluster first removes what runs whose owner is gone
  (a run SIGKILLed midway) left behind, and never touches a live run's.

Needs root (network namespaces, iptables, /etc/netns).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import random
import re
import secrets
import shutil
import socket
import threading
import time
from pathlib import Path

import yaml

from harness.clusterhosts import AGENT_PORT, DOMAIN, SERVICE, Backend, Fault, Front, Host
from harness.envoy import EXAMPLES
from harness.fronts import TIER_EXAMPLES, start_front
from harness.haproxy import HaproxyRoot
from harness.net import wait_until
from harness.netns import NETNS_ETC, PREFIX, STATE, inside, reap_stale, remove_run, run_ip, starttime
from harness.procs import Procs, binary
from harness.testbed import FLEET_PORT, FleetSpec, Testbed, wait_heard


class Cluster:
    """Hosts on one bridge, DNS, and the processes on them. Build with
    `start()` (or `with`), add hosts with `backend()` and `front()`; `stop()`
    removes everything it made."""

    def __init__(self, log_dir: Path) -> None:
        if os.geteuid() != 0:
            raise PermissionError("the emulated cluster needs root (network namespaces, iptables, /etc/netns)")
        for tool in ("ip", "iptables", "dnsmasq", "getent"):
            if not shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
                raise FileNotFoundError(f"{tool} not found: run `make setup` (iproute2, iptables, dnsmasq-base)")
        self.procs = Procs(Path(log_dir))
        self.run = ""
        self.hosts: dict[str, Host] = {}
        self.faults: list[Fault] = []
        self._faults = itertools.count(1)
        self.reaped: list[str] = []

    # --- building ---------------------------------------------------------

    def start(self) -> Cluster:
        self.reaped = reap_stale()
        self.procs.log_dir.mkdir(parents=True, exist_ok=True)
        while True:
            self.run = secrets.token_hex(3)
            try:
                (STATE / self.run).mkdir(mode=0o755, parents=True)
                break
            except (FileExistsError, FileNotFoundError):  # drawn before, or STATE removed meanwhile by another run
                continue
        os.chmod(STATE, 0o755)  # dnsmasq reads its hostsdir in here as nobody
        self.state = STATE / self.run
        # The owner, before anything is made: what a run leaves behind is
        # stale exactly when this process is gone (reap_stale).
        tmp = self.state / "owner.tmp"
        tmp.write_text(f"{os.getpid()} {starttime(os.getpid())}\n")
        tmp.rename(self.state / "owner")
        # Any /24 of 10.77.0.0/16: the bridge is this run's alone, so two runs
        # on one subnet could not meet anyway; a different one per run keeps
        # their logs apart.
        self.subnet = f"10.77.{random.randrange(1, 255)}"
        self._addrs = itertools.count(10)
        self.hostsdir = self.state / "hosts"
        self.hostsdir.mkdir(mode=0o755)
        self.hub = f"{PREFIX}{self.run}-hub"
        run_ip("netns", "add", self.hub)
        run_ip("-n", self.hub, "link", "set", "lo", "up")
        run_ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        run_ip("-n", self.hub, "link", "set", "br0", "up")
        self.dns = self._host(Host, "dns", f"{self.subnet}.53")
        self._start_dns()
        self.client = self._host(Host, "client", f"{self.subnet}.250")
        return self

    def _host(self, cls, name: str, ip: str | None = None):
        if name in self.hosts:
            raise ValueError(f"host {name} exists")
        h = cls(self, name, ip or f"{self.subnet}.{next(self._addrs)}")
        run_ip("netns", "add", h.ns)
        self.hosts[name] = h  # from here on, stop() removes it
        etc = NETNS_ETC / h.ns
        etc.mkdir(parents=True)
        # a pod's resolver: the cluster DNS, the service domain searched
        # first, ndots:5 (every name with fewer dots tries the search list)
        (etc / "resolv.conf").write_text(f"nameserver {self.subnet}.53\nsearch {DOMAIN}\noptions ndots:5 timeout:1 attempts:2\n")
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{h.ip} {name}\n")
        veth = f"v{len(self.hosts)}"
        run_ip("-n", self.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
        run_ip("-n", self.hub, "link", "set", veth, "master", "br0", "up")
        run_ip("-n", h.ns, "link", "set", "lo", "up")
        run_ip("-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", "eth0")
        run_ip("-n", h.ns, "link", "set", "eth0", "up")
        return h

    def _start_dns(self) -> None:
        self._hostsfile("dns", f"{self.dns.ip} dns.{DOMAIN}\n")
        self.dnsmasq = self.dns.start("dnsmasq", [
            "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--pid-file=", "--log-facility=-",
            "--no-resolv", "--no-hosts", "--no-poll",
            f"--listen-address={self.dns.ip}", "--bind-interfaces",
            f"--local=/{DOMAIN}/",          # answer for the domain from the hosts files only (no upstream)
            f"--hostsdir={self.hostsdir}",  # read again on every change (inotify)
            "--local-ttl=1",                # Kubernetes' CoreDNS gives 5 s; 1 s keeps the tests short
            "--neg-ttl=1",
            "--log-queries",
        ])
        wait_until(lambda: self.dns.resolve(f"dns.{DOMAIN}") == [self.dns.ip] or not self.dnsmasq.alive(), timeout=10,
                   what="dnsmasq answering")
        if not self.dnsmasq.alive():
            raise RuntimeError(f"dnsmasq exited:\n{self.dnsmasq.log()}")

    def _hostsfile(self, name: str, text: str) -> None:
        tmp = self.hostsdir / f".{name}.tmp"
        tmp.write_text(text)
        os.chmod(tmp, 0o644)
        tmp.rename(self.hostsdir / name)  # one event, a complete file

    def _made(self, path: Path) -> None:
        """A path outside the log folder that this run made (removed with it)."""
        with open(self.state / "paths", "a") as f:
            f.write(f"{path}\n")

    def backend(self, name: str | None = None, publish: bool = True, app_opts: dict | None = None, **agent_opts) -> Backend:
        """A new backend host: app, then agent; published in DNS (a ready
        pod's record) unless publish=False."""
        b = EmulatedHosts(self).backend(app_opts or {}, name)
        b.start_agent(**agent_opts)
        if publish:
            self.publish(b)
        return b

    def backends(self) -> list[Backend]:
        return [h for h in self.hosts.values() if isinstance(h, Backend)]

    def published(self) -> list[str]:
        return sorted(p.name for p in self.hostsdir.iterdir() if not p.name.startswith(".") and p.name != "dns")

    def publish(self, b: Backend) -> None:
        """Scale out by DNS: b's A record under the service's name."""
        self._hostsfile(b.name, f"{b.ip} {SERVICE}.{DOMAIN} {b.name}.{DOMAIN}\n")

    def withdraw(self, b: Backend) -> None:
        """Scale in by DNS: b's record removed (its processes run on)."""
        with contextlib.suppress(FileNotFoundError):
            (self.hostsdir / b.name).unlink()

    def front(self, kind: str = "envoy", name: str | None = None, expect: int | None = None, hold_timeout: str | None = "1h",
              hunting: bool = True, slots: int = 8) -> Front:
        """A tier front of `kind` (envoy, haproxy-2.6, haproxy-3.0) on its own
        host, over the service's name; returned once its checks pass for
        `expect` backends (the published ones by default). hold_timeout:
        HAProxy's `hold timeout` (None: its default, 30 s, after which a DNS
        server that does not answer takes every server out, docs/cluster.md).
        hunting=False: the same front with its hunting lines removed (the
        proxy's own least-loaded pick, the baseline). slots: HAProxy's
        server-template size, the most backends it can hold."""
        name = name or f"f{sum(isinstance(h, Front) for h in self.hosts.values()) + 1}"
        hr = None
        if kind.startswith("haproxy-"):
            hr = HaproxyRoot(kind.split("-", 1)[1])
            self._made(hr.dir)
            self.procs.cleanups.append(hr.cleanup)
        elif kind != "envoy":
            raise ValueError(f"front kind {kind}: envoy, haproxy-2.6 or haproxy-3.0")
        f = self._host(Front, name)
        want = {f"{self.hosts[n].ip}:{AGENT_PORT}" for n in self.published()} if expect is None else expect
        f.started = start_front(kind, self.procs, None, [], hunting=hunting, example=TIER_EXAMPLES[kind.partition("-")[0]], hr=hr,
                                edit=envoy_by_dns if kind == "envoy" else functools.partial(haproxy_by_dns, slots, hold_timeout),
                                where=f, expect=want, timeout=20)
        return f

    def wait_fleet(self, timeout: float = 15) -> None:
        """Until every running agent hears every other published one (fleets of
        up to fleet_sample + 1 members: each hears all)."""
        published = self.published()
        wait_heard([b for b in self.backends() if b.agent_proc and b.agent_proc.alive() and b.name in published],
                   len(published) - 1, timeout=timeout)

    # --- from the client host -----------------------------------------------

    def call(self, fn, *args, **kw):
        """fn(*args, **kw) from the client host (this thread enters its
        namespace for the call): every test's request and read comes from there."""
        with inside(self.client.ns):
            return fn(*args, **kw)

    # --- faults -------------------------------------------------------------

    def _fault(self, what: str) -> Fault:
        f = Fault(self, what)
        self.faults.append(f)
        return f

    def loss(self, hosts: list[Host], p: float, port: int = FLEET_PORT) -> Fault:
        """Each UDP datagram arriving at `port` on these hosts is dropped with
        probability p (so p per datagram between two of them)."""
        f = self._fault(f"loss {p} on udp/{port}")
        for h in hosts:
            f.add(h, "INPUT", ["-p", "udp", "--dport", str(port), "-m", "statistic", "--mode", "random", "--probability", str(p)])
        return f

    def partition(self, host: Host, way: str = "both", port: int = FLEET_PORT) -> Fault:
        """The fleet's UDP port cut from `host`: `in` (it hears no one), `out`
        (no one hears it) or `both`. TCP (forwards, the fronts) still flows."""
        if way not in ("in", "out", "both"):
            raise ValueError("way: in, out or both")
        f = self._fault(f"partition {way} udp/{port} at {host.name}")
        if way in ("in", "both"):
            f.add(host, "INPUT", ["-p", "udp", "--dport", str(port)])
        if way in ("out", "both"):
            f.add(host, "OUTPUT", ["-p", "udp", "--dport", str(port)])
        return f

    def dns_outage(self, host: Host) -> Fault:
        """`host` loses its DNS server: every query it sends to port 53 (UDP
        and TCP) is dropped, so its resolvers time out."""
        f = self._fault(f"no dns at {host.name}")
        for proto in ("udp", "tcp"):
            f.add(host, "OUTPUT", ["-p", proto, "--dport", "53"])
        return f

    def delay(self, hosts: list[Host], us: int = 250, jitter_us: int = 50, seed: int | None = None) -> Fault:
        """Every packet these hosts send out of their eth0 held `us` +-
        `jitter_us` microseconds (uniform), as a link's delay: this kernel has
        no netem, so each host runs `huntlb-delay` on an NFQUEUE (the fault's
        number) in its namespace, its OUTPUT to eth0 queued to it. A hop
        between two delayed hosts is held once each way (at its sender), so a
        round trip gains about 2 `us`; a hop from an undelayed host is not held.
        Loopback (an agent to its app) is not held. `--queue-bypass`: a
        delayer that is gone lets packets pass (a dead one black-holes no
        host). The delayers' counts: `delay_counts(fault)` after the heal."""
        f = self._fault(f"delay {us}+-{jitter_us} us")
        seed = random.randrange(2**32) if seed is None else seed
        try:
            for i, h in enumerate(hosts):
                p = h.start(f"delay-{h.name}-{f.num}", [
                    binary("huntlb-delay"), "--queue", str(f.num), "--delay-us", str(us), "--jitter-us", str(jitter_us),
                    "--seed", str(seed + i), "--fail-open"])
                f.procs.append(p)
                wait_until(lambda: " bound: " in p.log() or not p.alive(), timeout=10, what=f"huntlb-delay on {h.name}")
                if not p.alive():
                    raise RuntimeError(f"huntlb-delay on {h.name} exited:\n{p.log()}")
                f.add(h, "OUTPUT", ["-o", "eth0"], ("NFQUEUE", "--queue-num", str(f.num), "--queue-bypass"))
        except BaseException:
            f.heal()
            raise
        return f

    # --- measuring ------------------------------------------------------------

    def rtt(self, src: Host, dst: Host, n: int = 1000, port: int = 9800) -> list[float]:
        """Round trips (microseconds) of `n` UDP pings, one at a time, from
        `src` to an echo on `dst` (both in their namespaces); lost ones (1 s)
        are left out."""
        ready, stop = threading.Event(), threading.Event()

        def echo():
            with inside(dst.ns), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind((dst.ip, port))
                s.settimeout(0.2)
                ready.set()
                while not stop.is_set():
                    try:
                        data, peer = s.recvfrom(64)
                    except TimeoutError:
                        continue
                    s.sendto(data, peer)

        t = threading.Thread(target=echo, daemon=True)
        t.start()
        out = []
        try:
            if not ready.wait(5):
                raise RuntimeError(f"no echo on {dst.name}")
            with inside(src.ns), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(1.0)
                s.connect((dst.ip, port))
                for i in range(n):
                    msg = i.to_bytes(4, "big")
                    t0 = time.perf_counter()
                    s.send(msg)
                    try:
                        while s.recv(64) != msg:  # a late answer to an earlier, lost ping
                            pass
                    except TimeoutError:
                        continue
                    out.append((time.perf_counter() - t0) * 1e6)
        finally:
            stop.set()
            t.join(2)
        return out

    # --- teardown -------------------------------------------------------------

    def stop(self) -> None:
        """Every process by PID, every rule, namespace, /etc/netns folder and
        state file this run made; whatever failed before."""
        try:
            for f in list(self.faults):
                with contextlib.suppress(Exception):
                    f.heal()
            self.procs.stop_all()
        finally:
            if self.run:
                remove_run(self.run)

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


class EmulatedHosts:
    """harness.testbed's Place on the emulated cluster: each backend a host
    of its own, published in DNS once its agent runs (a ready pod's record);
    the agents always a tier, finding their peers by the service's name."""

    always_tier = True
    fleet_port = FLEET_PORT

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def backend(self, app_opts: dict, name: str | None = None) -> Backend:
        c = self.cluster
        b = c._host(Backend, name or f"b{len(c.backends()) + 1}")
        b.start_app(**app_opts)
        return b

    def start_app(self, b: Backend, app_opts: dict) -> None:
        b.start_app(**app_opts)

    def start_agent(self, b: Backend, agent_opts: dict) -> None:
        b.agent_opts = {}  # the spec's options whole, none left from an earlier start
        b.start_agent(**agent_opts)
        if b.name not in self.cluster.published():
            self.cluster.publish(b)

    def peers(self, hosts: list[str]) -> str:
        return f"{SERVICE}:{FLEET_PORT}"

    def fleet_key(self) -> str:
        return self.cluster.procs.fleet_key()

    def heard(self, b: Backend) -> int:
        return b.peers_heard()  # from the client host


@contextlib.contextmanager
def cluster(log_dir: Path, backends: int = 3, fronts: tuple[str, ...] = ("envoy",), app_opts: dict | None = None, **agent_opts):
    """A cluster with `backends` published backend hosts whose agents all hear
    each other, and `fronts` over them; everything removed on the way out."""
    with Cluster(log_dir) as c:
        Testbed(FleetSpec([dict(app_opts or {})] * backends, agent=dict(agent_opts)), EmulatedHosts(c)).start()
        for kind in fronts:
            c.front(kind)
        yield c


FQDN = f"{SERVICE}.{DOMAIN}"


def envoy_by_dns(cfg: dict) -> dict:
    """front-tier.yaml's cluster finding its backends by the service's name
    (STRICT_DNS, examples/discovery-dns.yaml), and one access log line per
    request: what failed, where, and why (RESPONSE_FLAGS)."""
    cluster = cfg["static_resources"]["clusters"][0]
    for k in ("type", "load_assignment"):
        cluster.pop(k, None)
    cluster.update(yaml.safe_load((EXAMPLES / "discovery-dns.yaml").read_text()))
    # no `resolvers`: c-ares reads the host's resolv.conf, as in a pod
    cluster["typed_dns_resolver_config"]["typed_config"].pop("resolvers")
    cluster["load_assignment"]["endpoints"][0]["lb_endpoints"] = [
        {"endpoint": {"address": {"socket_address": {"address": FQDN, "port_value": AGENT_PORT}}}}]
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["access_log"] = [{"name": "envoy.access_loggers.stdout", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
        "log_format": {"text_format_source": {"inline_string":
            "access %REQ(:PATH)% %RESPONSE_CODE% %RESPONSE_FLAGS% upstream=%UPSTREAM_HOST% "
            "attempts=%UPSTREAM_REQUEST_ATTEMPT_COUNT% %UPSTREAM_TRANSPORT_FAILURE_REASON% %DURATION%ms\n"}}}}]
    return cfg


def haproxy_by_dns(slots: int, hold_timeout: str | None, text: str) -> str:
    """front-tier.cfg's servers as `slots` server-template slots filled from
    the service's A records (as HAProxy's own docs do for Consul or Kubernetes
    services), and one log line per request (-db: stdout): status, server,
    termination state, retries."""
    text = text.replace("global\n", "global\n    log stdout format raw daemon\n", 1)
    text = text.replace("defaults\n", "defaults\n    log global\n    option httplog\n", 1)
    return text + (
        f"    server-template web {slots} {FQDN}:{AGENT_PORT} resolvers cluster init-addr none resolve-prefer ipv4\n\n"
        "resolvers cluster\n"
        "    parse-resolv-conf           # the host's resolv.conf: the cluster DNS\n"
        "    accepted_payload_size 8192\n"
        "    timeout resolve 1s\n"
        "    timeout retry 1s\n"
        "    hold valid 1s               # the records' TTL\n"
        # With no answer at all (the DNS server unreachable), HAProxy keeps
        # the last addresses only `hold timeout` (30 s by default), then
        # puts every server in maintenance: a DNS outage becomes a total
        # one. The health checks, not DNS, say whether a backend is gone.
        + (f"    hold timeout {hold_timeout}        # keep the last answer while DNS is down\n" if hold_timeout else ""))


def delay_counts(f: Fault) -> list[dict[str, float]]:
    """What each delayer of a healed delay fault said on its way out: packets,
    cpu_us, us_per_packet, held_most, late_us_p50/p99/max (how long after its
    due time a packet went)."""
    out = []
    for p in f.procs:
        m = re.search(r"done: (.*)", p.log_path.read_text(errors="replace"))  # its log is closed by now
        if m:
            words = m.group(1).split()
            out.append({k: float(v) for k, v in zip(words[::2], words[1::2])})
    return out
