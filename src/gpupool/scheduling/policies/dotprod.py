"""DotProd (after Tetris): prefer the node whose free resources align least with the demand.

Node vector ``[cpu_free/128000, gpu_free/8000]``, pod vector ``[cpu/128000, gpu/8000]``; the
score is ``trunc(100 * (1 - dot/2))``, so the smallest dot product (the least free resource in
the dimensions the pod uses) wins.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.framework import FloatArray
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import BoolArray, ClusterSnapshot
from gpupool.scheduling.policies.base import MAX_SPEC_CPU, MAX_SPEC_GPU, PolicyBase


class DotProdPolicy(PolicyBase):
    """Tetris-style alignment score with max normalisation."""

    name = "dotprod"

    def score(self, snapshot: ClusterSnapshot, pod: PodSpec, feasible: BoolArray) -> FloatArray:
        """``trunc(100 * (1 - <node_free, demand> / 2))`` per node."""
        dot = (snapshot.cpu_free / MAX_SPEC_CPU) * (pod.cpu_milli / MAX_SPEC_CPU) + (
            snapshot.gpu_free_total / MAX_SPEC_GPU
        ) * (pod.total_gpu_milli / MAX_SPEC_GPU)
        return np.trunc(100.0 * (1.0 - dot / 2.0))
