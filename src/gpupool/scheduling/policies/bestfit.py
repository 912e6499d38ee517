"""BestFit: the node with the least weighted leftover CPU and GPU after placement wins.

``s = 0.5 (cpu_free - cpu)/128000 + 0.5 (gpu_free - gpu)/8000`` and the score is
``trunc(100 (1 - s))``. Leftovers are absolute, not fractions of the node, and memory is not
weighed; one score point is 0.16 GPU or 2.56 vCPU, so the fixed node order breaks many ties.
The authors' min-max normalisation afterwards never changes the argmax, so it is omitted.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.framework import FloatArray
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import BoolArray, ClusterSnapshot
from gpupool.scheduling.policies.base import MAX_SPEC_CPU, MAX_SPEC_GPU, PolicyBase


class BestFitPolicy(PolicyBase):
    """Least absolute leftover wins."""

    name = "bestfit"

    def score(self, snapshot: ClusterSnapshot, pod: PodSpec, feasible: BoolArray) -> FloatArray:
        """``trunc(100 * (1 - leftover))`` per node."""
        leftover = (
            0.5 * (snapshot.cpu_free - pod.cpu_milli) / MAX_SPEC_CPU
            + 0.5 * (snapshot.gpu_free_total - pod.total_gpu_milli) / MAX_SPEC_GPU
        )
        return np.trunc(100.0 * (1.0 - leftover))
