"""The measuring tools, each wrapped once: Debian's wrk (closed loop), a process's
CPU time from /proc, HAProxy's instructions per request under valgrind's
callgrind, and the simulator (huntlb-sim)."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import time

from benchlib.fronts import Bed

_dur = re.compile(r"^([\d.]+)(us|ms|s)$")


# The two kinds of request the overhead benches send. wrk's own is a bare `GET / HTTP/1.1` + Host: the worst case for a
# fixed per-request cost. A browser's request carries headers like these
# (about 500 bytes), which every proxy parses and forwards.
BROWSER_HEADERS = {
    "User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
    "Accept-Language": "en-US,en;q=0.5",
    "Accept-Encoding": "gzip, deflate, br, zstd",
    "Referer": "https://www.example.com/catalog/items?page=2&sort=price",
    "Cookie": "session=6f1c2d9e8a7b4c3d2e1f0a9b8c7d6e5f; prefs=lang%3Den%26theme%3Dlight; _ga=GA1.2.1234567890.1700000000",
    "Sec-Fetch-Dest": "document",
    "Sec-Fetch-Mode": "navigate",
    "Upgrade-Insecure-Requests": "1",
}
REQUESTS = {"bare": None, "browser-like": BROWSER_HEADERS}


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


def wrk_errors(results: list[dict]) -> int:
    """Client errors over wrk runs: non-2xx answers and socket errors."""
    return sum(r["non2xx"] + r["socket_errors"] for r in results)


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its reaped children), from /proc."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(f[11]) + int(f[12])) / ticks


def proc_cpu_exact(pid: int) -> float:
    """CPU time of a process's live threads, in seconds, to the nanosecond
    (the scheduler's own count, /proc/PID/task/*/schedstat). /proc/PID/stat
    counts in clock ticks (10 ms), which over an idle reading of 10-20 s steps
    by 0.05-0.1% of a core, as coarse as the 0.2% an idle agent is held to.
    Threads that have ended are not counted: for readings of long-lived
    processes only."""
    total = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            total += int(open(f).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended between the listing and the read
    return total / 1e9


def callgrind_totals(prefix: str) -> int:
    total = 0
    for f in glob.glob(prefix + "*"):
        for line in open(f):
            if line.startswith("totals:") or line.startswith("summary:"):
                total = max(total, int(line.split()[1]))
    return total


def instructions_per_request(bed: Bed, label: str, hunting: bool, edit, requests: int, **kw) -> float:
    """HAProxy's user-space instructions per request (callgrind) for one front
    over the bed's static backends: `requests` keep-alive requests after a
    warm-up, every one answered 200. The module's background task runs once a
    minute here (valgrind stretches time). kw: more of bed.front's (example)."""
    name = "haproxy-" + re.sub(r"[^a-z0-9]+", "-", label).strip("-") + "-callgrind"
    prefix = str(bed.work / f"callgrind.{name}")
    f = bed.front("haproxy", hunting, name, every_ms=60000, edit=edit,
                  argv_prefix=["valgrind", "--tool=callgrind", f"--callgrind-out-file={prefix}"], **kw)
    try:
        subprocess.run(["ab", "-q", "-k", "-n", "300", "-c", "4", f.url], capture_output=True, timeout=300)  # warm up
        subprocess.run(["callgrind_control", "-z", str(f.pid)], capture_output=True, timeout=60)
        r = subprocess.run(["ab", "-q", "-k", "-n", str(requests), "-c", "4", f.url], capture_output=True, text=True, timeout=600)
        subprocess.run(["callgrind_control", "-d", str(f.pid)], capture_output=True, timeout=60)
    finally:
        f.proc.stop()
    if "Non-2xx" in r.stdout or f"Complete requests:      {requests}" not in r.stdout:
        raise RuntimeError(f"{label}: not every request was answered 200:\n{r.stdout}")
    per_request = callgrind_totals(prefix + ".") / requests
    print(f"instructions: {label}: {per_request:.0f} per request", flush=True)
    return per_request


def huntlb_sim(binary: str, args: list[str], timeout: float = 1800) -> list[dict]:
    """One huntlb-sim run: its JSON report per rate, in order."""
    out = subprocess.run([binary, *args], capture_output=True, text=True, check=True, timeout=timeout).stdout
    return [json.loads(line) for line in out.splitlines()]


def paired_wrk(fronts: dict, kinds: dict, reps: int, seconds: int, after_rep=None) -> dict:
    """Each front (name -> Front) under wrk (-c32, `seconds`) for each kind of
    request (name -> headers), the fronts' order reversed every other
    repetition: `"NAME, KIND"` -> one run a repetition, each with the front's
    CPU per request and its CPU use. after_rep(rep): called after each."""
    runs = {f"{name}, {kind}": [] for kind in kinds for name in fronts}
    for rep in range(reps):
        order = list(fronts.items())[:: -1 if rep % 2 else 1]
        for kind, headers in kinds.items():
            for name, fr in order:
                c0, t0 = proc_cpu_seconds(fr.pid), time.monotonic()
                r = wrk(fr.url, 32, seconds, headers=headers)
                used = proc_cpu_seconds(fr.pid) - c0
                r["cpu_us_per_req"] = used / max(r["rps"] * seconds, 1) * 1e6
                r["proxy_cpu_util"] = used / (time.monotonic() - t0)
                runs[f"{name}, {kind}"].append(r)
        if after_rep:
            after_rep(rep)
    return runs
