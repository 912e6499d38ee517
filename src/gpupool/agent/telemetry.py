"""Per-pod GPU usage: NVML processes mapped to pods, as Prometheus metrics and an idle signal.

NVML reports host PIDs. A PID belongs to a pod through its cgroup: the kubelet puts every
container in a cgroup whose path contains ``pod<uid>`` (``_`` instead of ``-`` with the systemd
driver), so ``/proc/<pid>/cgroup`` names the pod with no help from the runtime and no trust in
anything the tenant wrote. Processes of no pod (the MPS server, host tools) count for the GPU,
not for a pod.

Two outputs:

* ``/metrics`` on the agent (Prometheus): per pod and GPU ``gpupool_pod_gpu_memory_used_bytes``,
  ``gpupool_pod_gpu_sm_utilization_percent``; per GPU ``gpupool_gpu_memory_used_bytes``,
  ``gpupool_gpu_memory_total_bytes``, ``gpupool_gpu_sm_utilization_percent``,
  ``gpupool_gpu_healthy``.
* the idle-detection signal for governance: the node annotation ``gpupool.io/gpu-usage`` with,
  per pod UID on this node, SM %, memory and the last time it used the GPU. It is written on
  the Node (which tenants cannot write, unlike their pods' annotations) at most once per
  publication period (default 60 s), and only when it changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpupool.agent.grants import ContainerGrant
from gpupool.agent.nvml import GpuDevice, GpuUsage

MIB = 2**20
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


def pod_uid_of(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The UID of the pod a host PID runs in, from its cgroup; None outside any pod."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:  # the process ended, or another PID namespace
        return None
    match = _POD_UID.search(text)
    return match.group(1).replace("_", "-") if match else None


@dataclass(frozen=True, slots=True)
class PodGpuUsage:
    """One pod's usage of one GPU at one sample.

    Attributes:
        pod_uid: The pod.
        gpu_uuid: The GPU.
        memory_mib: Memory its processes hold.
        sm_percent: Their SM utilisation (summed, at most 100).
    """

    pod_uid: str
    gpu_uuid: str
    memory_mib: int
    sm_percent: int


def attribute(usage: Iterable[GpuUsage], uid_of: Callable[[int], str | None]) -> list[PodGpuUsage]:
    """Per (pod, GPU) usage from per-process samples."""
    totals: dict[tuple[str, str], tuple[int, int]] = {}
    for gpu in usage:
        for process in gpu.processes:
            uid = uid_of(process.pid)
            if uid is None:
                continue
            memory, sm = totals.get((uid, gpu.gpu_uuid), (0, 0))
            totals[(uid, gpu.gpu_uuid)] = (memory + process.memory_mib, sm + process.sm_percent)
    return [
        PodGpuUsage(uid, gpu_uuid, memory, min(100, sm))
        for (uid, gpu_uuid), (memory, sm) in sorted(totals.items())
    ]


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class UsageTracker:
    """The idle signal: per pod, current usage and the last time its SM use was above zero.

    A pod granted a GPU counts as active from its first sample: ``lastActive`` starts at the
    first time the agent saw it, so a pod is never reported idle for longer than it has run.
    """

    def __init__(self) -> None:
        self._last_active: dict[str, float] = {}
        self._current: dict[str, tuple[int, int]] = {}
        self._sampled_at = 0.0

    def update(self, pods: Iterable[str], samples: Iterable[PodGpuUsage], now: float) -> None:
        """Record one sample for the pods granted GPUs on this node."""
        current: dict[str, tuple[int, int]] = {uid: (0, 0) for uid in pods}
        for sample in samples:
            if sample.pod_uid not in current:
                continue
            sm, memory = current[sample.pod_uid]
            current[sample.pod_uid] = (max(sm, sample.sm_percent), memory + sample.memory_mib)
        for uid, (sm, _) in current.items():
            if sm > 0 or uid not in self._last_active:
                self._last_active[uid] = now
        self._last_active = {uid: t for uid, t in self._last_active.items() if uid in current}
        self._current = current
        self._sampled_at = now

    def signal(self) -> dict[str, Any]:
        """The annotation value (JSON-ready)."""
        return {
            "sampledAt": _rfc3339(self._sampled_at),
            "pods": {
                uid: {
                    "smPercent": sm,
                    "memoryMib": memory,
                    "lastActive": _rfc3339(self._last_active[uid]),
                }
                for uid, (sm, memory) in sorted(self._current.items())
            },
        }


class AgentMetrics:
    """The agent's Prometheus metrics on its own registry (no global state)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Gauge

        self.registry = CollectorRegistry()
        pod_labels = ("namespace", "pod", "pod_uid", "gpu_uuid")
        self.pod_memory = Gauge(
            "gpupool_pod_gpu_memory_used_bytes",
            "GPU memory held by the pod's processes.",
            pod_labels,
            registry=self.registry,
        )
        self.pod_sm = Gauge(
            "gpupool_pod_gpu_sm_utilization_percent",
            "SM utilisation of the pod's processes over the last NVML sample period.",
            pod_labels,
            registry=self.registry,
        )
        self.gpu_memory = Gauge(
            "gpupool_gpu_memory_used_bytes",
            "GPU memory in use.",
            ("gpu_uuid",),
            registry=self.registry,
        )
        self.gpu_total = Gauge(
            "gpupool_gpu_memory_total_bytes",
            "GPU memory.",
            ("gpu_uuid", "model"),
            registry=self.registry,
        )
        self.gpu_sm = Gauge(
            "gpupool_gpu_sm_utilization_percent",
            "Percent of time a kernel ran on the GPU.",
            ("gpu_uuid",),
            registry=self.registry,
        )
        self.gpu_healthy = Gauge(
            "gpupool_gpu_healthy",
            "1 unless a critical XID was seen.",
            ("gpu_uuid",),
            registry=self.registry,
        )

    def update(
        self,
        gpus: Iterable[GpuDevice],
        usage: Iterable[GpuUsage],
        pods: Iterable[PodGpuUsage],
        grants: Iterable[ContainerGrant],
    ) -> None:
        """Replace every series with this sample (series of ended pods disappear)."""
        names = {grant.pod_uid: (grant.namespace, grant.pod) for grant in grants}
        for gauge in (self.pod_memory, self.pod_sm, self.gpu_memory, self.gpu_total, self.gpu_sm):
            gauge.clear()
        self.gpu_healthy.clear()
        for gpu in gpus:
            self.gpu_total.labels(gpu.uuid, gpu.model).set(gpu.memory_mib * MIB)
            self.gpu_healthy.labels(gpu.uuid).set(1 if gpu.healthy else 0)
        for sample in usage:
            self.gpu_memory.labels(sample.gpu_uuid).set(sample.memory_used_mib * MIB)
            self.gpu_sm.labels(sample.gpu_uuid).set(sample.sm_percent)
        for pod in pods:
            namespace, name = names.get(pod.pod_uid, ("", ""))
            labels = (namespace, name, pod.pod_uid, pod.gpu_uuid)
            self.pod_memory.labels(*labels).set(pod.memory_mib * MIB)
            self.pod_sm.labels(*labels).set(pod.sm_percent)
