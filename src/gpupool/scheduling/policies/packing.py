"""GpuPacking: fill already-shared GPUs first, then used nodes, and open empty nodes last.

For a GPU pod (CPU-only pods score 0 everywhere):

* case 3, every GPU on the node is fully free: ``max(33 - n_gpus, n_gpus)``, which prefers
  smaller empty nodes;
* otherwise walk the GPUs in ascending free order and take the first ``gpu_count`` that fit,
  of which ``f`` are fully free:
  * case 2 (``f > 0``): ``max(50 - f, 33)``;
  * case 1 (the pod fits on partly used GPUs):
    ``max(100 - (sum of floor(free * 100 / 1000)) // 10, 50)``, tightest fit highest.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.framework import FloatArray
from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.core.snapshot import BoolArray, ClusterSnapshot
from gpupool.scheduling.policies.base import PolicyBase


class PackingPolicy(PolicyBase):
    """Three-band packing score."""

    name = "packing"

    def score(self, snapshot: ClusterSnapshot, pod: PodSpec, feasible: BoolArray) -> FloatArray:
        """Packing band and tightness per node."""
        if pod.gpu_count == 0:
            return np.zeros(snapshot.size, dtype=np.float64)
        free = snapshot.gpu_free
        exists = snapshot.gpu_usable  # an unhealthy GPU's free share is no room to pack into
        all_free = np.all((free == MILLI_PER_GPU) | ~exists, axis=1)
        ascending = np.sort(np.where(exists, free, -1), axis=1)
        fits = ascending >= pod.gpu_milli
        chosen = fits & (np.cumsum(fits, axis=1) <= pod.gpu_count)
        whole_free = np.count_nonzero(chosen & (ascending == MILLI_PER_GPU), axis=1)
        tenths = np.where(chosen, ascending * 100 // MILLI_PER_GPU, 0).sum(axis=1)
        case1 = np.maximum(100 - tenths // 10, 50)
        case2 = np.maximum(50 - whole_free, 33)
        case3 = np.maximum(33 - snapshot.gpu_count, snapshot.gpu_count)
        scores = np.where(all_free, case3, np.where(whole_free > 0, case2, case1))
        return scores.astype(np.float64)
