"""How busy the CPU this site may use has been lately (the door's second signal, config.admission):
in a container given a CPU quota (cgroup v2 ``cpu.max``), the container's own CPU time against its
quota; otherwise every core of the machine, from Linux's /proc/stat, less the time of niced work
(which yields the cores to the web's turns)."""

from __future__ import annotations

import os
import time

CPU_KEEP = 0.8  # the busy figure keeps this share of its last value each reading (a ~0.5 s memory)
PROC_STAT = "/proc/stat"
CGROUP_DIR = "/sys/fs/cgroup"  # cgroup v2: cpu.max (a quota) and cpu.stat (time used)


class CpuBusy:
    """The share of the CPU this site may use that was busy lately (0-1); None where it cannot be
    read. In a container given a CPU quota (cgroup v2 ``cpu.max``), the container's own CPU time
    against its quota; otherwise every core of the machine, from Linux's /proc/stat."""

    def __init__(self, path: str = PROC_STAT, cgroup: str = CGROUP_DIR, clock=time.monotonic):
        self.path, self.cgroup, self.clock = path, cgroup, clock  # clock: seconds, for a quota's capacity
        self.busy: float | None = None
        self.quota: float | None = None  # cores the cgroup may use; 0: no quota (the machine's cores)
        self._last: tuple[float, float] | None = None

    def _counters(self) -> tuple[float, float] | None:
        """(busy, capacity) so far, in one unit."""
        if self.quota is None:
            self.quota = _cgroup_quota(self.cgroup)
        try:
            if self.quota:
                with open(os.path.join(self.cgroup, "cpu.stat"), "rb") as stat:
                    usage = next(int(line.split()[1]) for line in stat if line.startswith(b"usage_usec "))
                return usage, self.clock() * 1e6 * self.quota
            with open(self.path, "rb") as stat:
                fields = [int(n) for n in stat.readline().split()[1:9]]
        except (OSError, ValueError, StopIteration, IndexError):
            return None
        if len(fields) < 5:
            return None
        total = sum(fields)
        # idle and iowait are not busy, nor is work niced (the site's workers, nice 10: they yield the
        # cores to a turn). Measured (bench/evening.py, 1,000 players, stories under way): with the
        # memory work done as it comes, counting it refused 20% of the turns tried, against 5% not.
        return total - fields[1] - fields[3] - fields[4], total

    def read(self) -> None:
        counters = self._counters()
        if counters is None:
            return
        if self._last is not None and counters[1] > self._last[1]:
            now = min(1.0, max(0.0, (counters[0] - self._last[0]) / (counters[1] - self._last[1])))
            self.busy = now if self.busy is None else self.busy * CPU_KEEP + now * (1 - CPU_KEEP)
        self._last = counters


def _cgroup_quota(cgroup: str) -> float:
    """Cores a cgroup v2 quota allows (``cpu.max``: quota and period in µs); 0 without one."""
    try:
        with open(os.path.join(cgroup, "cpu.max")) as limit:
            quota, period = limit.read().split()[:2]
        return int(quota) / int(period) if quota != "max" else 0.0
    except (OSError, ValueError, ZeroDivisionError):
        return 0.0
