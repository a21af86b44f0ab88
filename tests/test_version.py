"""A project one can depend on: every binary the workspace builds says its own
name and version (`--version`), the version CHANGELOG.md's newest release
names, and LICENSE is the license the workspace declares."""

import json
import re
import subprocess
import tomllib

from harness import ROOT, binary


def workspace_bins() -> list[tuple[str, str]]:
    """(binary, its package's version) for every [[bin]] of the workspace, as cargo sees them."""
    out = subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=ROOT,
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return [(t["name"], p["version"]) for p in json.loads(out)["packages"] for t in p["targets"] if "bin" in t["kind"]]


def workspace() -> dict:
    return tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]


def test_every_binary_prints_its_own_name_and_the_version():
    bins = workspace_bins()
    assert "huntlb-agent" in dict(bins) and len(bins) >= 8, bins
    version = workspace()["version"]
    for name, v in bins:
        assert v == version, (name, v)
        out = subprocess.run([binary(name), "--version"], capture_output=True, text=True, timeout=30)
        assert (out.returncode, out.stdout) == (0, f"{name} {version}\n"), (name, out)


def test_the_changelog_names_the_version_and_the_license_is_the_declared_one():
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert releases[0] == "Unreleased", releases
    assert releases[1] == workspace()["version"], "the newest release in CHANGELOG.md is the workspace's version"
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", text), "no commit hashes in the changelog"
    assert workspace()["license"] == "Apache-2.0"
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text


def test_the_upgrade_page_names_the_wire_and_the_metric_the_code_has():
    """docs/upgrading.md says what an operator sees in a roll across tier
    versions: the wire version and the counter are the code's own."""
    page = (ROOT / "docs" / "upgrading.md").read_text()
    magic = re.search(r'const MAGIC: &str = "([^"]+)";', (ROOT / "policy" / "src" / "forward" / "report.rs").read_text())[1]
    assert f"`{magic}`" in page, magic
    metrics = (ROOT / "policy" / "src" / "metrics.rs").read_text()
    assert '"huntlb_fleet_reports_bad_total"' in metrics and '"version"' in metrics
    assert 'huntlb_fleet_reports_bad_total{reason="version"}' in page
    read = (ROOT / "agent" / "src" / "fleet" / "read.rs").read_text()
    said = re.search(r'Bad::Version, from, &format!\("\{v\}: ([^"]+)"\)', read)[1]
    assert said in page, said
    assert "(docs/upgrading.md)" in (ROOT / "README.md").read_text()
