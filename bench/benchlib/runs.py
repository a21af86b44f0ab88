"""The record of one open-loop run through a front, and `select`, the one way the
scenarios and plots pick runs (by proxy, strategy, ρ, repetition, validity...)
and the simulator's points (plain dicts in simulation.json and
simulation-proxies.json, picked the same way).

A `Run` reads and writes exactly the JSON objects in bench/data/
(srlb-poisson.json, many-proxies.json, vs-least.json), so committed results load
and re-render unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from benchlib import data as rundata

# Written only when present: the CDF is kept for the runs the CDF plots draw,
# samples for the load-over-time plot, attempts by runs since repeats began.
_OPTIONAL = ("cdf", "samples", "attempts", "agents_cpu", "datagrams", "fronts_cpu", "idle_fronts_cpu")


@dataclass(kw_only=True)
class Run:
    """One huntlb-loadgen run at `rate` through `instances` fronts of `proxy`
    balancing with `policy` (a strategy: RR, SR_4, SR_dyn, SR_dyn/LR, LEAST_REQUEST,
    leastconn...). Times in ms. `valid` is the generator's own verdict: an invalid
    run fell behind its schedule and says nothing about the balancer. `errors` are
    client errors (failed requests and non-2xx answers)."""

    # the load generator's numbers (fleet.summary)
    completed: int
    errors: int
    achieved_rate: float
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    served_by: dict[str, int]
    valid: bool
    invalid_reason: str | None
    lateness_p99_us: float
    # what was run, and what the fleet saw
    proxy: str
    policy: str
    rate: float
    seconds: float
    instances: int = 1
    refused: float = 0
    acceptance: float | None = None  # offers the first candidate accepted (hunting only)
    backlog_rejected: int = 0
    load_per_server: list[float]
    fairness: float | None
    cdf: list | None = None
    samples: list | None = None
    attempts: int | None = None
    # every agent's CPU over the run, in cores summed over the fleet
    agents_cpu: float | None = None
    # the CPU of the fronts this run went through, in cores summed over them,
    # and of every other front the bench holds up (idle, health-checking)
    fronts_cpu: float | None = None
    idle_fronts_cpu: float | None = None
    # the tier's reports sent per second, summed over the fleet (forwarding only)
    datagrams: float | None = None
    # where it sits in the experiment
    rho: float
    rep: int

    @classmethod
    def from_json(cls, d: dict) -> "Run":
        return cls(**d)

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not (f.name in _OPTIONAL and getattr(self, f.name) is None)}


def _same(have, want) -> bool:
    if isinstance(want, float) or isinstance(have, float):
        return have is not None and math.isclose(have, want, rel_tol=1e-9, abs_tol=1e-12)
    return have == want


def _field(r, k: str):
    return r.get(k) if isinstance(r, dict) else getattr(r, k)


def select(runs: list, **where) -> list:
    """The runs (Run records, or the simulator's dict points) whose fields equal
    every value in `where`, in order; floats compare to 1e-9, so a ρ written as
    0.88 finds 0.88. E.g. select(runs, proxy="envoy", policy="SR_dyn", rho=0.88, valid=True)."""
    return [r for r in runs if all(_same(_field(r, k), v) for k, v in where.items())]


def paired(runs: list[Run], num: str, den: str, key: str, **where) -> list[float]:
    """num/den of `key` (a Run field) per repetition, for the repetitions in which
    both policies' runs (selected by `where`) were valid."""
    at = lambda policy: {r.rep: getattr(r, key) for r in select(runs, policy=policy, valid=True, **where)}  # noqa: E731
    a, d = at(num), at(den)
    return [a[k] / d[k] for k in sorted(a) if k in d and d[k] > 0]


def load(path: Path) -> dict:
    """A result's data (benchlib.reports.data_path) whose "runs" are Run records."""
    data = rundata.read(path)
    data["runs"] = [Run.from_json(r) for r in data["runs"]]
    return data
