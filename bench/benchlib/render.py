"""Reports from templates: bench/reports/NAME.md is a report's text with
`${name}` placeholders (string.Template; `$$` is a dollar sign), and the
scenario that measured computes the values (numbers, tables, the verdict words)
and fills them in with `render`. The prose is edited there, beside no code; the
code says only what the numbers are.

Every placeholder must get a value and every value must have a placeholder:
either mismatch is an error, so a template and its scenario cannot drift apart
silently.

The values, as the report shows them, also go into the report's data (its
"shown" key, a table as a list of its lines): a number the report computed (a
median, a ratio, a CI) then greps to the data as well as to the report, and a
test holds them equal to what the data renders to now. A part placed by a
placeholder is kept as that placeholder's lines.
"""

from __future__ import annotations

import string
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[1] / "reports"


def as_shown(value) -> str | list[str]:
    """A value as the data keeps it: text, or its lines when it has several (a
    table), so that each row is a line of the data file of its own."""
    text = str(value)
    return text.split("\n") if "\n" in text else text


def render(name: str, values: dict, *, part: bool = False, shown: dict | None = None) -> str:
    """bench/reports/NAME.md with `values` filled in. part: a piece of a report
    (a paragraph or section placed by another template's placeholder), without
    its file's final newline. shown: the data's "shown" dict, which gets each
    value (as_shown) by its placeholder; a placeholder already there with
    another value is an error (two templates of one report would hide one)."""
    t = string.Template((TEMPLATES / f"{name}.md").read_text())
    wanted = set(t.get_identifiers())
    if wanted != set(values):
        raise KeyError(f"bench/reports/{name}.md: no value for {sorted(wanted - set(values))}, "
                       f"no placeholder for {sorted(set(values) - wanted)}")
    text = t.substitute(values)
    if shown is not None:
        keep(shown, name, values)
    return text.removesuffix("\n") if part else text


def keep(shown: dict, name: str, values: dict) -> None:
    for k, v in values.items():
        if k in shown and shown[k] != as_shown(v):
            raise KeyError(f"bench/reports/{name}.md: placeholder {k!r} is already shown with another value")
        shown[k] = as_shown(v)


def shown_in(data: dict) -> dict:
    """A new, empty "shown" in `data` for the report about to be rendered from
    it (the last rendering's would keep values the report no longer shows)."""
    data["shown"] = {}
    return data["shown"]
