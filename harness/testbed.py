"""One way to describe a fleet and to start, wait for and stop it.

A fleet is backends (an app and an agent each), the agents a forwarding tier
or not (`FleetSpec`), on a `Place`: where its hosts are and how a process
starts there. `Loopback` gives each backend its own 127.x.y.z on this
machine; `harness.cluster.EmulatedHosts` a network namespace of the emulated
cluster each. `Testbed` starts a spec on a place, waits until every agent
hears its peers, restarts the agents with other settings, and stops what it
started. Tests (`harness.hunters.start_fleet`), the benches' fleet
(`benchlib.fleet.Fleet`, also on the emulated cluster) and the demo stand on it.

No new port or message: the testbed starts agents with the tier's options
and reads their admin API; the tier's trust model is the agent's
(docs/agent.md, "Forwarding"). Its cost: n apps and n agents started one
after another, then `wait_heard` reads each agent's /metrics once a round
(every 50 ms at the most): at 10 or 100 backends a round takes milliseconds,
at 1000 about a second of sequential reads, within its timeout (15 s and a
quarter second a backend).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from harness.net import app_stats, metrics, wait_http, wait_until
from harness.procs import Addrs, Proc, Procs, agent_default, binary

# The agents' UDP port for the tier (`fleet_listen`), the same on every host.
FLEET_PORT = 9700


def peers_of(hosts: list[str], port: int = FLEET_PORT) -> str:
    """A `fleet_peers` value naming each host's tier port."""
    return ",".join(f"{h}:{port}" for h in hosts)


def tier_opts(host: str, peers: str, key_file: str, port: int = FLEET_PORT) -> dict:
    """The agent options that make the agent on `host` a member of the tier
    (`peers`: the `fleet_peers` value, a list or a name that resolves)."""
    return {"fleet_listen": f"{host}:{port}", "fleet_peers": peers, "fleet_key_file": key_file}


def heard_of(n: int, sample: int | None = None) -> int:
    """How many peers each agent of a tier of `n` hears with `fleet_sample`
    = sample (None: the agent's default; 0: every other member)."""
    sample = int(agent_default("fleet_sample")) if sample is None else int(sample)
    return n - 1 if sample == 0 else min(sample, n - 1)


def heard_at(admin: str) -> int:
    """Members the agent at `admin` heard within fleet_dead_after_ms, taking
    forwards or benched for one they did not take (a withdrawn forward is the
    tier working, not a view lost)."""
    m = metrics(admin)
    return int(m["huntlb_fleet_peers"] + m.get("huntlb_fleet_peers_benched", 0))


def wait_heard(members: list, heard: int, timeout: float | None = None, what: str = "agent", read=None) -> None:
    """Until every member's agent hears at least `heard` peers (read(member),
    by default member.peers_heard()); an agent not listening yet hears none
    (a big fleet's agents take a moment to start). timeout: 15 s and a
    quarter second a member, unless given."""
    read = read or (lambda m: m.peers_heard())

    def heard_by(m) -> int:
        try:
            return read(m)
        except OSError:
            return 0
    n = len(members)
    wait_until(lambda: all(heard_by(m) >= heard for m in members), timeout=15 + n / 4 if timeout is None else timeout,
               every=0.05, what=f"every {what} hearing {heard} peers")


class Place(Protocol):
    """Where a fleet runs: hosts for its backends, and its processes on them.
    always_tier: its agents are members of the tier whatever the spec says
    (the emulated cluster's find their peers by the service's name)."""

    always_tier: bool
    fleet_port: int  # its agents' `fleet_listen` port

    def backend(self, app_opts: dict):
        """A new backend host with its app started (no agent yet)."""

    def start_app(self, b, app_opts: dict) -> None:
        """b's app (again, after a kill), on b's host."""

    def start_agent(self, b, agent_opts: dict) -> None:
        """b's agent (again, after a stop) with these options, waited for."""

    def peers(self, hosts: list[str]) -> str:
        """The `fleet_peers` value that names these members' tier ports."""

    def fleet_key(self) -> str:
        """The tier's shared key file."""

    def heard(self, b) -> int:
        """How many peers b's agent hears (harness.testbed.heard_at, read from where the place allows)."""


class Backend:
    """One backend on loopback: its app and its agent on one 127.x.y.z."""

    def __init__(self, host, app, agent, admin, app_proc, agent_proc):
        self.host, self.app, self.agent, self.admin = host, app, agent, admin
        self.app_proc, self.agent_proc = app_proc, agent_proc
        self.id = f"agent-{host}"

    def metrics(self) -> dict[str, float]:
        return metrics(self.admin)

    def refused(self) -> float:
        return self.metrics()['huntlb_offers_total{decision="refuse"}']

    def stats(self) -> dict:
        return app_stats(self.app)

    def peers_heard(self) -> int:
        return heard_at(self.admin)


def model_server(procs: Procs, host: str, **opts) -> tuple[Proc, str]:
    """An emulated model server (`huntlb-llm`, model `m`) on host:8000, once
    it answers /health; opts are its flags (max_num_seqs, time_scale, ...)."""
    addr = f"{host}:8000"
    argv = [binary("huntlb-llm"), "--listen", addr, "--model", "m"]
    for k, v in opts.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    p = procs.start(f"llm-{host}", argv)
    wait_http(addr, "/health", proc=p)
    return p, addr


class Loopback:
    """Every backend on this machine, on its own 127.x.y.z (`Addrs`). app:
    what each backend's app is, started as app(procs, host, **app_opts) ->
    (process, address): the workload app (`Procs.workload`) unless given,
    such as `model_server`."""

    always_tier = False
    fleet_port = FLEET_PORT

    def __init__(self, procs: Procs, addrs: Addrs, app: Callable[..., tuple[Proc, str]] = Procs.workload) -> None:
        self.procs, self.addrs, self.app = procs, addrs, app

    def backend(self, app_opts: dict) -> Backend:
        b = Backend(self.addrs.host(), None, None, None, None, None)
        self.start_app(b, app_opts)
        return b

    def start_app(self, b, app_opts: dict) -> None:
        b.app_proc, b.app = self.app(self.procs, b.host, **app_opts)

    def start_agent(self, b, agent_opts: dict) -> None:
        b.agent_proc, b.agent, b.admin = self.procs.agent(b.host, b.app, **agent_opts)

    def peers(self, hosts: list[str]) -> str:
        return peers_of(hosts, self.fleet_port)

    def fleet_key(self) -> str:
        return self.procs.fleet_key()

    def heard(self, b) -> int:
        return heard_at(b.admin)


class Beside(Loopback):
    """Another set of agents beside running backends' apps (one each, in
    their order), on ports of their own and in a tier of their own, so that
    a bench's arms over them run on the very same apps. ports: `listen`,
    `admin` and `fleet`; name: the set's, in its agents' process (and log)
    names. The apps are the other fleet's: this place starts none."""

    def __init__(self, procs: Procs, backends: list, ports: dict[str, int], name: str) -> None:
        super().__init__(procs, None)
        self.ports, self.name, self.fleet_port = ports, name, ports["fleet"]
        self._next = iter(backends)

    def backend(self, app_opts: dict) -> Backend:
        b = next(self._next, None)
        if b is None:
            raise ValueError(f"Beside {self.name}: more backends asked for than it was given")
        return Backend(b.host, b.app, None, None, b.app_proc, None)

    def start_app(self, b, app_opts: dict) -> None:
        raise ValueError(f"Beside {self.name}: its apps are another fleet's, started there")

    def start_agent(self, b, agent_opts: dict) -> None:
        b.agent, b.admin = f"{b.host}:{self.ports['listen']}", f"{b.host}:{self.ports['admin']}"
        argv = [binary("huntlb-agent"), "--listen", b.agent, "--admin", b.admin, "--app", b.app]
        for k, v in agent_opts.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        # a name of its own: Procs.agent's would share the other set's agent's log
        b.agent_proc = self.procs.start(f"agent-{self.name}-{b.host}", argv)
        wait_http(b.admin, "/metrics", proc=b.agent_proc)


@dataclass
class FleetSpec:
    """A fleet: one app's options per backend (`apps`), what every agent runs
    (`policy`, None: the agent's default; `agent`) and each its own (`each`:
    a list by index, or a function of the backend, for options that name
    its app's address),
    whether the agents form a tier (`tier`), and for a tier: `absent`, more
    members' hosts in `fleet_peers` where no agent runs (an attacker may), and
    `key_files`, each agent's own `fleet_key_file` (a key rotated one agent
    at a time; None: the place's one key)."""

    apps: list[dict]
    policy: str | None = None
    agent: dict = field(default_factory=dict)
    each: list[dict] | Callable[..., dict] | None = None
    tier: bool = True
    absent: tuple[str, ...] = ()
    key_files: list[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.apps)
        for key in ("each", "key_files"):
            v = getattr(self, key)
            if isinstance(v, list) and len(v) != n:
                raise ValueError(f"FleetSpec.{key}: {len(v)} entries for {n} backends")

    @property
    def sample(self) -> int | None:
        """Each agent's `fleet_sample` as given (None: the agent's default)."""
        v = self.agent.get("fleet_sample")
        return None if v is None else int(v)


class Testbed:
    """A FleetSpec started on a Place: `start()`, `wait_heard()`,
    `restart_agents(...)` with other settings, `stop()`; `backends` in order.
    backends: ones already running (started by another harness, such as
    harness.wiki's replicas), whose agents this testbed restarts; then no
    start()."""

    __test__ = False  # a name pytest would collect where a test module imports it

    def __init__(self, spec: FleetSpec, place: Place, backends: list | None = None) -> None:
        if backends is not None and len(backends) != len(spec.apps):
            raise ValueError(f"Testbed backends: {len(backends)} running for {len(spec.apps)} in the spec")
        self.spec, self.place = spec, place
        self.backends: list = list(backends or [])

    def start(self) -> "Testbed":
        """Every app, then every agent (each agent's peers are known before the
        first starts), returned once each agent of a tier hears its sample."""
        self.backends = [self.place.backend(opts) for opts in self.spec.apps]
        self._start_agents()
        return self

    def agent_opts(self, i: int) -> dict:
        """Backend i's agent options: the spec's, its own, the tier's."""
        s, b = self.spec, self.backends[i]
        own = s.each(b) if callable(s.each) else s.each[i] if s.each else {}
        opts = {**({} if s.policy is None else {"policy": s.policy}), **s.agent, **own}
        if self.tiered:
            peers = self.place.peers([*(x.host for x in self.backends), *s.absent])
            opts |= tier_opts(b.host, peers, s.key_files[i] if s.key_files else self.place.fleet_key(), self.place.fleet_port)
        return opts

    @property
    def tiered(self) -> bool:
        """Whether the agents are members of a tier (the spec's, or the place's way)."""
        return self.spec.tier or self.place.always_tier

    def start_agent(self, i: int) -> None:
        """Backend i's agent (again) as the spec has it."""
        self.place.start_agent(self.backends[i], self.agent_opts(i))

    def _start_agents(self) -> None:
        for i in range(len(self.backends)):
            self.start_agent(i)
        if self.tiered:
            self.wait_heard()

    def restart_agents(self, **changes) -> None:
        """Every agent stopped, then started again (fresh state) with the spec
        changed by `changes` (FleetSpec's fields), waited for as at start."""
        for b in self.backends:
            if b.agent_proc is not None:
                b.agent_proc.stop()
        self.spec = replace(self.spec, **changes)
        self._start_agents()

    def wait_heard(self, heard: int | None = None, timeout: float | None = None) -> None:
        """Until every agent hears `heard` peers (None: its sample, all
        others in a fleet no larger than the sample)."""
        wait_heard(self.backends, heard_of(len(self.backends), self.spec.sample) if heard is None else heard, timeout,
                   read=self.place.heard)

    def stop(self) -> None:
        """Every process this fleet's agents and apps run, by PID."""
        for b in self.backends:
            for p in (b.agent_proc, b.app_proc):
                if p is not None:
                    p.stop()
