import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testkit import Addrs, Procs  # noqa: E402


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
