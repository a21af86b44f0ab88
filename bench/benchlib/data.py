"""Raw run data as committed: bench/data/NAME.json, the data a report in
docs/results/NAME.md is rendered from, written compactly so that a number finds
its run with `git grep`: one line per run (a record of a list), every other
value on one line unless it is a long dict, which gets a line per key. What the
report shows (its "shown", benchlib.render) is kept the same way, a table a
line per row, so that a median or ratio the report computed greps to it too.

The parts nobody greps, each run's latency CDF and load samples (the CDF and
load plots draw them) and perf's per-symbol tables, go beside it in
NAME.bulk.json.gz, gzip without a timestamp so the same data gives the same
bytes. `read` puts them back: what it returns equals what `write` was given
(as JSON: Run records come back as the dicts they were written as).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

# Per-run fields kept in the bulk file (Run.cdf, Run.samples), and whole
# top-level keys (haproxy-profile's per-symbol µs per request).
BULK_RUN_KEYS = ("cdf", "samples")
BULK_KEYS = ("us_per_request",)
# A dict longer than this (as compact JSON) gets a line per key.
WIDE = 120
# Where the bulk went, in the main file (read drops it).
NOTE = "_bulk"


def _json(o):
    """Run records (and anything else with to_json) as the JSON they were read from."""
    if hasattr(o, "to_json"):
        return o.to_json()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def _one(v) -> str:
    return json.dumps(v, ensure_ascii=False)


def _records(v) -> bool:
    """A list laid a line per item: records, or lines of text (a report's table
    in "shown", each row a line of its own)."""
    return isinstance(v, list) and bool(v) and (all(isinstance(x, (dict, list)) for x in v) or all(isinstance(x, str) for x in v))


def _lay(v, indent: int) -> str:
    pad = " " * (indent + 1)
    if _records(v) and len(_one(v)) > WIDE:
        return "[\n" + ",\n".join(pad + _one(x) for x in v) + "\n" + " " * indent + "]"
    if isinstance(v, dict) and len(_one(v)) > WIDE:
        return "{\n" + ",\n".join(f"{pad}{_one(k)}: {_lay(x, indent + 1)}" for k, x in v.items()) + "\n" + " " * indent + "}"
    return _one(v)


def split(data: dict) -> tuple[dict, dict]:
    """(main, bulk): data as plain JSON values, with the bulky parts moved to bulk."""
    main = json.loads(json.dumps(data, default=_json))
    bulk = {}
    for k in BULK_KEYS:
        if k in main:
            bulk[k] = main[k]
            main[k] = NOTE
    runs = main.get("runs")
    if isinstance(runs, list) and any(isinstance(r, dict) and k in r for r in runs for k in BULK_RUN_KEYS):
        bulk["runs"] = [{k: r.pop(k) for k in BULK_RUN_KEYS if k in r} for r in runs]
    return main, bulk


def bulk_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json") + ".bulk.json.gz")


def write(path: Path, data: dict) -> None:
    """data to `path` (compact) and its bulk beside it (or no bulk file)."""
    main, bulk = split(data)
    if bulk:
        main[NOTE] = f"{bulk_path(path).name}: " + ", ".join(
            [k for k in bulk if k != "runs"] + [f"runs' {k}" for k in BULK_RUN_KEYS if "runs" in bulk])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_lay(main, 0) + "\n")
    if bulk:
        bulk_path(path).write_bytes(gzip.compress(_one(bulk).encode() + b"\n", mtime=0))
    else:
        bulk_path(path).unlink(missing_ok=True)


def read(path: Path) -> dict:
    """What `write` wrote to `path`, its bulk put back in place."""
    data = json.loads(path.read_text())
    if data.pop(NOTE, None) is None:
        return data
    bulk = json.loads(gzip.decompress(bulk_path(path).read_bytes()))
    for k, v in bulk.items():
        if k != "runs":
            data[k] = v
    for r, extra in zip(data.get("runs", []), bulk.get("runs", [])):
        r.update(extra)
    return data
