import pytest
from harness import Addrs, Procs


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
