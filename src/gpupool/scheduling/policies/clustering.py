"""GpuClustering: put identical GPU requests together, fuller nodes first inside each band.

A pod's class is ``share`` (one GPU, less than 1000 milli) or ``<k>-gpu``. With
``base = 25 (8000 - gpu_free) // 8000``:

* the node runs only pods of this class: ``base + 75``;
* it runs this class among others: ``base + 50``;
* it runs no GPU pods: ``base + 25``;
* it runs only other classes: ``base``.

CPU-only pods score 0 everywhere, so the fixed node order decides for them.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.framework import FloatArray
from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.core.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.scheduling.policies.base import MAX_SPEC_GPU, PolicyBase


def affinity_class(pod: PodSpec) -> str:
    """The clustering class of a GPU pod, or ``""`` for a pod without GPUs."""
    if pod.gpu_count == 0:
        return ""
    if pod.gpu_count == 1 and pod.gpu_milli < MILLI_PER_GPU:
        return "share"
    return f"{pod.gpu_count}-gpu"


class ClusteringPolicy(PolicyBase):
    """Class-affinity bands with a fullness bonus; keeps per-node class counts up to date."""

    name = "clustering"

    def __init__(self) -> None:
        self._classes: dict[str, int] = {}
        self._counts: IntArray = np.zeros((0, 0), dtype=np.int64)
        self._seen_gen: IntArray = np.zeros(0, dtype=np.int64)
        self._snapshot: ClusterSnapshot | None = None

    def score(self, snapshot: ClusterSnapshot, pod: PodSpec, feasible: BoolArray) -> FloatArray:
        """Affinity band plus fullness, per node."""
        cls = affinity_class(pod)
        if not cls:
            return np.zeros(snapshot.size, dtype=np.float64)
        counts = self._refresh(snapshot, cls)
        own = counts[:, self._classes[cls]]
        classes_present = np.count_nonzero(counts, axis=1)
        base = (25 * (MAX_SPEC_GPU - snapshot.gpu_free_total)) // MAX_SPEC_GPU
        band = np.select(
            [(own > 0) & (classes_present == 1), own > 0, classes_present == 0],
            [75, 50, 25],
            default=0,
        )
        scores: FloatArray = (base + band).astype(np.float64)
        return scores

    def _refresh(self, snapshot: ClusterSnapshot, cls: str) -> IntArray:
        """Recount classes on the nodes whose generation changed since the last call."""
        if self._snapshot is not snapshot:
            self._snapshot = snapshot
            self._classes = {}
            self._counts = np.zeros((snapshot.size, 0), dtype=np.int64)
            self._seen_gen = np.full(snapshot.size, -1, dtype=np.int64)
        if cls not in self._classes:
            self._classes[cls] = len(self._classes)
            self._counts = np.pad(self._counts, ((0, 0), (0, 1)))
            self._seen_gen[:] = -1
        for node in np.flatnonzero(self._seen_gen != snapshot.node_gen):
            row = np.zeros(len(self._classes), dtype=np.int64)
            for name in snapshot.pods_on_node[node]:
                held = affinity_class(snapshot.allocations[name].pod)
                if held:
                    if held not in self._classes:
                        self._classes[held] = len(self._classes)
                        self._counts = np.pad(self._counts, ((0, 0), (0, 1)))
                        row = np.pad(row, (0, 1))
                    row[self._classes[held]] += 1
            self._counts[node] = row
            self._seen_gen[node] = snapshot.node_gen[node]
        return self._counts
