"""A share of the simulated workload run as gangs, to measure what starting whole costs.

Distributed training splits a job of ``N`` GPUs into ``N`` workers that only make progress
together. Here a chosen share of the trace's multi-GPU pods (whole GPUs, 2 or more) arrives as
such a gang instead: ``N`` one-GPU pods, each with ``1/N`` of the pod's CPU and memory, in a
PodGroup of ``minCount`` ``N``, so the same GPUs are asked for, but they may come from several
nodes and must all be free at once. The choice hashes the pod's name, as the claims and pod-rule
shares do: the same pods in every run and for every setting.

:class:`GangTally` keeps what ``gpupool sim dynamic`` reports of them: how long gangs waited to
start whole, and the GPU-hours held by gangs with fewer than ``minCount`` pods running, which
gang admission must keep at 0 (a partial gang holds GPUs and makes no progress).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace

import numpy as np

from gpupool.core.model import RequestKind
from gpupool.policy.workload import Workload

DRAW = 10_000


def as_gang(workload: Workload, share: float) -> list[Workload] | None:
    """The gang ``workload`` arrives as, if the draw chooses it (``None``: it arrives alone)."""
    pod = workload.pod
    if share <= 0 or pod.kind is not RequestKind.WHOLE or pod.gpu_count < 2:
        return None
    if zlib.crc32(f"{pod.name}/gang".encode()) % DRAW >= share * DRAW:
        return None
    size = pod.gpu_count
    member = replace(
        pod,
        gpu_count=1,
        cpu_milli=pod.cpu_milli // size,
        memory_mib=pod.memory_mib // size,
    )
    return [
        replace(workload, pod=replace(member, name=f"{pod.name}-w{i}"), gang=pod.name)
        for i in range(size)
    ]


@dataclass
class GangTally:
    """Gang starts and partial gangs over a run (seconds of the simulation's clock).

    Args:
        window: (start, end) of the measured time; before it nothing is counted.
    """

    window: tuple[float, float]
    sizes: dict[str, int] = field(default_factory=dict)
    arrived: dict[str, float] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)
    changed: dict[str, float] = field(default_factory=dict)
    waits: list[float] = field(default_factory=list)
    partial_gpu_seconds: float = 0.0

    def arrive(self, gang: str, size: int, at: float) -> None:
        """A gang of ``size`` one-GPU pods arrived."""
        self.sizes[gang], self.arrived[gang], self.running[gang] = size, at, 0
        self.changed[gang] = at

    def started(self, gang: str, at: float) -> None:
        """A pod of ``gang`` started; the gang's wait is counted when it is whole."""
        self._account(gang, at)
        self.running[gang] += 1
        if self.running[gang] == self.sizes[gang] and self.window[0] <= at <= self.window[1]:
            self.waits.append(at - self.arrived[gang])

    def ended(self, gang: str, at: float) -> None:
        """A pod of ``gang`` ended or was evicted."""
        self._account(gang, at)
        self.running[gang] -= 1

    def _account(self, gang: str, at: float) -> None:
        """Add the GPU time the gang held since its last change while it was partial."""
        count, since = self.running[gang], self.changed[gang]
        start, end = max(since, self.window[0]), min(at, self.window[1])
        if 0 < count < self.sizes[gang] and end > start:
            self.partial_gpu_seconds += count * (end - start)
        self.changed[gang] = at

    def report(self) -> dict[str, float | int]:
        """The gang figures of ``gpupool sim dynamic``'s JSON."""
        waits = np.asarray(self.waits, dtype=np.float64)
        return {
            "gangs": len(self.sizes),
            "gang_pods": sum(self.sizes.values()),
            "gangs_started_in_window": len(self.waits),
            "gang_wait_p50_s": float(np.percentile(waits, 50)) if len(waits) else 0.0,
            "gang_wait_p95_s": float(np.percentile(waits, 95)) if len(waits) else 0.0,
            "partial_gang_gpu_hours": self.partial_gpu_seconds / 3600.0,
        }
