import json
import shutil
import subprocess

import pytest
from harness import ROOT, Addrs, Procs

VALIDATE = ROOT / "packaging" / "validate"


@pytest.fixture
def procs(tmp_path):
    """Processes started by the test; all stopped by PID when it ends, pass or fail."""
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def addrs():
    return Addrs()


@pytest.fixture(scope="module")
def validator():
    """The schema validator of packaging/ (tests/test_packaging.py,
    tests/test_kubernetes.py): node + the kubernetes-models packages, pinned in
    packaging/validate/package.json and installed from npm when one is missing.
    validate(documents) -> (exit status, one line per document)."""
    if not shutil.which("npm"):
        pytest.skip("npm not installed (apt-get install npm): the packaging schemas come from npm packages")
    pinned = json.loads((VALIDATE / "package.json").read_text())["dependencies"]
    if not all((VALIDATE / "node_modules" / name / "package.json").exists() for name in pinned):
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--no-package-lock"], cwd=VALIDATE,
                       check=True, timeout=300, capture_output=True)

    def validate(documents: list[dict]) -> tuple[int, str]:
        p = subprocess.run(["node", "validate.mjs"], cwd=VALIDATE, input=json.dumps(documents), capture_output=True,
                           text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr
    return validate
