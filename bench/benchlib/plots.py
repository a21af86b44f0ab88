"""The bench's plots (matplotlib, PNG). Each function takes a scenario's data as
written to bench/data/ (runs as Run records) and draws its figures into
docs/results/, beside the report, so a plot can be redrawn from committed data:
`python3 -m benchlib.plots srlb-poisson` from bench/ (`make bench-setup` first).

matplotlib is imported when a figure is drawn, not with this module, so every
scenario's --help and reports work without it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from benchlib import data as rundata
from benchlib.reports import RESULTS, data_path
from benchlib.runs import Run, load, select
from benchlib.stats import median

STYLE = {"RR": ("tab:red", "o"), "SR_4": ("tab:blue", "s"), "SR_8": ("tab:cyan", "^"), "SR_16": ("tab:purple", "v"),
         "SR_dyn": ("tab:green", "D"), "LEAST_REQUEST": ("tab:orange", "x"), "leastconn": ("tab:orange", "x"),
         "random(2)": ("tab:brown", "+"), "JSQ": ("black", None),
         "SR_slack/least": ("tab:pink", "*"), "SR_dyn/LR": ("tab:olive", "*"), "SR_cores/own": ("tab:pink", "*"),
         "SR_slack/own": ("tab:pink", "*")}


def pyplot():
    """matplotlib's pyplot, drawing to files (Agg); None when not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plt():
    plt = pyplot()
    if plt is None:
        raise SystemExit("matplotlib not importable: make bench-setup")
    return plt


def _style(name: str):
    return STYLE.get(name, ("gray", "."))


def save(fig, out: Path, name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    _plt().close(fig)


def _axes(ax, title: str, xlabel: str, xscale: str | None = None, yscale: str | None = None, legend: int = 8) -> None:
    """Title, x label, scales, grid and legend: what every line plot sets."""
    if xscale:
        ax.set_xscale(xscale)
    if yscale:
        ax.set_yscale(yscale)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend)


def _mean_by(ax, runs: list[Run], x: str) -> None:
    """One line per policy: the median mean response time of its valid runs at each value of `x` (a Run field)."""
    for name in dict.fromkeys(r.policy for r in runs):
        mine = select(runs, policy=name)
        xs = sorted({getattr(r, x) for r in mine})
        ys = [median([r.mean_ms for r in select(mine, valid=True, **{x: v})]) for v in xs]
        c, m = _style(name)
        ax.plot(xs, ys, marker=m, color=c, label=name)


def srlb(data: dict, out: Path) -> None:
    plt = _plt()
    runs = data["runs"]
    proxies = sorted({r.proxy for r in runs})
    # Fig. 2: mean response time vs rho.
    fig, axes = plt.subplots(1, len(proxies), figsize=(6 * len(proxies), 4.2), squeeze=False, sharey=True)
    for ax, proxy in zip(axes[0], proxies):
        _mean_by(ax, select(runs, proxy=proxy), "rho")
        _axes(ax, f"through {proxy}", "normalized request rate ρ = λ/λ0", yscale="log")
    axes[0][0].set_ylabel("mean response time (ms, log)")
    fig.suptitle(f"SRLB Poisson workload, {data['setup']['servers']} servers, exp({data['setup']['mean_ms']:.0f} ms)")
    save(fig, out, "srlb-mean-vs-rho.png")
    # Figs. 3 and 5: CDFs.
    for rho, name in ((0.88, "srlb-cdf-088.png"), (0.61, "srlb-cdf-061.png")):
        fig, axes = plt.subplots(1, len(proxies), figsize=(6 * len(proxies), 4), squeeze=False, sharey=True)
        for ax, proxy in zip(axes[0], proxies):
            for r in select(runs, proxy=proxy, rho=rho, rep=0):
                if r.cdf:
                    xs, ys = zip(*r.cdf)
                    ax.plot(xs, ys, color=_style(r.policy)[0], label=r.policy)
            _axes(ax, f"{proxy}, ρ = {rho}", "response time (ms, log)", xscale="log")
        axes[0][0].set_ylabel("CDF")
        save(fig, out, name)
    # Fig. 4: mean instantaneous load and fairness over time, RR vs SR_4 (EWMA as in the paper).
    sampled = [r for r in runs if r.samples]
    if sampled:
        fig, axes = plt.subplots(2, len(proxies), figsize=(6 * len(proxies), 5.5), squeeze=False, sharex="col")
        for col, proxy in enumerate(proxies):
            for r in select(sampled, proxy=proxy):
                t, load, fair = _ewma_load(r.samples)
                c = _style(r.policy)[0]
                axes[0][col].plot(t, load, color=c, label=r.policy)
                axes[1][col].plot(t, fair, color=c, label=r.policy)
            axes[0][col].set_title(f"{proxy}, ρ = 0.88")
            axes[0][col].set_ylabel("mean busy workers")
            axes[1][col].set_ylabel("fairness index")
            axes[1][col].set_xlabel("time (s)")
            axes[1][col].set_ylim(0, 1.05)
            for ax in axes[:, col]:
                ax.grid(True, alpha=0.3)
                ax.legend(fontsize=8)
        save(fig, out, "srlb-load-fairness.png")
    # Acceptance ratio vs rho.
    fig, ax = plt.subplots(figsize=(6, 4))
    for proxy, ls in zip(proxies, ("-", "--")):
        for name in dict.fromkeys(r.policy for r in runs if r.acceptance is not None):
            pts = sorted((r.rho, r.acceptance) for r in select(runs, proxy=proxy, policy=name, rep=0) if r.acceptance is not None)
            if pts:
                ax.plot(*zip(*pts), ls, marker=_style(name)[1], color=_style(name)[0], label=f"{proxy} {name}")
    ax.set_xlabel("ρ")
    ax.set_ylabel("offers accepted by the first candidate")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    save(fig, out, "srlb-acceptance.png")


def _ewma_load(samples):
    """(t, mean busy, fairness) with the paper's EWMA, alpha = 1 - exp(-dt)."""
    t_out, load, fair = [], [], []
    l_s = f_s = None
    prev = None
    for t, busy in samples:
        xs = [b or 0 for b in busy]
        s, s2 = sum(xs), sum(x * x for x in xs)
        m = s / len(xs)
        f = s * s / (len(xs) * s2) if s2 else 1.0
        if prev is None:
            l_s, f_s = m, f
        else:
            a = 1 - math.exp(-(t - prev))
            l_s, f_s = l_s + a * (m - l_s), f_s + a * (f - f_s)
        prev = t
        t_out.append(t)
        load.append(l_s)
        fair.append(f_s)
    return t_out, load, fair


def many(runs: list[Run], out: Path) -> None:
    plt = _plt()
    proxies = sorted({r.proxy for r in runs})
    fig, axes = plt.subplots(1, len(proxies), figsize=(6 * len(proxies), 4), squeeze=False, sharey=True)
    for ax, proxy in zip(axes[0], proxies):
        _mean_by(ax, select(runs, proxy=proxy), "instances")
        ax.set_xticks(sorted({r.instances for r in runs}))
        _axes(ax, f"{proxy}, ρ = 0.88", "independent proxy instances")
    axes[0][0].set_ylabel("mean response time (ms)")
    save(fig, out, "many-proxies.png")


def simulation(data: dict, out: Path) -> None:
    plt = _plt()
    curves = data["curves"]
    sizes = sorted({c["servers"] for c in curves})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4), squeeze=False, sharey=True)
    for ax, n in zip(axes[0], sizes):
        for name in dict.fromkeys(c["policy"] for c in curves):
            pts = sorted((c["rho"], c["mean_ms"]) for c in select(curves, servers=n, policy=name))
            if pts:
                c, m = _style(name)
                ax.plot(*zip(*pts), marker=m, color=c, label=f"sim {name}", lw=1)
        for name, pts in data.get("real", {}).get(str(n), {}).items():
            c, m = _style(name)
            ax.plot(*zip(*sorted(pts)), ls="none", marker=m or "o", mfc="none", color=c, ms=8, label=f"real {name}")
        _axes(ax, f"{n} servers", "ρ = λ/λ0", yscale="log", legend=7)
    axes[0][0].set_ylabel("mean response time (ms, log)")
    save(fig, out, "simulation.png")


def elb(data: dict, out: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    g = data.get("gain_loss")
    if g:
        ax = axes[0][0]
        for name, pts in g["curves"].items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("offered req/s")
        ax.set_ylabel("served req/s")
        ax.set_title("gain/loss: throughput with and without the proxy")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    a = data.get("agility")
    if a:
        ax = axes[0][1]
        cores = a["cores"]
        width = 0.8 / (len(a["shares"]) + 1)
        xs = range(len(cores))
        ax.bar([x - 0.4 + width / 2 for x in xs], [c / sum(cores) for c in cores], width, color="lightgray", label="capacity share")
        for i, (name, share) in enumerate(a["shares"].items()):
            ax.bar([x - 0.4 + width * (i + 1.5) for x in xs], share, width, label=name, color=_style(name.split()[-1])[0])
        ax.set_xticks(list(xs), [f"{c:g} cores" for c in cores], fontsize=7, rotation=45)
        ax.set_ylabel("share of requests")
        ax.set_title("agility: heterogeneous backends")
        ax.legend(fontsize=7)
    f = data.get("fairness")
    if f:
        ax = axes[1][0]
        names = list(f)
        ax.bar(range(len(names)), [f[n]["busy_jain"] for n in names], color=[_style(n.split()[-1])[0] for n in names])
        ax.set_xticks(range(len(names)), names, fontsize=7, rotation=45)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("Jain's index of busy workers")
        ax.set_title("fairness: homogeneous backends, ρ = 0.88")
    c = data.get("convergence")
    if c:
        ax = axes[1][1]
        for name, series in c["throughput"].items():
            ax.plot([p[0] for p in series], [p[1] for p in series], label=name, drawstyle="steps-post")
        for ev in c["events"]:
            ax.axvline(ev["t"], color="gray", ls=":", lw=0.8)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("served req/s")
        ax.set_title("convergence: backends killed then restored")
        ax.legend(fontsize=6, ncol=2)
    save(fig, out, "elb.png")


def throughput(data: dict, out: Path) -> None:
    plt = _plt()
    rows = data["summary"]
    fig, ax = plt.subplots(figsize=(9, 4))
    names = list(rows)
    ax.bar(range(len(names)), [rows[n]["rps_median"] for n in names], yerr=[rows[n]["rps_ci95"] for n in names],
           color=["tab:blue" if "hunting" in n else "tab:gray" for n in names], capsize=3)
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("req/s (median, 95% CI of mean)")
    ax.set_title("tiny page through the proxy")
    save(fig, out, "proxy-throughput.png")


def redraw(name: str, results: Path = RESULTS) -> None:
    """Redraw one result's figures from its data (data_path(name, results))."""
    path = data_path(name, results)
    if name in ("srlb-poisson", "many-proxies"):
        d = load(path)
    else:
        d = rundata.read(path)
    {"srlb-poisson": lambda: srlb(d, results), "many-proxies": lambda: many(d["runs"], results),
     "simulation": lambda: simulation(d, results), "elb": lambda: elb(d, results),
     "proxy-throughput": lambda: throughput(d, results)}[name]()


if __name__ == "__main__":
    # Redraw from committed data: srlb-poisson | many-proxies | simulation | elb | proxy-throughput
    redraw(sys.argv[1])
