"""Where results go and how they are written: the report (Markdown, and its plots)
for people in docs/results/, the data (every run, for the plots and for
re-rendering; benchlib.data) in bench/data/, unless a scenario says otherwise
(bench-quick writes both to bench/out/quick/)."""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path
from typing import Callable

from benchlib import data as rundata

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "docs" / "results"
DATA = ROOT / "bench" / "data"


def data_path(name: str, out: Path = RESULTS) -> Path:
    """Where the data of the report `out`/NAME.md is: bench/data/ for docs/results/,
    else beside the report (bench/out/quick/)."""
    return (DATA if out == RESULTS else out) / f"{name}.json"


def read_data(name: str, out: Path = RESULTS) -> dict:
    """The data a report was rendered from, as plain JSON values (runs as dicts;
    benchlib.runs.load gives Run records)."""
    return rundata.read(data_path(name, out))


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


def _shown(p: Path) -> str:
    return str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)


def write_result(name: str, data: dict, markdown: str, out: Path = RESULTS) -> None:
    """The report to `out`/NAME.md, its data to data_path(NAME, out)."""
    out.mkdir(parents=True, exist_ok=True)
    rundata.write(data_path(name, out), data)
    (out / f"{name}.md").write_text(markdown)
    print(f"wrote {_shown(out / name)}.md and {_shown(data_path(name, out))}")


def parse_or_rewrite(ap: argparse.ArgumentParser, reports: dict[str, Callable[[dict], str]],
                     plot: Callable[[dict], None] | None = None) -> argparse.Namespace | None:
    """A bench's arguments, with `--report-only`: measure nothing, render each
    of `reports` (NAME -> report(data)) again from its committed data (and
    `plot` it), and return None; else the parsed arguments."""
    ap.add_argument("--report-only", action="store_true",
                    help=f"measure nothing: rewrite {', '.join(f'docs/results/{n}.md' for n in reports)}{' and its plot' if plot else ''} "
                         "from the committed data")
    a = ap.parse_args()
    if not a.report_only:
        return a
    for name, report in reports.items():
        data = read_data(name)
        if plot:
            plot(data)
        write_result(name, data, report(data))
    return None


def write_json(path: Path | None, text: str) -> None:
    """A bench's raw runs (`text`: JSON or JSON lines) to the file its --json
    names, the folder made; nothing when none was asked for."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
