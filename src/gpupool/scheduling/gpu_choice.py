"""Choosing GPUs inside the chosen node.

Three rules cover the published policies (placement-benchmark.md, section 2.4):

* best fit: each share goes to the eligible GPU with the least free compute, lowest index on
  ties; for whole GPUs that is simply the first fully free GPUs by index;
* random fit: a single share goes to a uniformly random eligible GPU; whole GPUs as best fit;
* scored choice (FGD) lives with its policy.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.filtering import eligible_gpus
from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.core.snapshot import ClusterSnapshot

_NEVER = np.iinfo(np.int64).max


def best_fit_gpus(snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> tuple[int, ...]:
    """The ``gpu_count`` eligible GPUs with the least free compute (stable: lowest index first)."""
    if pod.gpu_count == 0:
        return ()
    key = np.where(eligible_gpus(snapshot, pod, node), snapshot.gpu_free[node], _NEVER)
    order = np.argsort(key, kind="stable")[: pod.gpu_count]
    return tuple(int(i) for i in order)


def random_fit_gpus(
    snapshot: ClusterSnapshot, pod: PodSpec, node: int, rng: np.random.Generator
) -> tuple[int, ...]:
    """A uniformly random eligible GPU for a single share; best fit otherwise."""
    if pod.gpu_count != 1 or pod.gpu_milli >= MILLI_PER_GPU:
        return best_fit_gpus(snapshot, pod, node)
    candidates = np.flatnonzero(eligible_gpus(snapshot, pod, node))
    return (int(candidates[rng.integers(candidates.size)]),)
