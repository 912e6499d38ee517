"""What the kernel says about a process: resident memory and CPU time, read from ``/proc``.

The live and memory benchmarks measure processes they did not write (etcd, kube-apiserver, kwok,
kube-scheduler) as well as gpupool's, so they ask the kernel rather than the processes: the
numbers then mean the same for every one of them. Readers return None for a process that has
exited instead of raising, so a benchmark that samples a dying process records a gap, not a
crash.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from gpupool.devcluster.controlplane import LocalControlPlane


def proc_status_kib(pid: int, key: str) -> int | None:
    """A ``/proc/<pid>/status`` field in KiB (``VmRSS``, ``VmHWM``), or None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def rss_mib(pid: int, key: str = "VmRSS") -> float | None:
    """Resident set (``VmRSS``) or its peak (``VmHWM``) in MiB, one decimal, or None."""
    kib = proc_status_kib(pid, key)
    return None if kib is None else round(kib / 1024, 1)


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, from ``/proc/<pid>/stat``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def machine_busy_cpu_seconds() -> float:
    """CPU seconds every CPU of the machine spent busy since boot (``/proc/stat``)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(plane: LocalControlPlane) -> dict[str, float]:
    """CPU seconds used so far by this process (``bench``) and each running child of the plane."""
    times = os.times()
    used = {"bench": times.user + times.system}
    for name, child in list(plane.processes.items()):
        seconds = proc_cpu_seconds(child.process.pid) if child.running else None
        if seconds is not None:
            used[name] = seconds
    return used


def peak_rss_mib(plane: LocalControlPlane) -> dict[str, float | None]:
    """VmHWM (peak resident set) of every running control-plane process, in MiB."""
    return {
        name: rss_mib(child.process.pid, "VmHWM") if child.running else None
        for name, child in plane.processes.items()
    }


@dataclass
class CpuWindow:
    """How busy the machine was during a timed window, who used it, and how much was not us.

    On a shared machine (CI, colleagues' tests) other processes steal CPU from a 2-core control
    plane; ``foreign_fraction`` says how much, so a disturbed run can be told from a slow one.
    The per-process seconds show where the CPU went (API server, etcd, kwok, scheduler).
    """

    plane: LocalControlPlane
    began: float = 0.0
    busy: float = 0.0
    own: dict[str, float] = field(default_factory=dict)

    def start(self) -> None:
        """Take the first reading."""
        self.began = time.monotonic()
        self.busy = machine_busy_cpu_seconds()
        self.own = own_cpu_seconds(self.plane)

    def finish(self) -> dict[str, Any]:
        """Busy and foreign shares of all CPUs since :meth:`start` (0..1), seconds by process."""
        elapsed = max(time.monotonic() - self.began, 1e-6)
        capacity = elapsed * (os.cpu_count() or 1)
        busy = machine_busy_cpu_seconds() - self.busy
        now = own_cpu_seconds(self.plane)
        used = {name: round(now[name] - self.own.get(name, 0.0), 2) for name in now}
        return {
            "seconds": round(elapsed, 2),
            "busy_fraction": round(min(busy / capacity, 1.0), 3),
            "foreign_fraction": round(max(busy - sum(used.values()), 0.0) / capacity, 3),
            "cpu_seconds_by_process": used,
        }
