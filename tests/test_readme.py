"""The README's first screen (40 lines) is for a newcomer: what huntlb is, when
it pays, one headline with the machine it was measured on, and the two
commands; every other number is one link away, and no word of the trade that
a newcomer cannot follow."""

import re

from harness import ROOT

SCREEN = 40
MAX_NUMBERS = 10
JARGON = ["FULL_SCAN", "TTFT", "GIE-style", "GIE style", "the model's clock"]


def first_screen() -> str:
    return "\n".join((ROOT / "README.md").read_text().splitlines()[:SCREEN])


def numbers(text: str) -> list[str]:
    """Every number as a reader meets one: 12, 0.84, ~1.5, 0.84-0.86 is two."""
    return re.findall(r"\d+(?:[.,]\d+)*", text)


def test_the_first_screen_has_at_most_ten_numbers():
    found = numbers(first_screen())
    assert len(found) <= MAX_NUMBERS, f"{len(found)} numbers in README.md's first {SCREEN} lines: {found}"


def test_the_first_screen_has_no_jargon():
    screen = first_screen().lower()
    assert [w for w in JARGON if w.lower() in screen] == []


def test_the_headline_names_its_machine_and_the_commands_are_there():
    paragraphs = first_screen().split("\n\n")
    ratios = [p for p in paragraphs if "×" in p]
    assert ratios, "no headline ratio on the first screen"
    for p in ratios:
        assert re.search(r"(\w+)-core (VM|machine)", p) and "results" in p, p
    screen = first_screen()
    assert "make demo    #" in screen and "make test    #" in screen
