"""Placement under contention: a pool may keep new pods off GPUs its agents report contended.

The scores come from the node agents' measurements (``NodeSpec.gpu_contention``), never from
a pod; a pool's ``spec.contention.avoidAbove`` turns them into a per-GPU mask, set here
(``ClusterSnapshot.gpu_calm``), that the GPU filter honours like GPU health: a pod turned away
only by it is told so (``filtering.REASON_CONTENDED``), not "Insufficient gpupool.io/gpu". Pods
already on a contended GPU stay where they are: the rule decides where new pods go, not who
leaves.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpupool.core.snapshot import ClusterSnapshot, IntArray


def avoid_contention(
    snapshot: ClusterSnapshot, rows: int | Sequence[int] | IntArray, at_or_above: float
) -> None:
    """Keep new pods off the GPUs of ``rows`` whose published score is at least ``at_or_above``.

    Called on a fresh snapshot with a pool's nodes, as the pool's sharing limits are.

    Raises:
        ValueError: The threshold is not within 0..1.
    """
    if not 0.0 <= at_or_above <= 1.0:
        raise ValueError(f"avoidAbove must be within 0..1, got {at_or_above}")
    if not snapshot.contention_limited:
        snapshot.gpu_calm = snapshot.gpu_exists.copy()
        snapshot.contention_limited = True
    chosen = np.atleast_1d(np.asarray(rows, dtype=np.int64))
    for row in chosen.tolist():
        scores = np.asarray(snapshot.nodes[row].gpu_contention, dtype=np.float64)
        calm = snapshot.gpu_exists[row].copy()
        calm[: len(scores)] &= scores < at_or_above
        snapshot.gpu_calm[row] = calm
    snapshot.node_gen[chosen] += 1
