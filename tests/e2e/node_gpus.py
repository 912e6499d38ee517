"""What the real node's fake GPUs report, scripted as the driver would: processes and XIDs.

The agent in its pod runs on the fake NVML, which reads ``fake-nvml.json`` in the agent's state
folder (:mod:`gpupool.agent.fakescript`). The processes named there carry the host PIDs of real
container processes, found here the way an operator would on the host: the process whose
cgroup names the pod. The agent maps them back to pods itself, through ``/host/proc``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpupool.agent.fakescript import SCRIPT_FILE
from gpupool.devcluster.nodens import session_path

from .conftest import Cluster


def pids_of_pod(uid: str) -> list[int]:
    """Host PIDs of the pod's processes: its UID is in their cgroup (``-`` or ``_``)."""
    marks = (uid, uid.replace("-", "_"))
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroup = (entry / "cgroup").read_text()
        except OSError:  # ended meanwhile
            continue
        if any(f"pod{mark}" in cgroup for mark in marks):
            found.append(int(entry.name))
    return sorted(found)


class NodeGpus:
    """The script of one real node's fake GPUs; every change rewrites the file atomically."""

    def __init__(self, cluster: Cluster) -> None:
        self.path = session_path(cluster.node.session, "/var/lib/gpupool") / "agent" / SCRIPT_FILE
        self.processes: dict[str, list[dict[str, Any]]] = {}
        self.xids: list[dict[str, Any]] = []

    def run(self, gpu: str, pid: int, *, sm_percent: int, memory_mib: int = 1024) -> None:
        """``pid`` runs on ``gpu`` from now on at this SM utilisation (replacing its entry)."""
        for entries in self.processes.values():
            entries[:] = [e for e in entries if e["pid"] != pid]
        entry = {"pid": pid, "memory_mib": memory_mib, "sm_percent": sm_percent}
        self.processes.setdefault(gpu, []).append(entry)
        self._write()

    def break_gpu(self, gpu: str, xid: int = 79) -> None:
        """The driver raises ``xid`` on ``gpu`` (79: fallen off the bus)."""
        self.xids.append({"gpu": gpu, "xid": xid})
        self._write()

    def clear(self) -> None:
        """No script left behind: the next test's agent starts on healthy, idle GPUs."""
        self.path.unlink(missing_ok=True)

    def _write(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"processes": self.processes, "xids": self.xids}))
        os.replace(temporary, self.path)
