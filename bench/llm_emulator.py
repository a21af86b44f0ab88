#!/usr/bin/env python3
"""The emulated model server (`huntlb-llm`) against its own model and the
published figures it was built from (make bench-llm-emulator).

Bursts of c concurrent streamed completions (256-token prompts, none shared,
128 tokens out) at c = 1, 8, 32, 64: each request's time to first token
(TTFT), its time per output token after the first (TPOT) and the burst's
output tokens per second, measured by a client over HTTP at real speed
(`--time-scale 1`), beside what the engine's model gives in virtual time
(`huntlb-llm --table`). The measured side shows the HTTP driver keeps the
model's timing; the model side is what docs/results/llm.md holds against the
published 8B-on-H100 figures. Then what a huntlb-agent beside the server adds
to a stream's TTFT: single requests, straight to the server and through the
agent in turns (ABBA), paired.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from benchlib.render import render, shown_in
from benchlib.reports import machine, parse_or_rewrite, write_result
from benchlib.stats import ci95
from harness import Addrs, Procs, binary, wait_http

SIZES = (1, 8, 32, 64)
PROMPT_TOKENS, OUT_TOKENS = 256, 128


def one(addr: str, i: int, out: list, start: threading.Event) -> None:
    host, port = addr.rsplit(":", 1)
    # 4 bytes a token; unique (its number first), so no prefix is cached from an earlier burst
    prompt = f"{i:08d}" + "".join(chr(97 + (i * 7 + k) % 26) for k in range(PROMPT_TOKENS * 4 - 8))
    body = json.dumps({"prompt": prompt, "max_tokens": OUT_TOKENS, "stream": True})
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    start.wait()
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body=body, headers={"content-type": "application/json"})
    r = c.getresponse()
    stamps = []
    while True:
        line = r.readline()
        if not line or line.startswith(b"data: [DONE]"):
            break
        if line.startswith(b"data: "):
            stamps.append(time.monotonic() - t0)
    c.close()
    out.append(stamps)


def ttft_ms(addr: str, i: int) -> float:
    """One streamed request alone: its time to first token, at the client."""
    out: list = []
    ev = threading.Event()
    ev.set()
    one(addr, i, out, ev)
    return out[0][0] * 1e3


def burst(addr: str, c: int, first: int) -> dict:
    """c streams at once, numbered from `first` (every prompt of a run is new)."""
    out: list = []
    start = threading.Event()
    ts = [threading.Thread(target=one, args=(addr, first + i, out, start)) for i in range(c)]
    for t in ts:
        t.start()
    t0 = time.monotonic()
    start.set()
    for t in ts:
        t.join(timeout=300)
    wall = time.monotonic() - t0
    assert len(out) == c and all(len(s) == OUT_TOKENS for s in out), "every stream whole"
    ttft = sorted(s[0] for s in out)
    return {"concurrency": c, "ttft_p50_ms": ttft[len(ttft) // 2] * 1e3, "ttft_max_ms": ttft[-1] * 1e3,
            "tpot_ms": statistics.mean((s[-1] - s[0]) / (OUT_TOKENS - 1) for s in out) * 1e3,
            "tokens_per_s": c * OUT_TOKENS / wall}


def report(data: dict) -> str:
    model = {m["concurrency"]: m for m in data["model"]}
    rows = []
    for c in sorted({m["concurrency"] for m in data["measured"]}):
        ms = [m for m in data["measured"] if m["concurrency"] == c]
        med = {k: statistics.median(m[k] for m in ms) for k in ("ttft_p50_ms", "tpot_ms", "tokens_per_s")}
        mo = model[c]
        rows.append(f"| {c} | {mo['ttft_p50_ms']:.0f} | {med['ttft_p50_ms']:.0f} | {mo['tpot_ms']:.1f} | {med['tpot_ms']:.1f} | "
                    f"{mo['tokens_per_s']:.0f} | {med['tokens_per_s']:.0f} | {len(ms)} |")
    added = data["agent_added_ttft_ms"]
    m, h = ci95(added)
    model_rows = [f"| {m['concurrency']} | {m['ttft_p50_ms']:.0f} | {m['ttft_max_ms']:.0f} | {m['tpot_ms']:.1f} | {m['tokens_per_s']:.0f} |"
                  for m in data["model"]]
    return render("llm", {"machine": data["machine"], "reps": data["reps"], "rows": "\n".join(rows),
                          "model_rows": "\n".join(model_rows), "pairs": len(added),
                          "agent_p50": f"{statistics.median(added):.3f}", "agent_mean": f"{m:.3f} ± {h:.3f}",
                          "direct_p50": f"{statistics.median(data['direct_ttft_ms']):.1f}"}, shown=shown_in(data))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--agent-pairs", type=int, default=100, help="single requests straight and through the agent, paired")
    a = parse_or_rewrite(ap, {"llm": report})
    if a is None:
        return 0
    llm = binary("huntlb-llm")
    table = subprocess.run([llm, "--table", "1,8,32,64,128,256"], capture_output=True, text=True, check=True, timeout=60)
    model = [json.loads(line) for line in table.stdout.splitlines()]
    procs, addrs = Procs(Path(tempfile.mkdtemp(prefix="huntlb-llm-bench-"))), Addrs()
    measured = []
    try:
        addr = f"{addrs.host()}:8000"
        p = procs.start("llm", [llm, "--listen", addr])
        wait_http(addr, "/health", proc=p)
        n = 0
        for rep in range(a.reps):
            for c in SIZES:
                measured.append({**burst(addr, c, n), "rep": rep})
                n += c
                print(json.dumps(measured[-1]), flush=True)
        host = addrs.host()
        _, agent, _ = procs.agent(host, addr, policy="always", app_stall_ms=0)
        direct, added = [], []
        for k in range(a.agent_pairs):
            order = (addr, agent) if k % 2 == 0 else (agent, addr)
            got = {}
            for where in order:
                got[where] = ttft_ms(where, n)
                n += 1
            direct.append(got[addr])
            added.append(got[agent] - got[addr])
        print(f"agent adds to TTFT: median {statistics.median(added):.3f} ms over {len(added)} pairs", flush=True)
    finally:
        procs.stop_all()
    data = {"machine": machine(), "reps": a.reps, "model": model, "measured": measured,
            "direct_ttft_ms": direct, "agent_added_ttft_ms": added}
    md = report(data)
    write_result("llm", data, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
