"""What bench-server reads from /proc about the server: resident memory and CPU time by process.

The server is a supervisor (the round keeper) and its uvicorn workers, children started by
``multiprocessing.spawn`` (multiprocessing's resource tracker is left out).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


class RssSampler(threading.Thread):
    """Samples the VmRSS (bytes) of a process plus its children (the uvicorn workers) every
    10 ms into (time, rss) pairs."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self.running = True

    def rss(self) -> int:
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        total = 0
        for pid in [self.pid, *map(int, children)]:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except FileNotFoundError:  # a worker exiting
                continue
            total += sum(int(line.split()[1]) * 1024 for line in status.splitlines()
                         if line.startswith("VmRSS:"))
        return total

    def run(self) -> None:
        while self.running:
            self.samples.append((time.perf_counter(), self.rss()))
            time.sleep(0.01)

    def peak(self, start: float, stop: float) -> int:
        return max(r for t, r in self.samples if start <= t <= stop)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time all cores have spent busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def server_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of the server's processes by role (see process_rss)."""
    out = {"supervisor": cpu_seconds(pid)}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if "multiprocessing.spawn" in Path(f"/proc/{child}/cmdline").read_text():
            out[f"worker {len(out)}"] = cpu_seconds(int(child))
    return out


def process_rss(pid: int) -> dict[str, float]:
    """Resident MB of the server's processes by role: the supervisor (round keeper) and each
    uvicorn worker (multiprocessing's resource tracker left out)."""
    out = {"supervisor": rss_mb(pid)}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        command = Path(f"/proc/{child}/cmdline").read_text()
        if "multiprocessing.spawn" in command:
            out[f"worker {len(out)}"] = rss_mb(int(child))
    return out


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines()
                if line.startswith("VmRSS:")) / 1024
