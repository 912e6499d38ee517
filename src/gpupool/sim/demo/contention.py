"""Contention in the simulated cluster: what the node agents would publish for ``gpupool demo``.

The demo draws each working pod's SM utilisation
(:class:`~gpupool.sim.demo.embedded.EmbeddedCluster` ``usage``); here the pods sharing a GPU
are measured as the fake NVML measures scripted processes
(:func:`~gpupool.core.contention.fair_split`: beyond 100 % each gets its part), and the GPU is
assessed by the same model the agent runs (:func:`~gpupool.core.contention.assess`).
A share's demand is its SM utilisation (the time its kernels would run alone: an MPS thread
percentage bounds the SMs a client uses, not that time), and its memory-controller use is
:data:`MEMORY_PER_SM` of that: an assumption (memory-bound training
and inference kernels keep the memory bus busy in rough proportion to their compute), not a
measurement, chosen so that a GPU shared by busy pods shows the bandwidth contention MPS
co-location is known for.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.core.contention import (
    AffectedShare,
    ContendedGpu,
    ContentionLevel,
    GpuReadings,
    ShareOnGpu,
    assess,
    fair_split,
)
from gpupool.core.model import MILLI_PER_GPU, RequestKind
from gpupool.core.snapshot import ClusterSnapshot

MEMORY_PER_SM = 0.8
"""Memory-controller utilisation per percent of SM utilisation of a simulated share."""


def simulated_contention(
    snapshot: ClusterSnapshot, usage: Mapping[str, float], classes: Mapping[str, str]
) -> list[ContendedGpu]:
    """The contended GPUs of ``snapshot`` with the pods' SM ``usage`` (by pod name).

    Args:
        snapshot: Where the pods run.
        usage: Each running pod's SM utilisation now (percent of a whole GPU).
        classes: Each pod's workload class.
    """
    on_gpu: dict[tuple[int, int], list[tuple[str, float]]] = {}
    for name, allocation in sorted(snapshot.allocations.items()):
        pod = allocation.pod
        if pod.kind is not RequestKind.SHARE:
            continue
        for gpu in allocation.gpus:
            cap = pod.gpu_milli * 100 / MILLI_PER_GPU
            on_gpu.setdefault((allocation.node, gpu), []).append((name, cap))
    found = []
    for (node, gpu), shares in sorted(on_gpu.items()):
        demand = [int(usage.get(name, 0.0)) for name, _ in shares]
        sm = fair_split(demand)
        busy = fair_split([int(d * MEMORY_PER_SM) for d in demand])
        readings = GpuReadings(min(100, sum(demand)), min(100, sum(busy)))
        measured = zip(shares, sm, strict=True)
        result = assess(readings, [ShareOnGpu(name, cap, used) for (name, cap), used in measured])
        if result.level is ContentionLevel.NONE:
            continue
        found.append(
            ContendedGpu(
                snapshot.nodes[node].name,
                gpu,
                result.level,
                result.score,
                result.reasons,
                tuple(
                    AffectedShare(name, classes.get(name, ""), result.slowdown[name])
                    for name, _ in sorted(shares)
                ),
                sm_percent=readings.sm_percent,
                memory_busy_percent=readings.memory_busy_percent,
            )
        )
    return found
