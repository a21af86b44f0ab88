"""Where results go and how they are written: Markdown for people, JSON with every
run for the plots and for re-rendering, both under docs/results/ unless a scenario
says otherwise (bench-quick writes to bench/out/quick/)."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "docs" / "results"


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


def flag(errors: int, numbers: str | None = None) -> str:
    """The report's rule for client errors: a run that saw any says so next to its
    numbers; they are never averaged in quietly. Without `numbers`, the cell of an
    errors column ("0", or "3 **flagged**"); with them, those numbers followed by
    the count when there was one ("41.2 (3 client errors: **flagged**)")."""
    if numbers is None:
        return f"{errors} **flagged**" if errors else "0"
    return f"{numbers} ({errors} client errors: **flagged**)" if errors else numbers


def _json(o):
    """Run records (and anything else with to_json) as the JSON they were read from."""
    if hasattr(o, "to_json"):
        return o.to_json()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def write_result(name: str, data: dict, markdown: str, out: Path = RESULTS) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=2, default=_json) + "\n")
    (out / f"{name}.md").write_text(markdown)
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}/{name}.md and .json")
