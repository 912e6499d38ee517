"""The target workload: which request shapes are expected, and how often.

Fragmentation is only defined against a workload: a sliver of free GPU is a fragment if the pods
that will arrive cannot use it. FGD's target workload is its "typical pods": requests keyed by
``(cpu_milli, gpu_milli, gpu_count, gpu_models)``, counted, sorted by count (ties by key,
descending), and the most common kept until they cover 95% of all pods.

Weights are kept as counts, not probabilities. Integer-valued float64 arithmetic is exact below
2**53, so fragmentation differences computed from counts are exact, and an unchanged node yields
a delta of exactly zero. That matters because FGD truncates its score to an integer: a rounding
error of 1e-13 below zero would turn a neutral 50 into 49.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.core.model import PodSpec

DEFAULT_COVERAGE = 0.95
"""Share of pods the typical shapes must cover (the FGD simulator's popularity threshold)."""

ShapeKey = tuple[int, int, int, str]
"""``(cpu_milli, gpu_milli, gpu_count, allowed models joined by '|')``."""


def shape_key(pod: PodSpec) -> ShapeKey:
    """The request shape FGD counts; CPU 0 counts as 100m, as Kubernetes' non-zero requests do."""
    cpu = pod.cpu_milli or 100
    return (cpu, pod.gpu_milli, pod.gpu_count, "|".join(sorted(pod.gpu_models)))


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    """Typical request shapes and their weights.

    Attributes:
        cpu_milli: CPU per shape.
        gpu_milli: Per-GPU compute share per shape (0 for CPU-only shapes).
        gpu_count: GPUs per shape.
        gpu_models: Allowed models per shape (empty: any).
        weight: Non-negative weight per shape (counts for the oracle workload).
        memory_mib: Mean memory request per shape, when known (the online learner records it;
            FGD's key has no memory, so its oracle workload has none). Memory decides where a
            node's GPUs can still be used as much as CPU does: a node whose memory is gone
            strands its GPUs just the same.
    """

    cpu_milli: npt.NDArray[np.int64]
    gpu_milli: npt.NDArray[np.int64]
    gpu_count: npt.NDArray[np.int64]
    gpu_models: tuple[frozenset[str], ...]
    weight: npt.NDArray[np.float64]
    memory_mib: npt.NDArray[np.float64] | None = None

    @property
    def size(self) -> int:
        """Number of shapes."""
        return len(self.gpu_models)

    @property
    def total_weight(self) -> float:
        """Sum of the weights."""
        return float(self.weight.sum())

    @classmethod
    def from_counts(
        cls,
        counts: Mapping[ShapeKey, float],
        coverage: float = DEFAULT_COVERAGE,
        memory: Mapping[ShapeKey, float] | None = None,
    ) -> TargetWorkload:
        """The most common shapes covering ``coverage`` of the total weight.

        ``memory`` gives the mean memory request of each shape (a shape it lacks gets 0).

        Raises:
            ValueError: ``counts`` is empty or ``coverage`` is outside (0, 1].
        """
        if not counts:
            raise ValueError("a target workload needs at least one request shape")
        if not 0.0 < coverage <= 1.0:
            raise ValueError(f"coverage must be in (0, 1], got {coverage}")
        ranked = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
        goal = coverage * sum(counts.values())
        kept: list[tuple[ShapeKey, float]] = []
        covered = 0.0
        for key, count in ranked:
            if covered >= goal:
                break
            kept.append((key, count))
            covered += count
        return cls(
            cpu_milli=np.array([key[0] for key, _ in kept], dtype=np.int64),
            gpu_milli=np.array([key[1] for key, _ in kept], dtype=np.int64),
            gpu_count=np.array([key[2] for key, _ in kept], dtype=np.int64),
            gpu_models=tuple(frozenset(filter(None, key[3].split("|"))) for key, _ in kept),
            weight=np.array([count for _, count in kept], dtype=np.float64),
            memory_mib=None
            if memory is None
            else np.array([memory.get(key, 0.0) for key, _ in kept], dtype=np.float64),
        )

    @classmethod
    def from_pods(
        cls, pods: Iterable[PodSpec], coverage: float = DEFAULT_COVERAGE
    ) -> TargetWorkload:
        """FGD's oracle workload: every pod of the trace counted once, CPU-only pods included."""
        return cls.from_counts(Counter(shape_key(pod) for pod in pods), coverage)
