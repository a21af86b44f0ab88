"""Reports from templates: bench/reports/NAME.md is a report's text with
`${name}` placeholders (string.Template; `$$` is a dollar sign), and the
scenario that measured computes the values (numbers, tables, the verdict words)
and fills them in with `render`. The prose is edited there, beside no code; the
code says only what the numbers are.

Every placeholder must get a value and every value must have a placeholder:
either mismatch is an error, so a template and its scenario cannot drift apart
silently.
"""

from __future__ import annotations

import string
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[1] / "reports"


def render(name: str, values: dict, *, part: bool = False) -> str:
    """bench/reports/NAME.md with `values` filled in. part: a piece of a report
    (a paragraph or section placed by another template's placeholder), without
    its file's final newline."""
    t = string.Template((TEMPLATES / f"{name}.md").read_text())
    wanted = set(t.get_identifiers())
    if wanted != set(values):
        raise KeyError(f"bench/reports/{name}.md: no value for {sorted(wanted - set(values))}, "
                       f"no placeholder for {sorted(set(values) - wanted)}")
    text = t.substitute(values)
    return text.removesuffix("\n") if part else text
