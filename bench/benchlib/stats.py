"""Statistics of repeated runs: means with 95% confidence intervals (Student t),
medians with distribution-free ones, paired ratios, Jain's fairness index, and a
latency CDF from the load generator's histogram."""

from __future__ import annotations

import math
import statistics

# two-sided 95% Student t quantiles by degrees of freedom
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    if df in _T95:
        return _T95[df]
    keys = sorted(k for k in _T95 if k <= df)
    return _T95[keys[-1]] if keys else 12.706


def ci95(xs: list[float]) -> tuple[float, float]:
    """Mean and half-width of its 95% confidence interval ((nan, nan) for no values)."""
    if not xs:
        return float("nan"), float("nan")
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("nan")
    return m, t95(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))


def median(xs: list[float]) -> float:
    """The median; nan for no values (a point every run of which was invalid)."""
    return statistics.median(xs) if xs else float("nan")


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


def rep_ratios(runs, baseline: str, candidate: str, key: str) -> list[float]:
    """candidate / baseline of `key` in each repetition that has both (runs
    carry .rep and .policy); a run with client errors or flagged invalid is
    left out with its pair."""
    by_rep: dict = {}
    for r in runs:
        if not r.errors and r.valid:
            by_rep.setdefault(r.rep, {})[r.policy] = r
    return [getattr(p[candidate], key) / getattr(p[baseline], key) for _, p in sorted(by_rep.items())
            if baseline in p and candidate in p]


def jain(xs: list[float]) -> float | None:
    """Jain's fairness index: 1 when every value is equal, 1/n when one holds all."""
    s, s2 = sum(xs), sum(x * x for x in xs)
    return s * s / (len(xs) * s2) if s2 > 0 else None


def cdf(rep: dict, points: int = 200) -> list[tuple[float, float]]:
    """(ms, fraction) from a loadgen report's full histogram, thinned to ~points."""
    hist = rep["histogram"]
    total = sum(c for _, c in hist) or 1
    out, acc = [], 0
    step = max(1, len(hist) // points)
    for i, (us, c) in enumerate(hist):
        acc += c
        if i % step == 0 or i == len(hist) - 1:
            out.append((us / 1e3, acc / total))
    return out
