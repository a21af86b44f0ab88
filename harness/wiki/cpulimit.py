"""A replica's CPU limit: its own cgroup, removed by the test's cleanups."""

from __future__ import annotations

import os
import time
from pathlib import Path



CGROUP_ROOT = Path("/sys/fs/cgroup")


class CpuLimit:
    """A CPU limit of `cores` for one replica: cgroup v2 `cpu.max` where the
    unified hierarchy has the cpu controller, else cgroup v1's
    `cpu.cfs_quota_us`/`cpu.cfs_period_us` (what this project's machines
    have: a hybrid layout whose v2 tree holds no cpu controller). `period_us`
    is short (20 ms) because a render that needs several periods of a small
    quota is stretched by whole periods (measured when the replay was built:
    100 ms periods at 0.15 core made a 25-33 ms render take 196 ms)."""

    def __init__(self, name: str, cores: float, period_us: int = 20_000, root: Path = CGROUP_ROOT):
        if not (cores > 0):
            raise ValueError(f"CpuLimit: cores must be > 0, got {cores}")
        self.cores, self.period_us = cores, period_us
        quota = max(1000, int(cores * period_us))
        v2 = root / "cgroup.controllers"
        if v2.exists() and "cpu" in v2.read_text().split():
            self.kind, self.dir = "v2", root / name
            self.dir.mkdir(exist_ok=True)
            (self.dir / "cpu.max").write_text(f"{quota} {period_us}\n")
        elif (root / "cpu" / "cpu.cfs_quota_us").exists():
            self.kind, self.dir = "v1", root / "cpu" / name
            self.dir.mkdir(exist_ok=True)
            (self.dir / "cpu.cfs_period_us").write_text(f"{period_us}\n")
            (self.dir / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        else:
            raise RuntimeError(f"no cgroup cpu controller at {root} (neither v2 cpu.max nor v1 cpu.cfs_quota_us)")
        self.procs_file = self.dir / "cgroup.procs"

    @staticmethod
    def available(root: Path = CGROUP_ROOT) -> str | None:
        """None if a CpuLimit can be made here, else why not."""
        v2 = root / "cgroup.controllers"
        if v2.exists() and "cpu" in v2.read_text().split():
            return None if os.access(root, os.W_OK) else f"{root} (cgroup v2) is not writable"
        v1 = root / "cpu"
        if (v1 / "cpu.cfs_quota_us").exists():
            return None if os.access(v1, os.W_OK) else f"{v1} (cgroup v1) is not writable"
        return f"no cgroup cpu controller under {root}"

    def usage_s(self) -> float:
        """CPU time used by the group so far, in seconds."""
        if self.kind == "v2":
            for line in (self.dir / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec"):
                    return int(line.split()[1]) / 1e6
            return 0.0
        acct = CGROUP_ROOT / "cpuacct" / self.dir.name / "cpuacct.usage"
        if acct.exists():
            return int(acct.read_text()) / 1e9
        # v1 without a cpuacct group of the same name: throttling stats only
        return float("nan")

    def throttled(self) -> tuple[int, float]:
        """(periods throttled, seconds throttled) so far."""
        stat = dict(line.split() for line in (self.dir / "cpu.stat").read_text().splitlines() if len(line.split()) == 2)
        if self.kind == "v2":
            return int(stat.get("nr_throttled", 0)), int(stat.get("throttled_usec", 0)) / 1e6
        return int(stat.get("nr_throttled", 0)), int(stat.get("throttled_time", 0)) / 1e9

    def remove(self) -> None:
        """rmdir the group once its processes are gone (bounded: 50 tries, 5 s)."""
        for _ in range(50):
            try:
                self.dir.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


