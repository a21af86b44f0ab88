"""A fleet of emulated model servers (`huntlb-llm`), each with an agent beside
it in a forwarding tier (as tests/test_llm_gateway.py sets one up), and the
three kinds of gateway over it (`gateways`): the tier fronts (hunting, Envoy
or HAProxy), the proxy's own least-request straight to the servers (no agent
in the path), and an Envoy with its own endpoint picker (`huntlb-epp`, the
GIE-style baseline, bench/configs/epp-gateway.yaml). Used by
bench/llm_gateways.py and tests/test_llm_epp.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import yaml

from benchlib.fronts import MEASURED
from harness import Backend, HaproxyRoot, Proc, Procs, binary, envoy_bind_source, request, start_envoy, start_front, wait_http, wait_until
from harness.envoy import sock
from harness.testbed import Beside, FleetSpec, Loopback, Testbed, model_server

EPP_GATEWAY = Path(__file__).resolve().parents[1] / "configs" / "epp-gateway.yaml"
DEST = "x-gateway-destination-endpoint"


def llm_metrics(addr: str) -> dict[str, float]:
    """A model server's vLLM gauges and counters (one model)."""
    _, _, body = request(addr, "GET", "/metrics")
    out = {}
    for line in body.decode().splitlines():
        m = re.match(r'^([a-z_:]+)\{model_name="[^"]*"\} (\S+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def served(b: Backend) -> float:
    """Requests the model server finished (`vllm:request_success_total`)."""
    return llm_metrics(b.app)["vllm:request_success_total"]


def model_fleet(procs: Procs, addrs, n: int, seats: int, time_scale: float, agents: bool = True,
                policy: str = "dynamic:seen_margin=1", kv_blocks: int | None = None) -> list[Backend]:
    """n hosts, each an emulated model server with `seats` seats (max_num_seqs)
    at `time_scale` (and `kv_blocks` KV-cache blocks; None: the emulator's
    default), and (agents) a huntlb agent beside it, the agents a forwarding
    tier (harness.testbed)."""
    place = Loopback(procs, addrs, model_server)
    app = {"time_scale": time_scale, "max_num_seqs": seats, **({} if kv_blocks is None else {"kv_blocks": kv_blocks})}
    if not agents:
        return [place.backend(app) for _ in range(n)]
    # a model server's seats are its workers; a long generation answers no head for a while, which is not a stall
    spec = FleetSpec([app] * n, policy=policy, agent={"workers": seats, "app_stall_ms": 0, "id": None})
    return Testbed(spec, place).start().backends


# The ports of the second set of agents (`llm_agents`): beside the same
# servers as model_fleet's, on ports of their own, a tier of their own.
LLM_AGENT_PORTS = {"listen": 8081, "admin": 9911, "fleet": 9701}
# The third set (`llm_agents(..., prefix_bytes=...)`): prefix-affine, beside
# the same servers again, on ports and in a tier of their own.
PREFIX_AGENT_PORTS = {"listen": 8082, "admin": 9912, "fleet": 9702}
# The fourth (`llm_agents(..., kv_busy_at=...)`): load = llm with the KV-cache
# rule (`llm_metrics_url`, the server's own /metrics), again on ports and in a
# tier of their own.
KV_AGENT_PORTS = {"listen": 8083, "admin": 9913, "fleet": 9703}
# The fifth and sixth (`llm_agents(..., pass_plain=True)`): load = llm with
# `fleet_pass_plain`, under endpoint pickers that name the agent and know
# nothing of hunting (with prefix affinity too: the sixth), each on ports and
# in a tier of their own.
PLAIN_AGENT_PORTS = {"listen": 8084, "admin": 9914, "fleet": 9704}
PLAIN_PREFIX_AGENT_PORTS = {"listen": 8085, "admin": 9915, "fleet": 9705}


def llm_agents(procs: Procs, fleet: list[Backend], seats: int, policy: str = "dynamic:seen_margin=1",
               tokens_per_seat: int | None = None, bytes_per_token: int | None = None,
               prefix_bytes: int | None = None, prefix_bound: int | None = None,
               kv_busy_at: float | None = None, kv_poll_ms: int | None = None, pass_plain: bool = False,
               seen_while_free: bool | None = None) -> list[Backend]:
    """A second set of agents beside the same model servers as `fleet`, with
    load = "llm" (requests in flight plus the prompts waiting for prefill, in
    seats: docs/llm.md), on LLM_AGENT_PORTS and in a forwarding tier of their
    own, so a bench's arms over them run on the very servers, and requests,
    of the arms over `fleet`'s agents. `tokens_per_seat` and
    `bytes_per_token` None: the agent's defaults. With `prefix_bytes`: prefix
    affinity on (`llm_prefix_bytes`, and `llm_prefix_bound` unless None), a
    set of its own on PREFIX_AGENT_PORTS. With `kv_busy_at`: the KV-cache
    rule on (`llm_metrics_url` = the server's /metrics, `llm_kv_busy_at`, and
    `llm_metrics_poll_ms` unless `kv_poll_ms` is None), a set of its own on
    KV_AGENT_PORTS. With `pass_plain`: `fleet_pass_plain` on (a try no member
    marked is passed on as its front's `hunt-pass`), a set of its own on
    PLAIN_AGENT_PORTS, or PLAIN_PREFIX_AGENT_PORTS with `prefix_bytes`.
    `seen_while_free`: `llm_seen_while_free` (None: the agent's default)."""
    if pass_plain and kv_busy_at is not None:
        raise ValueError("pass_plain: no set of ports for it with kv_busy_at")
    ports, name = ((PLAIN_PREFIX_AGENT_PORTS, "plainprefix") if pass_plain and prefix_bytes else (PLAIN_AGENT_PORTS, "plain") if pass_plain
                   else (PREFIX_AGENT_PORTS, "prefix") if prefix_bytes else (KV_AGENT_PORTS, "kv") if kv_busy_at is not None
                   else (LLM_AGENT_PORTS, "llm"))
    opts = {"load": "llm", "workers": seats, "app_stall_ms": 0,
            "llm_prefill_tokens_per_seat": tokens_per_seat, "llm_bytes_per_token": bytes_per_token,
            "llm_prefix_bytes": prefix_bytes, "llm_prefix_bound": prefix_bound, "llm_kv_busy_at": kv_busy_at,
            "llm_metrics_poll_ms": kv_poll_ms, "fleet_pass_plain": "true" if pass_plain else None,
            "llm_seen_while_free": None if seen_while_free is None else str(seen_while_free).lower()}

    def kv(b: Backend) -> dict:
        return {"llm_metrics_url": f"http://{b.app}/metrics"} if kv_busy_at is not None else {}
    spec = FleetSpec([{}] * len(fleet), policy=policy, agent={k: v for k, v in opts.items() if v is not None}, each=kv)
    return Testbed(spec, Beside(procs, fleet, ports, name)).start().backends


def start_picker(procs: Procs, host: str, servers: list[str], interval_ms: int = 50, seed: int = 1,
                 prefix: bool = False, metrics_port: int | None = None) -> tuple[Proc, str]:
    """huntlb-epp on host:9002 over the model servers (ip:port each); with
    GIE's prefix-cache-scorer if `prefix`; `metrics_port`: the servers'
    /metrics read at their IP and this port (the picker naming the agents
    beside them, reading the engines' gauges)."""
    addr = f"{host}:9002"
    p = procs.start(f"epp-{host}", [binary("huntlb-epp"), "--listen", addr, "--server", ",".join(servers),
                                     "--interval-ms", str(interval_ms), "--seed", str(seed)] + (["--prefix-scorer"] if prefix else [])
                    + (["--metrics-port", str(metrics_port)] if metrics_port else []))
    wait_http(addr, "/.epp/metrics", proc=p)
    return p, addr


# What Envoy sends the picker of each request's body when it scores prefixes
# (ext_authz's with_request_body): up to 1 MiB (Envoy's default per-connection
# buffer), a longer body cut there and still checked (allow_partial_message,
# no 413), which the picker cannot parse: no prefix score. The shared-prefix
# workload's bodies are about 9 KB.
WITH_REQUEST_BODY = {"max_request_bytes": 1 << 20, "allow_partial_message": True}


def epp_gateway_config(listen: str, admin: str, picker: str, with_body: bool = False) -> dict:
    """bench/configs/epp-gateway.yaml pointed at these addresses; the check
    carrying the request's body if `with_body`."""
    cfg = yaml.safe_load(EPP_GATEWAY.read_text())
    cfg["admin"]["address"] = sock(admin)
    lst = cfg["static_resources"]["listeners"][0]
    lst["address"] = sock(listen)
    for f in lst["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]:
        if f["name"] == "envoy.filters.http.ext_authz":
            f["typed_config"]["http_service"]["server_uri"]["uri"] = f"http://{picker}"
            if with_body:
                f["typed_config"]["with_request_body"] = dict(WITH_REQUEST_BODY)
    epp = [c for c in cfg["static_resources"]["clusters"] if c["name"] == "epp"][0]
    epp["load_assignment"]["endpoints"][0]["lb_endpoints"] = [{"endpoint": {"address": sock(picker)}}]
    return cfg


class EppGateway:
    """One Envoy and its own picker over the model servers."""

    def __init__(self, procs: Procs, addrs, servers: list[str], interval_ms: int = 50, seed: int = 1, concurrency: int = 1,
                 prefix: bool = False, metrics_port: int | None = None):
        """`servers`: where requests go; with `metrics_port` these are the
        agents beside the model servers (the picker reads each engine's
        /metrics at the agent's IP and that port), and the gateway's
        connections leave from its own IP, which agents with
        `fleet_pass_plain` count it by."""
        host = addrs.host()
        self.picker_proc, self.picker = start_picker(procs, host, servers, interval_ms, seed, prefix, metrics_port)
        self.listen, self.admin = f"{host}:10000", f"{host}:9902"
        cfg = epp_gateway_config(self.listen, self.admin, self.picker, prefix)
        if metrics_port:
            envoy_bind_source(cfg, host)
        self.proc = start_envoy(procs, f"epp-gateway-{host}", cfg, concurrency=concurrency)
        # the picker has scraped every server once
        wait_until(lambda: self.picker_stats()["huntlb_epp_scrapes_total"] >= 2 * len(servers), what="the picker scraping")

    def picker_stats(self) -> dict[str, float]:
        _, _, body = request(self.picker, "GET", "/.epp/metrics")
        out = {}
        for line in body.decode().splitlines():
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
        return out


# A model server's own health path (`huntlb-llm`): the least-request fronts'
# checks go to it, as there is no agent to answer /.hunt/health.
SERVER_HEALTH = "/health"


def _server_health(cfg: dict) -> dict:
    for c in cfg["static_resources"]["clusters"]:
        for hc in c.get("health_checks", []):
            hc["http_health_check"]["path"] = SERVER_HEALTH
    return cfg


@dataclass
class Gateway:
    """One gateway of an arm: where clients send, the processes it runs
    (proxy, and picker), and its picker if it has one."""

    target: str  # host:port
    pids: list[int]
    picker: EppGateway | None = None
    proc: Proc | None = field(default=None, repr=False)


def gateways(procs: Procs, addrs, fleet: list[Backend], kind: str, n: int, proxy: str = "envoy", hr: HaproxyRoot | None = None,
             interval_ms: int = 50, seed: int = 1, via_agents: bool = False) -> list[Gateway]:
    """n gateways of one kind over the fleet:

    * "hunt": the shipped tier front (envoy-filter/examples/front-tier.yaml or
      haproxy-lua/examples/front-tier.cfg: the proxy's least-request plus
      `hunt-pass`) over the agents;
    * "lr": the same file without its hunting lines (harness: hunting=False),
      straight to the model servers, so no agent is in the path: Envoy's
      FULL_SCAN least-request, or HAProxy's leastconn, health-checking each
      server's /health;
    * "epp": Envoy with its own picker, straight to the servers (Envoy only);
    * "eppp": the same, the picker scoring prefixes too (GIE's
      prefix-cache-scorer; Envoy sends it the body);
    * "epp"/"eppp" with `via_agents`: the picker names the fleet's agents
      (agents with `fleet_pass_plain`, which pass a pick on when their
      server is full) and reads the engines' /metrics beside them.

    Envoy runs one worker, HAProxy one thread (nbthread 1)."""
    if kind in ("epp", "eppp"):
        if proxy != "envoy":
            raise ValueError("the EPP gateway is Envoy's (ext_authz)")
        servers = [b.agent for b in fleet] if via_agents else [b.app for b in fleet]
        metrics_port = int(fleet[0].app.rpartition(":")[2]) if via_agents else None
        gws = [EppGateway(procs, addrs, servers, interval_ms=interval_ms, seed=seed + i, prefix=kind == "eppp", metrics_port=metrics_port)
               for i in range(n)]
        return [Gateway(g.listen, [g.proc.pid, g.picker_proc.pid], g, g.proc) for g in gws]
    if kind not in ("hunt", "lr"):
        raise ValueError(f"no gateway kind {kind!r}")
    hunting = kind == "hunt"
    backends = fleet if hunting else [SimpleNamespace(agent=b.app) for b in fleet]
    if proxy == "envoy":
        edit = None if hunting else _server_health
        kw = {"example": "front-tier.yaml", "edit": edit}
    elif proxy == "haproxy":
        if hr is None:
            raise ValueError("HAProxy gateways need a HaproxyRoot")
        edit = None if hunting else (lambda t: t.replace("option httpchk GET /.hunt/health", f"option httpchk GET {SERVER_HEALTH}"))
        kw = {"example": "front-tier.cfg", "edit": edit, "hr": hr, "threads": 1}
    else:
        raise ValueError(f"no proxy {proxy!r}")
    out = []
    for i in range(n):
        f = start_front(proxy, procs, addrs, backends, hunting, served_by=False, name=f"{kind}-{proxy}-{i}", **MEASURED, **kw)
        out.append(Gateway(f.url.removeprefix("http://").rstrip("/"), [f.pid], None, f.proc))
    return out
