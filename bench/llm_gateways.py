#!/usr/bin/env python3
"""Several gateways over one fleet of model servers, against one gateway's
ideal (make bench-llm-gateways).

A fleet of emulated model servers (`huntlb-llm`, SERVERS of them, SEATS
seats each, at TIME_SCALE of real time so it fits on 2 cores), each on its own
127.x address with a huntlb agent beside it (the agents a forwarding tier).
The same open-loop Poisson load of streamed completions (`huntlb-llmload`,
lognormal prompt and output lengths, one seed per repetition shared by every
arm) goes through each arm in turn:

For each gateway count N (1, 2 and 4), three arms:

* lrN: N Envoys with their own least-request (FULL_SCAN), straight to the
  model servers: no agent in the path, the proxy as strong as it goes;
* eppN: N Envoys, each with its own endpoint picker (`huntlb-epp`, GIE's
  default scoring, 50 ms scrapes), straight to the servers; epp1 is what
  users run today (GIE's one active EPP), the ideal a fleet of gateways is
  held to;
* epppN (run only when --arms names them): eppN with GIE's
  prefix-cache-scorer too (`huntlb-epp --prefix-scorer`, weight 3; Envoy
  sends it each request's body), each gateway's picker its own prefix index
  as GIE runs one EPP per gateway: the strongest picker on shared-prefix;
* huntN: N huntlb tier fronts (envoy-filter/examples/front-tier.yaml:
  Envoy's least-request plus hunt-pass) over the agents;

and the same on HAProxy at 1, 2 and 4 (ha-lrN: leastconn straight to the
servers; ha-huntN: haproxy-lua/examples/front-tier.cfg over the agents).
Run only when --arms names them, hunting arms over other agents beside the same
servers (AGENTS): huntNt (load = "llm"), huntpN (prefix affinity), huntkN (the
KV-cache rule); and the pickers over agents (bench/llm_pickers.py reports
them): eppaN and epppaN, eppN and epppN whose pickers name agents with
`fleet_pass_plain` (load = "llm"; epppxN: with prefix affinity too) beside the
same servers, reading the engines' /metrics beside them. The arms are a
table, ARMS (name -> Arm: kind, gateways, proxy, agents); a name is a label,
and what an arm runs is read from its Arm.
With N gateways the load is split among them (request i to gateway i mod N).

Each arm's gateways (and pickers) run only during its runs; the fleet is idle
(no request running or waiting anywhere) before each. Reported: TTFT p50 and
p99 and mean end-to-end time per run, and per arm the median over
repetitions of its ratio to epp1 in the same repetition, with 95% CIs.

Run it a repetition at a time (`--reps 1 --first-rep K`): each invocation
adds its runs to the data (bench/data/llm-gateways.json; `--out DIR` puts
data and report in DIR instead), and `--report-only` rewrites the report from
it.

Workloads (`--workload`, huntlb-llmload's shapes after inference-perf's):
sharegpt (the default and the first report), shared-prefix, long-prompt and
long-output, each with its own calibration (one server's throughput on it)
and its own rate, stored per workload; runs without a workload are sharegpt's.
Each arm's prompts carry the arm's name as a salt (same lengths, offsets and
groups, other bytes), so an arm never finds the previous arm's prompts in a
server's prefix cache.

The SLO rate (`--sweep`): for the arms given and one workload, one short run
(`--seconds`, 20 by default here) per arm at each of `--steps` loads (rho, a
fraction of the calibrated capacity; the same seed at a step for every arm),
then per arm the lowest offered rate at which TTFT p90 passes 500 ms of the
model's clock (the emulator runs at TIME_SCALE: 500 x TIME_SCALE = 250 ms of
real time), interpolated linearly between the two steps around it. Bounded:
a run's load generator is killed at its seconds + 300 s and the fleet is
given at most 120 s to drain, so a sweep takes at most steps x arms x
(seconds + 420) s; at the defaults (4 steps, 20 s) about steps x arms x 35 s
in practice (0.6-1.1 of capacity drains in seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from benchlib import data as rundata
from benchlib.llmfleet import gateways, llm_agents, llm_metrics, model_fleet
from benchlib.render import render, shown_in
from benchlib.reports import RESULTS, data_path, flag, machine, write_result
from benchlib.stats import ci95, median_ci95
from harness import Addrs, HaproxyRoot, Procs, agent_default, binary, wait_until

NAME = "llm-gateways"
SERVERS, SEATS, TIME_SCALE = 8, 4, 0.5
# the workload (huntlb-llmload's flags): ShareGPT-like in shape, not fitted to it
WORKLOAD = {"prompt_median": 192, "prompt_sigma": 0.9, "prompt_max": 2048,
            "output_median": 96, "output_sigma": 0.8, "output_max": 512}
# huntlb-llmload's workloads -> the flags this bench gives each (the others'
# lengths are huntlb-llmload's defaults for them, sources named there)
WORKLOADS = {"sharegpt": WORKLOAD, "shared-prefix": {}, "long-prompt": {}, "long-output": {}}
# the servers' flags a workload needs (huntlb-llm's; the others: its defaults).
# shared-prefix: GIE's high-cache run sends 256 system prompts of 2048 tokens
# (32,768 KV blocks of 16) to vLLM servers of about 27,500 blocks (the
# emulator's default, results/llm.md): one server holds 0.84 of them, so a
# gateway that spreads every prompt over every server finds some evicted.
# This bench's 32 groups keep that ratio: 27,500 x 32 / 256 blocks a server.
# long-output: a server bound by its KV cache before its seats, as a vLLM
# with a high --max-num-seqs is on long answers: 96 blocks of 16 tokens hold
# 2.7 of the workload's median sequences (64 + 512 tokens: 36 blocks) at
# their end, against 4 seats; a fourth long answer makes the server preempt.
SERVER_FLAGS = {"shared-prefix": {"kv_blocks": 27_500 * 32 // 256}, "long-output": {"kv_blocks": 96}}
DEFAULT_WORKLOAD = "sharegpt"
# The SLO of the sweep: TTFT p90 under 500 ms of the model's clock,
# which the emulator runs at TIME_SCALE
SLO_P90_MS = 500.0
# GIE's 50-ms scrape interval, on the emulator's clock: at TIME_SCALE every
# duration of the model is shorter, and so is the picker's wait for news
PICKER_INTERVAL_MS = round(50 * TIME_SCALE)
# llm_prefix_bytes: 64 tokens, inside every shared-prefix system prompt (2,048
# tokens) and past what tells two apart (its group's number, in the first 32
# bytes); llm_prefix_bound: the agent's default (None), or --prefix-bound
PREFIX_BYTES = 256

# The sets of agents beside the same servers, by name -> their options
# (benchlib.llmfleet.llm_agents; None: the model fleet's own agents, which
# count requests). A set starts only when an arm to run reaches it.
AGENTS: dict[str, dict | None] = {
    "counts": None,
    # load = "llm": requests in flight plus the prompts waiting for prefill, in seats (docs/llm.md § 5)
    "llm": {},
    # load = "llm" and a prompt's prefix kept at its home (`llm_prefix_bytes`: docs/llm.md § 7)
    "prefix": {"prefix_bytes": PREFIX_BYTES},
    # load = "llm" and the KV-cache rule (`llm_metrics_url`: a server at or past
    # llm_kv_busy_at of its cache counts as full, the agent's default, read
    # when the set starts; docs/llm.md § 5), the page read as often as a picker scrapes it
    "kv": {"kv_busy_at": "default", "kv_poll_ms": PICKER_INTERVAL_MS},
    # load = "llm" and `fleet_pass_plain`: under endpoint pickers that name
    # the agent and know nothing of hunting, a pick whose server is full is
    # passed on to a less loaded member (docs/llm.md, "Under your endpoint picker")
    "plain": {"pass_plain": True},
    # the same with prefix affinity
    "plainprefix": {"pass_plain": True, "prefix_bytes": PREFIX_BYTES},
}
PICKERS = ("epp", "eppp")


@dataclass(frozen=True)
class Arm:
    """What an arm runs: `gateways` gateways of `proxy`, each of `kind` (lr:
    the proxy's own least pick, straight to the servers; epp: Envoy with its
    own endpoint picker, GIE's default scoring; eppp: the same with GIE's
    prefix-cache-scorer; hunt: the tier fronts over the agents `agents`)."""
    kind: str
    gateways: int
    proxy: str
    # the agent set (AGENTS) a hunting arm's gateways reach; the straight arms
    # reach the servers only (the model fleet's)
    agents: str = "counts"
    # run when --arms names no arms
    by_default: bool = True
    # agent sets whose Envoy hunting arm at the same count this arm is also held against
    also_against: tuple[str, ...] = ()

    @property
    def via_agents(self) -> bool:
        """A picker arm whose picker names the agents of `agents` (with
        `fleet_pass_plain`), not the model servers."""
        return self.kind in PICKERS and self.agents != "counts"


# The arms, in the order the report lists them: each family at 1, 2 and 4
# gateways. A name is a label; what an arm runs is its Arm.
FAMILIES = [  # (name, with {n} for the count, Arm's fields but the count)
    ("epp{n}", dict(kind="epp", proxy="envoy")),
    ("eppp{n}", dict(kind="eppp", proxy="envoy", by_default=False)),
    ("lr{n}", dict(kind="lr", proxy="envoy")),
    ("hunt{n}", dict(kind="hunt", proxy="envoy")),
    ("ha-lr{n}", dict(kind="lr", proxy="haproxy")),
    ("ha-hunt{n}", dict(kind="hunt", proxy="haproxy")),
    ("hunt{n}t", dict(kind="hunt", proxy="envoy", agents="llm", by_default=False, also_against=("counts",))),
    ("huntp{n}", dict(kind="hunt", proxy="envoy", agents="prefix", by_default=False, also_against=("counts", "llm"))),
    ("huntk{n}", dict(kind="hunt", proxy="envoy", agents="kv", by_default=False, also_against=("counts", "llm"))),
    # the pickers users run, each gateway its own, naming agents with
    # fleet_pass_plain beside the servers (bench/llm_pickers.py reports them)
    ("eppa{n}", dict(kind="epp", proxy="envoy", agents="plain", by_default=False)),
    ("epppa{n}", dict(kind="eppp", proxy="envoy", agents="plain", by_default=False)),
    ("epppx{n}", dict(kind="eppp", proxy="envoy", agents="plainprefix", by_default=False)),
]
ARMS: dict[str, Arm] = {name.format(n=n): Arm(gateways=n, **fields) for name, fields in FAMILIES for n in (1, 2, 4)}
BASE = "epp1"


def arm_like(arm: str, **change) -> str | None:
    """The arm that runs what `arm` runs with `change` (gateways=1: its one-gateway arm); None if there is none."""
    want = replace(ARMS[arm], **change)
    return next((a for a, x in ARMS.items() if x == want), None)


def one_of_kind(arm: str) -> str:
    """The 1-gateway arm of an arm's kind, proxy and agents (hunt4 -> hunt1, hunt4t -> hunt1t, huntp4 -> huntp1)."""
    return arm_like(arm, gateways=1)


def hunting(agents: str, gateways: int, proxy: str) -> str | None:
    """The hunting arm of this many gateways of `proxy` over these agents."""
    return next((a for a, x in ARMS.items() if (x.kind, x.agents, x.gateways, x.proxy) == ("hunt", agents, gateways, proxy)), None)


def baselines(arm: str) -> list[str]:
    """What a hunting arm is held against at its count: the least-request arms
    of its proxy and every picker arm, in ARMS' order."""
    x = ARMS[arm]
    return [o for o, y in ARMS.items() if y.gateways == x.gateways
            and (y.kind in PICKERS or (y.kind == "lr" and y.proxy == x.proxy))]


def arms_over(agents: str) -> tuple[str, ...]:
    """The arms whose gateways reach this agent set."""
    return tuple(a for a, x in ARMS.items() if x.kind == "hunt" and x.agents == agents)


def fleet_name(arm: str) -> str:
    """The agent set (AGENTS) an arm's gateways reach; a straight arm, the model fleet's (for its servers)."""
    return ARMS[arm].agents if ARMS[arm].kind == "hunt" or ARMS[arm].via_agents else "counts"


def fleet_of(arm: str, fleets: dict[str, list]) -> list:
    """The agents an arm's gateways reach, from the sets started, by name."""
    return fleets[fleet_name(arm)]


FORWARD_SENT = 'huntlb_forwards_total{outcome="sent"}'
REPORTS_SENT = "huntlb_fleet_reports_sent_total"
# prefix affinity's outcomes at the agents (0 where it is off)
PREFIX_OUTCOMES = ("home", "ordinary", "none")


def prefix_outcomes(fleet) -> list[float]:
    ms = [b.metrics() for b in fleet]
    return [sum(m.get(f'huntlb_llm_prefix_total{{outcome="{o}"}}', 0.0) for m in ms) for o in PREFIX_OUTCOMES]


def llmload(targets: list[str], rate: float, seconds: float, seed: int, out: Path, workload: str = DEFAULT_WORKLOAD, salt: str = "") -> dict:
    argv = [binary("huntlb-llmload"), "--rate", f"{rate:.4f}", "--duration", str(seconds), "--seed", str(seed), "--out", str(out),
            "--workload", workload, "--salt", salt]
    for k, v in WORKLOADS[workload].items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    for t in targets:
        argv += ["--target", t.removeprefix("http://").rstrip("/")]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 300, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def prefix_cache(fleet) -> tuple[float, float]:
    """The fleet's prefix-cache hits and queries so far, in prompt tokens."""
    ms = [llm_metrics(b.app) for b in fleet]
    return sum(m["vllm:prefix_cache_hits_total"] for m in ms), sum(m["vllm:prefix_cache_queries_total"] for m in ms)


def cpu_s(pid: int) -> float:
    """User + system seconds of a process so far (/proc/PID/stat, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[round(p / 100 * (len(s) - 1))] if s else float("nan")


# A TTFT past this (ten times an idle server's) is a request that waited for a
# seat: sent to a server whose batch was full
QUEUED_MS = 250.0


def queued_share(ttft_ms: list[float]) -> float:
    return sum(1 for t in ttft_ms if t > QUEUED_MS) / len(ttft_ms) if ttft_ms else float("nan")


def token_metrics(ok: list[dict]) -> dict:
    """Time per output token (each request's decode time over its tokens
    after the first: (e2e - TTFT) / (tokens - 1), p50 and p90 over requests
    with two or more) and output tokens/s (every token the clients received,
    over the run: from the first intended send to the last completion)."""
    tpot = [(r["e2e_us"] - r["ttft_us"]) / 1e3 / (r["tokens"] - 1) for r in ok if r["tokens"] > 1 and r["ttft_us"] is not None]
    end = max(((r["offset_us"] + r["e2e_us"]) / 1e6 for r in ok), default=float("nan"))
    return {"tpot_p50_ms": pct(tpot, 50), "tpot_p90_ms": pct(tpot, 90),
            "out_tokens_per_s": sum(r["tokens"] for r in ok) / end if ok else float("nan")}


def quiet(fleet) -> None:
    """Nothing running or waiting at any server."""
    def idle():
        return all((m := llm_metrics(b.app))["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0 for b in fleet)
    wait_until(idle, timeout=120, every=0.2, what="the fleet idle")


def run_arm(work: Path, addrs: Addrs, fleet, arm: str, rate: float, seconds: float, seed: int, rep: int, hr: HaproxyRoot | None = None,
            workload: str = DEFAULT_WORKLOAD, tag: str = "", salt: str | None = None) -> dict:
    """One run of `arm` (its gateways started, then stopped); the prompts
    salted with `salt` (the arm's name unless given)."""
    salt = arm if salt is None else salt
    x = ARMS[arm]
    procs = Procs(work / f"{workload}-{arm}-rep{rep}{tag}")
    procs.log_dir.mkdir(parents=True, exist_ok=True)
    try:
        gs = gateways(procs, addrs, fleet, x.kind, x.gateways, x.proxy, hr=hr, interval_ms=PICKER_INTERVAL_MS, seed=seed,
                      via_agents=x.via_agents)
        targets, pids, gws = [g.target for g in gs], [p for g in gs for p in g.pids], [g.picker for g in gs if g.picker]
        quiet(fleet)
        served0 = [llm_metrics(b.app)["vllm:request_success_total"] for b in fleet]
        cache0 = prefix_cache(fleet)
        fwd0 = sum(b.metrics()[FORWARD_SENT] for b in fleet)
        dg0 = sum(b.metrics()[REPORTS_SENT] for b in fleet)
        px0 = prefix_outcomes(fleet)
        scrapes0 = sum(g.picker_stats()["huntlb_epp_scrapes_total"] for g in gws)
        bytes0 = sum(g.picker_stats()["huntlb_epp_scrape_bytes_total"] for g in gws)
        cpu0 = [cpu_s(p) for p in pids]
        # the agents beside the servers (the set the arm's gateways reach; a
        # straight arm's, the model fleet's, idle but for their reports)
        apids = [b.agent_proc.pid for b in fleet]
        acpu0 = [cpu_s(p) for p in apids]
        out = procs.log_dir / "requests.jsonl"
        t0 = time.monotonic()
        summary = llmload(targets, rate, seconds, seed, out, workload, salt=salt)
        wall = time.monotonic() - t0
        cpu = sum(cpu_s(p) - c for p, c in zip(pids, cpu0)) / wall
        agents_cpu = sum(cpu_s(p) - c for p, c in zip(apids, acpu0))
        reqs = [json.loads(line) for line in out.read_text().splitlines()]
        ok = [r for r in reqs if r["status"] == 200 and r["error"] is None]
        served = [llm_metrics(b.app)["vllm:request_success_total"] - s for b, s in zip(fleet, served0)]
        hits, queries = (x - x0 for x, x0 in zip(prefix_cache(fleet), cache0))
        ttft = [r["ttft_us"] / 1e3 for r in ok]
        e2e = [r["e2e_us"] / 1e3 for r in ok]
        res = {"arm": arm, "rep": rep, "seed": seed, "workload": workload, "salt": salt, "started": time.time() - wall, "rate": rate, "seconds": seconds, "scheduled": len(reqs), "ok": len(ok),
               "errors": len(reqs) - len(ok), "error_kinds": sorted({r["error"] or str(r["status"]) for r in reqs if r not in ok})[:5],
               "ttft_p50_ms": pct(ttft, 50), "ttft_p90_ms": pct(ttft, 90), "ttft_p99_ms": pct(ttft, 99),
               "e2e_mean_ms": statistics.fmean(e2e) if e2e else float("nan"),
               "queued_share": queued_share(ttft), **token_metrics(ok),
               "served_per_server": served, "forwards_per_s": (sum(b.metrics()[FORWARD_SENT] for b in fleet) - fwd0) / seconds,
               "scrapes_per_s": (sum(g.picker_stats()["huntlb_epp_scrapes_total"] for g in gws) - scrapes0) / wall,
               "scrape_bytes_per_s": (sum(g.picker_stats()["huntlb_epp_scrape_bytes_total"] for g in gws) - bytes0) / wall,
               "datagrams_per_s": (sum(b.metrics()[REPORTS_SENT] for b in fleet) - dg0) / wall,
               "gateways_cpu": cpu, "loadgen_cpu": summary["cpu_s"] / summary["wall_s"],
               # the agents' CPU over the run, per request the clients had answered
               "agents_cpu_s": agents_cpu, "agents_cpu_ms_per_req": 1e3 * agents_cpu / len(ok) if ok else float("nan"),
               "send_late_p99_ms": summary["send_late_p99_ms"],
               # prompt tokens the servers found in their prefix cache, of all they were sent
               "prefix_hit_share": hits / queries if queries else float("nan"),
               # offers placed by their prefix's home, by the ordinary rule, or read without a prefix
               "prefix_outcomes": dict(zip(PREFIX_OUTCOMES, (x - x0 for x, x0 in zip(prefix_outcomes(fleet), px0))))}
        print(f"  {workload} rep {rep} {arm:6s} rate {rate:.2f}/s: TTFT p50 {res['ttft_p50_ms']:7.1f} p99 {res['ttft_p99_ms']:7.1f} ms, "
              f"e2e mean {res['e2e_mean_ms']:7.1f} ms, errors {flag(res['errors'])}, forwards {res['forwards_per_s']:.2f}/s, "
              f"prefix hits {100 * res['prefix_hit_share']:.1f}% (affinity {res['prefix_outcomes']}), gateways {cpu:.2f} cores, loadgen {res['loadgen_cpu']:.2f} cores, late p99 {res['send_late_p99_ms']:.1f} ms", flush=True)
        return res
    finally:
        procs.stop_all()


def calibrate(work: Path, addrs: Addrs, fleet, seconds: float = 30.0, seed: int = 7, workload: str = DEFAULT_WORKLOAD) -> dict:
    """One server's throughput when its queue never empties (requests/s): the
    workload sent straight to it at 3/s (1.4x what it serves of sharegpt
    here), or faster if it kept up, completions counted over the run's
    second half."""
    b = fleet[0]
    out = work / f"calibrate-{workload}.jsonl"
    guess = 3.0
    lo, hi = seconds / 2, seconds
    # a server that kept up with the guess was not fed faster than it serves:
    # again at three times what it did (at most twice more)
    for _ in range(3):
        llmload([b.app], guess, seconds, seed, out, workload, salt=f"cal{guess:g}".replace(".", "-"))
        reqs = [json.loads(line) for line in out.read_text().splitlines()]
        ends = sorted((r["offset_us"] + r["e2e_us"]) / 1e6 for r in reqs if r["e2e_us"] is not None)
        done = sum(1 for t in ends if lo <= t < hi)
        quiet(fleet)
        if done / (hi - lo) < 0.7 * guess:
            break
        guess = 3 * done / (hi - lo)
    # long requests complete too few in the window for a close count (10 of
    # long-output in 15 s, +-10%): again, longer, fed 1.5x what it served, until
    # about 40 complete in the window (at most 120 s)
    if done < 40:
        rps = max(done, 1) / (hi - lo)
        guess, seconds = 1.5 * rps, min(120.0, float(math.ceil(2 * 40 / rps)))
        lo, hi = seconds / 2, seconds
        llmload([b.app], guess, seconds, seed, out, workload, salt="cal-long")
        reqs = [json.loads(line) for line in out.read_text().splitlines()]
        done = sum(1 for r in reqs if r["e2e_us"] is not None and lo <= (r["offset_us"] + r["e2e_us"]) / 1e6 < hi)
        quiet(fleet)
    return {"per_server_rps": done / (hi - lo), "rate_sent": guess, "seconds": seconds, "window": [lo, hi], "workload": workload, "completed": done}


KEYS = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_mean_ms")


def ratios(runs: list[dict], arm: str, key: str, base: str = BASE) -> list[float]:
    """arm / base of `key` in each repetition that has both, without client errors."""
    by = {}
    for r in runs:
        by.setdefault(r["rep"], {})[r["arm"]] = r
    return [p[arm][key] / p[base][key] for _, p in sorted(by.items()) if arm in p and base in p
            and not p[arm]["errors"] and not p[base]["errors"]]


def fmt_ratio(xs: list[float]) -> str:
    if not xs:
        return "-"
    med = statistics.median(xs)
    lo, hi = median_ci95(xs)
    m, h = ci95(xs)
    ci = f"[{lo:.3f}, {hi:.3f}]" if lo == lo else "n/a (< 6 reps)"
    return f"{med:.3f} {ci}; mean {m:.3f} ± {h:.3f}"


def num(x, f: str = ".1f") -> str:
    return "-" if x is None or x != x else format(x, f)


# The bound hunting is held to: N gateways' TTFT p50 and p90 within this
# of one gateway's, on the same requests
BOUND = 1.10


def verdicts(runs: list[dict]) -> list[str]:
    """The verdicts, read from the paired ratios: each N-gateway
    hunting arm within BOUND of its 1-gateway arm at TTFT p50 and p90 (the
    median, and the CI's upper end), and hunting against the least-request and
    picker arms at the same count (below 1: the CI's upper end under 1)."""
    out = []
    have = {r["arm"] for r in runs}
    for arm in [a for a in ARMS if ARMS[a].kind == "hunt" and ARMS[a].gateways > 1 and a in have]:
        one = one_of_kind(arm)
        for k in ("ttft_p50_ms", "ttft_p90_ms"):
            xs = ratios(runs, arm, k, one)
            if not xs:
                continue
            med, (lo, hi) = statistics.median(xs), median_ci95(xs)
            m, h = ci95(xs)
            # the distribution-free CI of the median (6 repetitions or more),
            # else the mean's t CI
            up, which = (hi, "the median's CI") if hi == hi else (m + h, "the mean's CI")
            held = "missed" if med > BOUND else "holds" if up <= BOUND else f"holds at the median, not at the upper end of {which}"
            out.append(f"* {arm} / {one}, TTFT {k.split('_')[1]}: {med:.3f}, {which} up to {up:.3f}: {held}")
    for arm in [a for a in ARMS if ARMS[a].kind == "hunt" and a in have]:
        for other in [o for o in baselines(arm) if o in have]:
            cells = []
            for k in ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_mean_ms"):
                xs = ratios(runs, arm, k, other)
                if not xs:
                    continue
                med, (lo, hi) = statistics.median(xs), median_ci95(xs)
                if hi != hi:  # under 6 repetitions: the mean's t CI
                    m, h = ci95(xs)
                    lo, hi = m - h, m + h
                word = "lower, CI below 1" if hi < 1 else "higher, CI above 1" if lo > 1 else "CI spans 1"
                cells.append(f"{k.removesuffix('_ms').replace('_', ' ')} {med:.3f} ({word})")
            out.append(f"* {arm} / {other}: " + "; ".join(cells))
    return out


def excluded_text(excluded: dict[int, str]) -> str:
    """The repetitions left out, those with one reason named together."""
    by: dict[str, list[int]] = {}
    for k, why in sorted(excluded.items()):
        by.setdefault(why, []).append(k)
    return "; ".join(f"repetition{'s' if len(ks) > 1 else ''} {' and '.join(map(str, ks))}: {why}" for why, ks in by.items()) or "none"


def workload_of(r: dict) -> str:
    """A run's workload; runs from before workloads existed are sharegpt's."""
    return r.get("workload", DEFAULT_WORKLOAD)


def params(data: dict, w: str) -> dict | None:
    """Workload w's calibration and load (calibration, rho, rate, seconds,
    excluded_reps): sharegpt's at the data's top level, where they were before
    workloads existed, the others' under "workloads"; None before calibrated."""
    if w == DEFAULT_WORKLOAD:
        return data if "calibration" in data else None
    return data.get("workloads", {}).get(w)


def tables(every: list[dict], excluded: dict[int, str]) -> dict:
    """The results tables of one workload's runs (excluded: repetitions left
    out of every median and ratio, still listed run by run)."""
    runs = [r for r in every if r["rep"] not in excluded]
    rows = []
    for arm in ARMS:
        rs = [r for r in runs if r["arm"] == arm]
        if not rs:
            continue

        def med(k: str) -> float:
            xs = [r[k] for r in rs if r.get(k) is not None]
            return statistics.median(xs) if xs else float("nan")
        errs = sum(r["errors"] for r in rs)
        ratio = {k: fmt_ratio(ratios(runs, arm, k)) if arm != BASE else "1" for k in KEYS}
        x = ARMS[arm]
        rows.append(f"| {arm} | {x.proxy} | {x.gateways} | {len(rs)} | {med('ttft_p50_ms'):.1f} | {ratio['ttft_p50_ms']} | {med('ttft_p90_ms'):.1f} | "
                    f"{ratio['ttft_p90_ms']} | {med('ttft_p99_ms'):.1f} | "
                    f"{ratio['ttft_p99_ms']} | {100 * med('queued_share'):.1f} | {med('e2e_mean_ms'):.1f} | {ratio['e2e_mean_ms']} | "
                    f"{num(med('tpot_p50_ms'), '.2f')} | {num(med('tpot_p90_ms'), '.2f')} | {num(med('out_tokens_per_s'), '.0f')} | {flag(errs)} | "
                    f"{med('forwards_per_s'):.2f} | {med('datagrams_per_s'):.0f} | {med('scrapes_per_s'):.0f} | {med('scrape_bytes_per_s') / 1e3:.0f} | "
                    f"{med('gateways_cpu'):.2f} | {med('loadgen_cpu'):.2f} | {num(100 * med('prefix_hit_share'))} |")
    per_run = [f"| {r['rep']}{' (left out)' if r['rep'] in excluded else ''} | {r['arm']} | {r['scheduled']} | {r['ttft_p50_ms']:.1f} | {r['ttft_p90_ms']:.1f} | {r['ttft_p99_ms']:.1f} | "
               f"{100 * r['queued_share']:.1f} | {r['e2e_mean_ms']:.1f} | {num(r.get('tpot_p50_ms'), '.2f')} | {num(r.get('out_tokens_per_s'), '.0f')} | "
               f"{flag(r['errors'])} | {max(r['served_per_server']) / max(statistics.fmean(r['served_per_server']), 1e-9):.2f} | "
               f"{r['send_late_p99_ms']:.1f} |" for r in sorted(every, key=lambda r: (r["rep"], list(ARMS).index(r["arm"])))]
    have = {r["arm"] for r in runs}
    # N gateways against one of their own kind, on the same requests
    same = []
    for arm in [a for a in ARMS if ARMS[a].gateways > 1 and a in have and one_of_kind(a) in have]:
        one = one_of_kind(arm)
        cells = [fmt_ratio(ratios(runs, arm, k, one)) for k in KEYS]
        same.append(f"| {arm} / {one} | " + " | ".join(cells) + " |")
    # hunting against the other arms at the same gateway count
    versus = []
    for arm in [a for a in ARMS if ARMS[a].kind == "hunt" and a in have]:
        # and against the hunting arms over the agent sets its Arm names (hunt4t / hunt4; huntp4 / hunt4, huntp4 / hunt4t)
        x = ARMS[arm]
        others = baselines(arm) + [hunting(s, x.gateways, x.proxy) for s in x.also_against]
        for other in [o for o in others if o in have]:
            cells = [fmt_ratio(ratios(runs, arm, k, other)) for k in KEYS]
            versus.append(f"| {arm} / {other} | " + " | ".join(cells) + " |")
    return {"rows": "\n".join(rows), "same_kind": "\n".join(same), "versus": "\n".join(versus), "verdicts": "\n".join(verdicts(runs)),
            "reps": str(len({r["rep"] for r in runs})), "excluded": excluded_text(excluded), "per_run": "\n".join(per_run)}


def load_values(p: dict | None) -> dict:
    """A workload's calibration and load as the report shows them ("-" before measured)."""
    cal = (p or {}).get("calibration")
    if cal is None or "rate" not in p:
        return {"per_server_rps": "-", "capacity": "-", "rho": "-", "rate": "-", "seconds": "-"}
    return {"per_server_rps": f"{cal['per_server_rps']:.3f}", "capacity": f"{cal['per_server_rps'] * SERVERS:.2f}",
            "rho": f"{p['rho']:.2f}", "rate": f"{p['rate']:.2f}", "seconds": f"{p['seconds']:g}"}


def salting(runs: list[dict]) -> str:
    """Whether the arms' prompts were salted (runs before the salt were not)."""
    salted = sum(1 for r in runs if r.get("salt"))
    if runs and salted == len(runs):
        return ("Each arm's prompts carry its name as a salt (other bytes, the same lengths and offsets), so no arm "
                "finds the previous arm's prompts in a server's prefix cache.")
    if salted == 0:
        return ("Every arm sent the same prompt bytes (these runs predate the salt), so a request that met the server "
                "that served it in an earlier arm found its prompt in that server's prefix cache.")
    return (f"{salted} of {len(runs)} runs salted their prompts with the arm's name; the others sent the same bytes "
            "in every arm (a request meeting the server that served it in an earlier arm found its prompt cached).")


def slo_rate(points: list[tuple[float, float]], threshold: float) -> tuple[float | None, str]:
    """The lowest offered rate at which TTFT p90 passes `threshold`, from
    (rate, p90) steps: linear between the last step under it and the first
    over it; None with why when the steps do not bracket it."""
    pts = sorted(points)
    for k, (rate, p90) in enumerate(pts):
        if p90 > threshold:
            if k == 0:
                return None, f"below {rate:.2f}/s (over at the lowest step)"
            r0, q0 = pts[k - 1]
            return r0 + (threshold - q0) / (p90 - q0) * (rate - r0), "interpolated"
    return None, f"above {pts[-1][0]:.2f}/s (under at every step)" if pts else "no steps"


def sweep_text(data: dict) -> str:
    """The SLO-rate section: each swept workload's TTFT p90 per step and arm,
    and where it passes the SLO."""
    parts = []
    for w, sw in data.get("sweeps", {}).items():
        steps = sorted({r["rho"] for r in sw["runs"]})
        thr = sw["threshold_ms"]
        cap = sw["capacity"]
        rows = []
        for arm in [a for a in ARMS if any(r["arm"] == a for r in sw["runs"])]:
            rs = {r["rho"]: r for r in sw["runs"] if r["arm"] == arm}
            at, how = slo_rate([(r["rate"], r["ttft_p90_ms"]) for r in rs.values() if not r["errors"]], thr)
            cells = [f"{rs[x]['ttft_p90_ms']:.1f}{'' if not rs[x]['errors'] else ' (errors)'}" if x in rs else "-" for x in steps]
            where = f"{at:.2f}/s (rho {at / cap:.3f})" if at is not None else how
            # when the arm's steps ran: arms swept in different sessions compare across machine states
            ran = [r["started"] for r in rs.values() if "started" in r]
            when = "-" if not ran else time.strftime("%Y-%m-%d %H:%M", time.gmtime(min(ran))) + time.strftime("-%H:%M", time.gmtime(max(ran)))
            rows.append(f"| {arm} | " + " | ".join(cells) + f" | {where} | {when} |")
        head = "| arm | " + " | ".join(f"p90 ms at rho {x:g} ({x * cap:.2f}/s)" for x in steps) + " | TTFT p90 passes SLO at | ran (UTC) |"
        values = {"workload": w, "seconds": f"{sw['seconds']:g}", "capacity": f"{cap:.2f}", "slo_ms": f"{SLO_P90_MS:g}",
                  "threshold_ms": f"{thr:g}", "time_scale": str(TIME_SCALE),
                  "table": "\n".join([head, "|-----|" + "------:|" * len(steps) + "------|------|", *rows])}
        parts.append(render(f"{NAME}.slo", values, part=True))
    return "".join("\n\n" + p for p in parts)


def report(data: dict) -> str:
    """The report: sharegpt's results (the page's body, as before workloads),
    then each other workload's, then the SLO sweeps."""
    by_w: dict[str, list[dict]] = {}
    for r in data["runs"]:
        by_w.setdefault(workload_of(r), []).append(r)
    base = by_w.get(DEFAULT_WORKLOAD, [])
    # Repetitions left out of every median and ratio (data "excluded_reps":
    # rep -> why), still listed run by run
    excluded = {int(k): v for k, v in data.get("excluded_reps", {}).items()}
    others = []
    for w in [w for w in WORKLOADS if w != DEFAULT_WORKLOAD and w in by_w]:
        p = params(data, w)
        ex = {int(k): v for k, v in (p or {}).get("excluded_reps", {}).items()}
        cal_s = (p or {}).get("calibration", {}).get("seconds")
        flags = (p or {}).get("server_flags") or {}
        servers_note = ("The servers: `huntlb-llm` with " + ", ".join(f"`--{k.replace('_', '-')} {v}`" for k, v in flags.items())
                        + " (bench/llm_gateways.py, `SERVER_FLAGS`, says why). ") if flags else ""
        values = {"workload": w, "salting": salting(by_w[w]), "servers_note": servers_note, **load_values(p), **tables(by_w[w], ex),
                  "cal_seconds": "-" if cal_s is None else f"{cal_s:g}"}
        others.append(render(f"{NAME}.workload", values, part=True))
    values = {"machine": data["machine"], "servers": str(SERVERS), "seats": str(SEATS), "time_scale": str(TIME_SCALE), "interval": str(PICKER_INTERVAL_MS),
              **load_values(params(data, DEFAULT_WORKLOAD)), **tables(base, excluded),
              "workload": ", ".join(f"{k} {v}" for k, v in WORKLOAD.items()), "bound": f"{BOUND:.2f}",
              "queued_ms": f"{QUEUED_MS:g}", "salting": salting(base),
              # nothing when only sharegpt ran: the page as it was
              "by_workload": "".join("\n\n" + o for o in others) + sweep_text(data)}
    return render(NAME, values, shown=shown_in(data))


def load_data(out: Path = RESULTS) -> dict | None:
    p = data_path(NAME, out)
    return rundata.read(p) if p.exists() else None


def sweep(a, data: dict, work: Path, addrs: Addrs, fleets: dict[str, list], arms: list[str], hr, out: Path) -> None:
    """One run per arm at each load step, on one workload (the module's
    docstring: the SLO rate, and its bound)."""
    w = a.workload
    steps = [float(x) for x in a.steps.split(",")]
    cap = params(data, w)["calibration"]["per_server_rps"] * SERVERS
    sw = data.setdefault("sweeps", {}).setdefault(w, {"runs": []})
    sw.update(seconds=a.seconds, capacity=cap, threshold_ms=SLO_P90_MS * TIME_SCALE, seed=SWEEP_SEED)
    for k, rho in enumerate(steps):
        order = arms[k % len(arms):] + arms[:k % len(arms)]
        for arm in order:
            # one seed at every step: the same requests, closer together as
            # the rate grows; the salt names the step's load, so no step finds
            # another step's prompts cached, whichever invocation ran it
            # (in thousandths: a salt is letters, digits and -)
            res = run_arm(work, addrs, fleet_of(arm, fleets), arm, rho * cap, a.seconds, SWEEP_SEED, k, hr, workload=w,
                          tag=f"-sweep{rho:g}", salt=f"{arm}-rho{round(rho * 1000)}")
            res["rho"] = rho
            sw["runs"] = [r for r in sw["runs"] if not (r["arm"] == arm and r["rho"] == rho)] + [res]
            rundata.write(data_path(NAME, out), data)
    thr = sw["threshold_ms"]
    for arm in arms:
        at, how = slo_rate([(r["rate"], r["ttft_p90_ms"]) for r in sw["runs"] if r["arm"] == arm and not r["errors"]], thr)
        print(f"{w} {arm}: TTFT p90 passes {thr:g} ms (the model's {SLO_P90_MS:g}) at "
              + (f"{at:.2f}/s, rho {at / cap:.3f}" if at is not None else how), flush=True)


# The sweep's seed: apart from the paired repetitions' (1 + rep * 1000003)
SWEEP_SEED = 4_200_001


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1, help="repetitions this invocation runs")
    ap.add_argument("--first-rep", type=int, default=0)
    ap.add_argument("--rho", type=float, default=0.85, help="load, as a fraction of the fleet's calibrated throughput")
    ap.add_argument("--seconds", type=float, default=None, help="seconds of arrivals a run (40; a sweep's step 20)")
    ap.add_argument("--arms", default=",".join(a for a, x in ARMS.items() if x.by_default),
                    help=f"arms to run, comma separated (default: all but {', '.join(arms_over('llm'))}, the hunting arms over load = llm agents, "
                         f"{', '.join(arms_over('prefix'))}, the hunting arms over prefix-affine agents, "
                         f"{', '.join(arms_over('kv'))}, the hunting arms over load = llm agents with the KV-cache rule, "
                         f"{', '.join(a for a, x in ARMS.items() if x.kind == 'eppp' and not x.via_agents)}, the pickers with GIE's prefix-cache-scorer, "
                         f"and {', '.join(a for a, x in ARMS.items() if x.via_agents)}, the pickers over agents with fleet_pass_plain)")
    ap.add_argument("--workload", default=DEFAULT_WORKLOAD, choices=list(WORKLOADS), help="huntlb-llmload's workload")
    ap.add_argument("--calibrate", action="store_true", help="measure one server's throughput on the workload again (else the data's); "
                    "the workload's runs at the old rate go")
    ap.add_argument("--sweep", action="store_true", help="the SLO rate: one run per arm at each of --steps")
    ap.add_argument("--steps", default="0.6,0.8,1.0,1.1", help="the sweep's loads, fractions of the calibrated capacity")
    ap.add_argument("--out", type=Path, default=RESULTS, help="data and report to this directory (a smoke run), "
                    "not bench/data and docs/results")
    ap.add_argument("--prefix-bound", type=int, default=None,
                    help="the prefix-affine agents' llm_prefix_bound (default: the agent's); recorded with their runs")
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    if a.seconds is None:
        a.seconds = 20.0 if a.sweep else 40.0
    data = load_data(a.out)
    if a.report_only:
        write_result(NAME, data, report(data), a.out)
        return 0
    work = Path(tempfile.mkdtemp(prefix="huntlb-llm-gateways-"))
    procs, addrs = Procs(work), Addrs()
    arms = a.arms.split(",")
    unknown = [x for x in arms if x not in ARMS]
    if unknown:
        ap.error(f"no arm {unknown}; the arms: {', '.join(ARMS)}")
    hr = HaproxyRoot("2.6") if any(ARMS[x].proxy == "haproxy" for x in arms) else None
    w = a.workload
    try:
        fleet = model_fleet(procs, addrs, SERVERS, SEATS, TIME_SCALE, **SERVER_FLAGS.get(w, {}))
        # the agent sets the arms reach, each beside the same servers
        fleets = {"counts": fleet}
        for name, opts in AGENTS.items():
            if opts is not None and any(fleet_name(x) == name for x in arms):
                bound = {"prefix_bound": a.prefix_bound} if name == "prefix" else {}
                if opts.get("kv_busy_at") == "default":
                    opts = {**opts, "kv_busy_at": agent_default("llm_kv_busy_at")}
                fleets[name] = llm_agents(procs, fleet, SEATS, **opts, **bound)
        if data is None:
            data = {"machine": machine(), "runs": []}
        if params(data, w) is None or a.calibrate:
            cal = calibrate(work, addrs, fleet, workload=w)
            print(f"calibrated ({w}): one server serves {cal['per_server_rps']:.3f} requests/s", flush=True)
            # a new capacity makes a new rate: the workload's runs at the old one go
            data["runs"] = [r for r in data["runs"] if workload_of(r) != w]
            if w == DEFAULT_WORKLOAD:
                data["calibration"] = cal
            else:
                data.setdefault("workloads", {})[w] = {"calibration": cal}
        p = params(data, w)
        if a.sweep:
            sweep(a, data, work, addrs, fleets, arms, hr, a.out)
        else:
            p["rho"], p["seconds"] = a.rho, a.seconds
            if w != DEFAULT_WORKLOAD:
                p["server_flags"] = SERVER_FLAGS.get(w, {})
            p["rate"] = a.rho * p["calibration"]["per_server_rps"] * SERVERS
            for rep in range(a.first_rep, a.first_rep + a.reps):
                seed = 1 + rep * 1_000_003
                # the arms' order turns with the repetition: none always runs first
                order = arms[rep % len(arms):] + arms[:rep % len(arms)]
                for arm in order:
                    res = run_arm(work, addrs, fleet_of(arm, fleets), arm, p["rate"], a.seconds, seed, rep, hr, workload=w)
                    if ARMS[arm].agents == "prefix" and a.prefix_bound is not None:
                        res["prefix_bound"] = a.prefix_bound
                    data["runs"] = [r for r in data["runs"] if not (workload_of(r) == w and r["rep"] == rep and r["arm"] == arm)] + [res]
                    rundata.write(data_path(NAME, a.out), data)
    finally:
        procs.stop_all()
        if hr:
            hr.cleanup()
    # the report once every repetition has its yardstick (a smoke run's, always)
    if a.out != RESULTS or all(any(r["arm"] == BASE and r["rep"] == k and workload_of(r) == x for r in data["runs"])
                               for x, k in {(workload_of(r), r["rep"]) for r in data["runs"]}):
        write_result(NAME, data, report(data), a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
