"""Expected runtimes for backfill: declared where the pod says, learned where it does not.

A pod may declare ``gpupool.io/expected-runtime``; otherwise the estimate is the mean observed
runtime of finished pods of the same queue and request shape (whole/share/MIG/CPU and GPU
count), then of the queue, then of everything, then :data:`DEFAULT_RUNTIME`. Learning is a
separate call (:meth:`RuntimeEstimator.observe_completion`), made by the caller once per finished
pod, so asking for an estimate never changes one. A declared runtime is trusted only for
ordering a backfill, never for preempting: a tenant gains nothing by lying except a backfill
slot it will overrun, which EASY backfill tolerates (the reservation moves, nobody is evicted).
"""

from __future__ import annotations

from collections import defaultdict

from gpupool.policy.workload import Workload

DEFAULT_RUNTIME = 3600.0
"""Seconds assumed before anything has finished."""


def _shape(workload: Workload) -> tuple[str, int]:
    return (workload.pod.kind.value, workload.pod.gpu_count)


class RuntimeEstimator:
    """Learns mean runtimes per (queue, shape), per queue and overall."""

    def __init__(self) -> None:
        self._sums: defaultdict[tuple[object, ...], list[float]] = defaultdict(lambda: [0.0, 0])

    def observe_completion(self, workload: Workload, queue: str, seconds: float) -> None:
        """Learn from a pod that ran to completion for ``seconds``."""
        for key in ((queue, *_shape(workload)), (queue,), ()):
            entry = self._sums[key]
            entry[0] += seconds
            entry[1] += 1

    def estimate(self, workload: Workload, queue: str) -> float:
        """Expected runtime of ``workload`` in seconds."""
        if workload.expected_runtime is not None:
            return workload.expected_runtime
        for key in ((queue, *_shape(workload)), (queue,), ()):
            entry = self._sums.get(key)
            if entry is not None and entry[1]:
                return entry[0] / entry[1]
        return DEFAULT_RUNTIME
