"""What a user reads says what to do and what was measured, never the project's
history: no "issue N", no "#N" reference and no commit hash in the README, the
docs, the results and the templates and code that write them, the Makefile,
the chart, the packaging, or any --help. History is in git; a results page
names its data and the command that made it."""

import re
import subprocess

from harness import ROOT

# Every file a user reads, or whose strings a user reads (argparse and clap
# help, plot titles, the prose a bench script renders into docs/results/).
USER_FACING = [
    "README.md", "CHANGELOG.md", "Makefile", "docs", "charts", "packaging",
    "bench/reports", "bench/*.py", "bench/benchlib/*.py",
    "agent/src/config/raw.rs", "instruments/src/bin",
]
BINARY = (".png", ".svg", ".gz", ".wasm", ".tgz")

ISSUE = re.compile(r"\bissues?\s*#?\d+", re.I)
# "#55" as GitHub writes a reference; not an anchor (#12-fronts) nor a digit of a quoted colour.
REFERENCE = re.compile(r"(?<![\w&/#\"'])#\d{2,}(?![\w-])")
# A commit as git abbreviates it or in full: 7-40 hex digits with a letter and
# a digit (so not a plain number, nor a word such as "defaced"), standing alone
# (so not part of a 64-digit sha256 nor of an identifier).
HEX = re.compile(r"(?<![\w.-])[0-9a-f]{7,40}(?![\w-])")
# Hex that is not a commit, each where it stands (the file, the text just
# before it): a schedule's fingerprint, printed by the bench so that two runs
# can be seen to share arrivals; a made-up session cookie a load generator sends.
NOT_COMMITS = {
    ("docs/results/README.md", "schedule "),
    ("bench/benchlib/tools.py", "session="),
}


def user_facing_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--", *USER_FACING], cwd=ROOT, capture_output=True, text=True, check=True)
    files = [f for f in out.stdout.splitlines() if not f.endswith(BINARY)]
    assert "README.md" in files and "Makefile" in files and any(f.startswith("docs/results/") for f in files)
    return files


def history_in(path: str, text: str) -> list[str]:
    """Each mention of the project's history in `text` (of file `path`) as
    "path:line: what"."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        hits = ISSUE.findall(line) + REFERENCE.findall(line)
        for m in HEX.finditer(line):
            token = m.group()
            if not (re.search("[a-f]", token) and re.search("[0-9]", token)):
                continue
            if any(path == p and line[: m.start()].endswith(before) for p, before in NOT_COMMITS):
                continue
            hits.append(token)
        found += [f"{path}:{n}: {h}" for h in hits]
    return found


def test_no_issue_number_nor_commit_in_what_users_read():
    found = []
    for path in user_facing_files():
        found += history_in(path, (ROOT / path).read_text(errors="replace"))
    assert not found, f"{len(found)} mentions of history in user-facing text:\n" + "\n".join(found[:40])


def test_the_scan_finds_history_and_lets_other_hex_be():
    assert history_in("README.md", "as issue 43 asks") == ["README.md:1: issue 43"]
    assert history_in("docs/x.md", "Issue #42's frontier, see #55") == ["docs/x.md:1: Issue #42", "docs/x.md:1: #42", "docs/x.md:1: #55"]
    assert history_in("docs/x.md", "the agent of `03cd9c3` (before)") == ["docs/x.md:1: 03cd9c3"]
    assert history_in("docs/x.md", "commit 1e7dcd8f2a9b0c4d5e6f7a8b9c0d1e2f3a4b5c6d") != []
    # numbers, words, sha256 digests, quoted colours, anchors and allowed fingerprints pass
    sha256 = "sha256:" + "0123456789abcdef" * 4
    fine = f"86400000 ms, defaced, {sha256}, color: "#222", [x](#12-fronts), 0x7fffffff"
    assert history_in("docs/x.md", fine) == []
    assert history_in("docs/results/README.md", "(seed 51069, schedule 14a8bb0004273822)") == []
    assert history_in("docs/x.md", "(seed 51069, schedule 14a8bb0004273822)") != []


def test_the_guides_keep_no_results_status_nor_diary():
    # A guide says what to do and why; what was measured lives in
    # docs/results/ (with its command and data), how it got there in git.
    guides = [p for p in (ROOT / "docs").glob("*.md")] + [ROOT / "README.md"]
    found = [f"{p.relative_to(ROOT)}: {line}" for p in guides for line in p.read_text().splitlines()
             if re.match(r"#+ .*\b(Status|Diary|History)\b", line) or "What it took for" in line]
    assert not found, found
