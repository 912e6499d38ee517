"""Where a benchmark ran: every report carries this, so a number never travels without it."""

from __future__ import annotations

import os
import platform
from typing import Any

import numpy as np


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _proc_field(path: str, prefix: str) -> str | None:
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine_description() -> dict[str, Any]:
    """CPU model and count, memory, Python, numpy and the platform."""
    memory = _proc_field("/proc/meminfo", "MemTotal")
    return {
        "cpu_model": _proc_field("/proc/cpuinfo", "model name")
        or platform.processor()
        or platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cores(),
        "memory_gib": round(int(memory.split()[0]) / 1024**2, 1) if memory else None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
    }
