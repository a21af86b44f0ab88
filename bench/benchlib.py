"""Helpers shared by huntlb's benchmark scripts: wrk runs, statistics, reports.

Benchmarks reuse the integration tests' launch code (the `harness` package), so they
run exactly the committed example configs.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path

# A benchmark stopped with SIGTERM (timeout, kill) unwinds like Ctrl-C, so its
# `finally` stops every process it started.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "docs" / "results"

# two-sided 95% Student t quantiles by degrees of freedom
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    if df in _T95:
        return _T95[df]
    keys = sorted(k for k in _T95 if k <= df)
    return _T95[keys[-1]] if keys else 12.706


def ci95(xs: list[float]) -> tuple[float, float]:
    """Mean and half-width of its 95% confidence interval."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("nan")
    return m, t95(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def median_ci95(xs: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval for the median: the order
    statistics k and n-1-k with k the largest such that P(Binomial(n, 1/2) < k)
    <= 2.5%. (nan, nan) below 6 values, where no such k exists."""
    n, s = len(xs), sorted(xs)
    k, cum = -1, 0.0
    while True:
        cum += math.comb(n, k + 1) / 2 ** n
        if cum > 0.025:
            break
        k += 1
    if k < 0:
        return float("nan"), float("nan")
    return s[k], s[n - 1 - k]


def paired_ratio(num: list[dict], den: list[dict], key: str = "rps") -> dict:
    """num/den of `key` per repetition (runs side by side): median with its
    95% CI, and mean with its 95% CI."""
    xs = [a[key] / b[key] for a, b in zip(num, den)]
    m, h = ci95(xs)
    lo, hi = median_ci95(xs)
    return {"median": median(xs), "median_ci95": [lo, hi], "mean": m, "ci95": h, "ratios": xs}


_dur = re.compile(r"^([\d.]+)(us|ms|s)$")


def _us(v: str) -> float:
    m = _dur.match(v)
    if not m:
        raise ValueError(v)
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]


def wrk(url: str, conns: int, seconds: float, headers: dict | None = None, cpu: int | None = 1) -> dict:
    """Closed-loop wrk run (Debian wrk): req/s and latency percentiles in us."""
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{max(1, round(seconds))}s", "--latency"]  # wrk takes whole seconds
    for k, v in (headers or {}).items():
        argv += ["-H", f"{k}: {v}"]
    argv.append(url)
    if cpu is not None and os.cpu_count() and os.cpu_count() > 1:
        argv = ["taskset", "-c", str(cpu)] + argv
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60).stdout
    res = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}
    for p, v in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)$", out, flags=re.M):
        res[f"p{p}_us"] = _us(v)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    res["non2xx"] = int(non2xx.group(1)) if non2xx else 0
    errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    res["socket_errors"] = sum(map(int, errs.groups())) if errs else 0
    return res


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its reaped children), from /proc."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(f[11]) + int(f[12])) / ticks


def machine() -> str:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu or platform.processor()}, Linux {platform.release()}"


def write_result(name: str, data: dict, markdown: str, out: Path = RESULTS) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / f"{name}.md").write_text(markdown)
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}/{name}.md and .json")
