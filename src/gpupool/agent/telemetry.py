"""Per-pod GPU usage: NVML processes mapped to pods, as Prometheus metrics and an idle signal.

NVML reports host PIDs. A PID belongs to a pod through its cgroup: the kubelet puts every
container in a cgroup whose path contains ``pod<uid>`` (``_`` instead of ``-`` with the systemd
driver), so ``/proc/<pid>/cgroup`` names the pod with no help from the runtime and no trust in
anything the tenant wrote. Processes of no pod (the MPS server, host tools) count for the GPU,
not for a pod.

Two outputs:

* ``/metrics`` on the agent (Prometheus): per pod and GPU ``gpupool_pod_gpu_memory_used_bytes``,
  ``gpupool_pod_gpu_sm_utilization_percent``, ``gpupool_pod_gpu_memory_utilization_percent``;
  per GPU ``gpupool_gpu_memory_used_bytes``, ``gpupool_gpu_memory_total_bytes``,
  ``gpupool_gpu_sm_utilization_percent``, ``gpupool_gpu_memory_utilization_percent``,
  ``gpupool_gpu_healthy``.
* the idle-detection signal for governance: the node annotation ``gpupool.io/gpu-usage`` with,
  per pod UID on this node, the highest SM and memory-controller utilisation of the samples
  (every 5 s) since the last publication, the memory it holds and the last time it used the
  GPU. It is written on the Node (which tenants cannot write, unlike their pods'
  annotations) once per publication period (default 60 s).

Why the period's highest sample and not the latest one or the mean: a minute of an inference
server answering a request every few seconds, or of a notebook cell that ran for 20 s, is a
minute of work; the latest sample alone misses it whenever the burst ended before the
publication (the aliasing that made the idle rule see quiet phases that were not there), and
the mean spreads it below the pool's threshold. Background noise stays under any threshold
above a few percent either way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from gpupool.agent.grants import ContainerGrant
from gpupool.agent.nvml import GpuDevice, GpuUsage
from gpupool.kube.objects.timestamps import format_time
from gpupool.kube.objects.usage_signal import PodUsageEntry, UsageSignal

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
        memory_busy_percent: Their memory-controller utilisation (summed, at most 100).
    """

    pod_uid: str
    gpu_uuid: str
    memory_mib: int
    sm_percent: int
    memory_busy_percent: int = 0


def attribute(usage: Iterable[GpuUsage], uid_of: Callable[[int], str | None]) -> list[PodGpuUsage]:
    """Per (pod, GPU) usage from per-process samples."""
    totals: dict[tuple[str, str], tuple[int, int, int]] = {}
    for gpu in usage:
        for process in gpu.processes:
            uid = uid_of(process.pid)
            if uid is None:
                continue
            memory, sm, busy = totals.get((uid, gpu.gpu_uuid), (0, 0, 0))
            totals[(uid, gpu.gpu_uuid)] = (
                memory + process.memory_mib,
                sm + process.sm_percent,
                busy + process.memory_busy_percent,
            )
    return [
        PodGpuUsage(uid, gpu_uuid, memory, min(100, sm), min(100, busy))
        for (uid, gpu_uuid), (memory, sm, busy) in sorted(totals.items())
    ]


def tracked_pods(
    granted: Iterable[str], claimed_gpus: Iterable[str], samples: Iterable[PodGpuUsage]
) -> set[str]:
    """The pods the idle signal speaks for: granted GPUs here, or running on a claim's GPU.

    A device-plugin grant names its pod; a prepared DRA claim names only itself (its pods are
    in the claim's ``reservedFor``, which the agent does not read again while the claim is
    prepared). So a claim's pods are the ones whose processes NVML shows on the claim's GPUs:
    a pod holding a CUDA context and doing nothing is reported (at 0 %), and a claim pod with
    no process on its GPU is not reported at all, so it is never taken for idle.
    """
    claimed = set(claimed_gpus)
    return set(granted) | {sample.pod_uid for sample in samples if sample.gpu_uuid in claimed}


@dataclass(frozen=True, slots=True)
class _PodSample:
    """One pod at one sample, over its GPUs: the busiest GPU's utilisation, all memory held."""

    sm_percent: int = 0
    memory_busy_percent: int = 0
    memory_mib: int = 0


class UsageTracker:
    """The idle signal: per pod, its usage since the last publication and when it last used SM.

    The utilisation published is the highest of the samples since the last publication
    (:meth:`published` starts a new period), the memory the latest sample's. A pod granted a
    GPU counts as active from its first sample: ``lastActive`` starts at the first time the
    agent saw it, so a pod is never reported idle for longer than it has run.
    """

    def __init__(self) -> None:
        self._last_active: dict[str, float] = {}
        self._current: dict[str, _PodSample] = {}
        self._peaks: dict[str, tuple[int, int]] = {}
        self._unsent: dict[str, tuple[int, int]] = {}
        self._sampled_at = 0.0

    def update(self, pods: Iterable[str], samples: Iterable[PodGpuUsage], now: float) -> None:
        """Record one sample for the pods granted GPUs on this node."""
        current = {uid: _PodSample() for uid in pods}
        for sample in samples:
            seen = current.get(sample.pod_uid)
            if seen is None:
                continue
            current[sample.pod_uid] = _PodSample(
                max(seen.sm_percent, sample.sm_percent),
                max(seen.memory_busy_percent, sample.memory_busy_percent),
                seen.memory_mib + sample.memory_mib,
            )
        for uid, pod in current.items():
            if pod.sm_percent > 0 or uid not in self._last_active:
                self._last_active[uid] = now
            sm, busy = self._peaks.get(uid, (0, 0))
            self._peaks[uid] = (max(sm, pod.sm_percent), max(busy, pod.memory_busy_percent))
        self._last_active = {uid: t for uid, t in self._last_active.items() if uid in current}
        self._peaks = {uid: peak for uid, peak in self._peaks.items() if uid in current}
        self._unsent = {uid: peak for uid, peak in self._unsent.items() if uid in current}
        self._current = current
        self._sampled_at = now

    def signal(self, period: float) -> UsageSignal:
        """The annotation value, covering every sample not yet published, which is every ``period``.

        The period is published with it: governance counts a sample older than a few periods
        as stale (neither idle nor active), so it must know how often a live agent writes.

        The samples so far are set aside as being written: a sample taken while the write is
        under way belongs to the next publication, so :meth:`published` after the write
        cannot drop a burst the write did not carry.
        """
        for uid, (sm, busy) in self._peaks.items():
            sent_sm, sent_busy = self._unsent.get(uid, (0, 0))
            self._unsent[uid] = (max(sm, sent_sm), max(busy, sent_busy))
        self._peaks = {}
        pods = {}
        for uid, pod in sorted(self._current.items()):
            sm, busy = self._unsent.get(uid, (pod.sm_percent, pod.memory_busy_percent))
            pods[uid] = PodUsageEntry(
                sm_percent=sm,
                memory_busy_percent=busy,
                memory_mib=pod.memory_mib,
                last_active=format_time(self._last_active[uid]),
            )
        return UsageSignal(
            sampled_at=format_time(self._sampled_at), pods=pods, period_seconds=period
        )

    def published(self) -> None:
        """The last :meth:`signal` was written: the next one covers the samples after it.

        Called only after a successful write, so a failed one loses no burst: the next
        publication covers both periods.
        """
        self._unsent.clear()


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
        self.pod_memory_busy = Gauge(
            "gpupool_pod_gpu_memory_utilization_percent",
            "Memory-controller utilisation of the pod's processes over the last NVML sample "
            "period.",
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
        self.gpu_memory_busy = Gauge(
            "gpupool_gpu_memory_utilization_percent",
            "Percent of time device memory was read or written.",
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
        for gauge in (
            self.pod_memory,
            self.pod_sm,
            self.pod_memory_busy,
            self.gpu_memory,
            self.gpu_total,
            self.gpu_sm,
            self.gpu_memory_busy,
        ):
            gauge.clear()
        self.gpu_healthy.clear()
        for gpu in gpus:
            self.gpu_total.labels(gpu.uuid, gpu.model).set(gpu.memory_mib * MIB)
            self.gpu_healthy.labels(gpu.uuid).set(1 if gpu.healthy else 0)
        for sample in usage:
            self.gpu_memory.labels(sample.gpu_uuid).set(sample.memory_used_mib * MIB)
            self.gpu_sm.labels(sample.gpu_uuid).set(sample.sm_percent)
            self.gpu_memory_busy.labels(sample.gpu_uuid).set(sample.memory_busy_percent)
        for pod in pods:
            namespace, name = names.get(pod.pod_uid, ("", ""))
            labels = (namespace, name, pod.pod_uid, pod.gpu_uuid)
            self.pod_memory.labels(*labels).set(pod.memory_mib * MIB)
            self.pod_sm.labels(*labels).set(pod.sm_percent)
            self.pod_memory_busy.labels(*labels).set(pod.memory_busy_percent)
