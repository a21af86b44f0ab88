#!/usr/bin/env python3
"""What a page of the generated wiki costs (docs/wiki.md): builds (or reuses) the
template wiki of `--pages` pages, starts one replica with one Apache worker and
no CPU limit, and times, one request at a time, a sample of pages viewed from
the parser cache (what most page views are), the same pages rendered anew
(`api.php?action=parse` of their wikitext: a parser cache miss) and a static
file. Prints percentiles and the cost by page size, as JSON with --json.

    PYTHONPATH=. .venv/bin/python bench/wiki_costs.py --pages 400 --sample 80
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from harness import Addrs, Procs, request
from harness import wiki

from benchlib import wikitrace


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))], 1)


def timed(addr: str, path: str) -> float:
    t = time.monotonic()
    status, _, body = request(addr, "GET", path, timeout=120)
    ms = (time.monotonic() - t) * 1000
    if status != 200:
        raise RuntimeError(f"{path}: status {status}: {body[:300]!r}")
    return ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=400)
    ap.add_argument("--sample", type=int, default=80, help="pages timed (spread over sizes)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    why = wiki.mediawiki_missing()
    if why:
        print(f"wiki_costs: {why}", file=sys.stderr)
        return 2
    procs = Procs(Path(tempfile.mkdtemp(prefix="huntlb-wiki-costs-")))
    try:
        addrs = Addrs()
        t0 = time.monotonic()
        tmpl = wiki.build_template(pages=a.pages, seed=a.seed, procs=procs, addrs=addrs)
        built_s = time.monotonic() - t0
        r = wiki.start_replica(procs, addrs, tmpl, workers=1)
        sizes = tmpl.meta["bytes"]
        by_size = sorted(range(len(tmpl.pages)), key=lambda i: sizes[i])
        step = max(1, len(by_size) // a.sample)
        sample = by_size[::step][: a.sample] + [by_size[-1]]
        # warm this Apache's opcode and object caches first
        for i in sample[:5]:
            timed(r.apache.addr, wiki.page_path(tmpl.pages[i]))
        rows = []
        for i in sample:
            title = tmpl.pages[i]
            rows.append({"page": i, "bytes": sizes[i], "refs": tmpl.meta["refs"][i],
                         "cached_ms": round(timed(r.apache.addr, wiki.page_path(title)), 1),
                         "render_ms": round(timed(r.apache.addr, wikitrace.render_path(i)), 1)})
        static = [timed(r.apache.addr, f"{wiki.SCRIPT_PATH}/{random.Random(k).choice(wikitrace.STATIC_FILES)}") for k in range(50)]
        out = {
            "pages": a.pages, "template": str(tmpl.dir), "build_s_this_run": round(built_s, 1),
            "template_meta": {k: tmpl.meta.get(k) for k in ("install_s", "import_s", "warm_s")},
            "wikitext_bytes": {"p10": pct(sizes, 10), "p50": pct(sizes, 50), "p90": pct(sizes, 90), "max": max(sizes)},
            "cached_view_ms": {p: pct([x["cached_ms"] for x in rows], p) for p in (10, 50, 90, 100)},
            "render_ms": {p: pct([x["render_ms"] for x in rows], p) for p in (0, 10, 50, 90, 100)},
            "static_ms": {p: pct(static, p) for p in (50, 90, 100)},
            "rows": rows,
        }
        print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1))
    finally:
        procs.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
