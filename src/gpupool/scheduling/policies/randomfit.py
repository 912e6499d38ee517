"""Random: a uniformly random feasible node, and a random fitting GPU for a share.

This is the paper's lower baseline; it shows what placement without any packing strands.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.framework import FloatArray
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import BoolArray, ClusterSnapshot
from gpupool.scheduling.gpu_choice import random_fit_gpus
from gpupool.scheduling.policies.base import PolicyBase


class RandomPolicy(PolicyBase):
    """Score 100 for one uniformly drawn feasible node and 0 elsewhere.

    Args:
        rng: The seeded generator that makes a run reproducible.
    """

    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def score(self, snapshot: ClusterSnapshot, pod: PodSpec, feasible: BoolArray) -> FloatArray:
        """One random winner among the feasible nodes."""
        candidates = np.flatnonzero(feasible)
        scores = np.zeros(snapshot.size, dtype=np.float64)
        scores[candidates[self.rng.integers(candidates.size)]] = 100.0
        return scores

    def select_gpus(self, snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> tuple[int, ...]:
        """A random fitting GPU for a single share, the first free GPUs otherwise."""
        return random_fit_gpus(snapshot, pod, node, self.rng)
