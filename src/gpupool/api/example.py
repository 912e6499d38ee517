"""A small, fixed example cluster for the dashboard: tests, screenshots and trying it out.

Three nodes (two with four 80 GiB A100s, one with two 16 GiB T4s), pods of three teams holding
whole GPUs and shares, and two pending pods with the scheduler's reasons. Built through the
real :class:`~gpupool.core.snapshot.ClusterSnapshot`, so every share shown is one the snapshot
accepted; the numbers the browser test expects (10 GPUs, 8 shares) follow from this list.
"""

from __future__ import annotations

from gpupool.api.sources import SnapshotView
from gpupool.core.contention import (
    AffectedShare,
    ContendedGpu,
    GpuReadings,
    ShareOnGpu,
    assess,
)
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.wait_cause import WaitCause, WaitKind

A100_MIB = 81920
T4_MIB = 16384

NODES = (
    NodeSpec("a100-1", 64000, 512000, gpu_count=4, gpu_model="A100", gpu_memory_mib=A100_MIB),
    NodeSpec("a100-2", 64000, 512000, gpu_count=4, gpu_model="A100", gpu_memory_mib=A100_MIB),
    NodeSpec("t4-1", 16000, 64000, gpu_count=2, gpu_model="T4", gpu_memory_mib=T4_MIB),
)

PLACED = (
    # (pod, node, GPUs)
    (PodSpec("vision/train-0", 8000, 64000, gpu_count=2, gpu_milli=1000), "a100-1", (0, 1)),
    (PodSpec("nlp/finetune-0", 4000, 32000, 1, 500, 40960), "a100-1", (2,)),
    (PodSpec("nlp/finetune-1", 4000, 32000, 1, 500, 40960), "a100-1", (2,)),
    (PodSpec("research/notebook-0", 1000, 8000, 1, 250, 10240), "a100-2", (0,)),
    (PodSpec("research/notebook-1", 1000, 8000, 1, 250, 10240), "a100-2", (0,)),
    (PodSpec("nlp/serve-0", 2000, 16000, 1, 300, 20480), "a100-2", (1,)),
    (PodSpec("vision/infer-0", 2000, 8000, 1, 500, 8192), "t4-1", (0,)),
)
"""Eight shares in all: train-0 holds two GPUs, every other pod one."""

WAITING = (
    (
        PodSpec("vision/train-1", 16000, 128000, gpu_count=4, gpu_milli=1000),
        WaitCause(
            WaitKind.RESOURCES,
            "0/3 nodes are available: 2 Insufficient gpupool.io/gpu, 1 node(s) had too few GPUs.",
        ),
    ),
    (
        PodSpec("research/big-notebook", 1000, 8000, 1, 600, 70000, frozenset({"T4"})),
        WaitCause(
            WaitKind.RESOURCES,
            "0/3 nodes are available: 1 Insufficient gpupool.io/gpu-memory, "
            "2 node(s) didn't match Pod's GPU model.",
        ),
    ),
)

UUIDS = {
    node.name: tuple(f"GPU-{node.name}-{index:04d}" for index in range(node.gpu_count))
    for node in NODES
}


POWER_CAP = 0x4
"""NVML's clocks-event reason for a GPU held under its power limit."""
MEASURED = (
    # (node, GPU, readings, (pod, cap %, measured SM %, class) per share)
    (
        "a100-1",
        2,
        GpuReadings(100, 96),
        (("nlp/finetune-0", 50, 20, "training"), ("nlp/finetune-1", 50, 80, "training")),
    ),
    (
        "a100-2",
        0,
        GpuReadings(40, 20, POWER_CAP, sm_clock_mhz=1128, max_sm_clock_mhz=1410),
        (("research/notebook-0", 25, 25, "dev"), ("research/notebook-1", 25, 15, "dev")),
    ),
)
"""What the example's agents measured: two fine-tunes fighting over a saturated GPU (high), two
notebooks on a power-capped one (low)."""


def example_contention() -> tuple[ContendedGpu, ...]:
    """The example's contended GPUs, assessed by the real model from :data:`MEASURED`."""
    found = []
    for node, index, readings, shares in MEASURED:
        result = assess(readings, [ShareOnGpu(pod, cap, sm) for pod, cap, sm, _ in shares])
        found.append(
            ContendedGpu(
                node,
                index,
                result.level,
                result.score,
                result.reasons,
                tuple(AffectedShare(p, c, result.slowdown[p]) for p, _, _, c in shares),
                UUIDS[node][index],
                readings.sm_percent,
                readings.memory_busy_percent,
            )
        )
    return tuple(found)


def example_view(source: str = "example") -> SnapshotView:
    """A fresh view of the example cluster."""
    snapshot = ClusterSnapshot(NODES)
    for pod, node, gpus in PLACED:
        snapshot.bind(pod, snapshot.node_index[node], gpus)
    return SnapshotView(
        snapshot, WAITING, uuids=UUIDS, source=source, contended=example_contention()
    )
