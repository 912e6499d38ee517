"""kube-scheduler's node scores that read only the node: preferred node affinity, soft taints.

kube-scheduler ranks feasible nodes by NodeAffinity's score (the sum of the weights of the
pod's preferred terms a node meets, scaled so the best node gets 100) and TaintToleration's
(the count of ``PreferNoSchedule`` taints the pod does not tolerate, scaled and reversed so the
node with the most gets 0), with its default plugin weights 2 and 3. gpupool's own GPU score
decides first (fragmentation is what it is for); these break its ties
(:func:`gpupool.core.pod_relative.prefer`), so a pod that prefers a zone or avoids a soft-tainted
node gets what it asked for among nodes that are equal for packing.

Both depend only on the pod's constraints and the node inventory: they are computed once per
distinct constraint set on a snapshot and cached there, like the node checks, and cost nothing
for a pod that prefers nothing on nodes without ``PreferNoSchedule`` taints.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.constraints import NodeConstraints
from gpupool.core.snapshot import ClusterSnapshot, FloatArray, IntArray

MAX_NODE_SCORE = 100.0
"""kube-scheduler's largest node score."""
NODE_AFFINITY_WEIGHT = 2.0
"""NodeAffinity's weight among kube-scheduler 1.37's default score plugins."""
TAINT_TOLERATION_WEIGHT = 3.0
"""TaintToleration's weight among kube-scheduler 1.37's default score plugins."""
SOFT_EFFECT = "PreferNoSchedule"
MAX_CACHED = 1024
"""Distinct constraint sets whose raw scores a snapshot keeps."""


def _raw(
    snapshot: ClusterSnapshot, constraints: NodeConstraints | None
) -> tuple[FloatArray, FloatArray] | None:
    """Per node: the weights of preferred terms met, and untolerated soft taints (None: all 0)."""
    cache = snapshot.node_preferences
    if constraints in cache:
        return cache[constraints]
    preferred = constraints.preferred if constraints is not None else ()
    tolerations = constraints.tolerations if constraints is not None else ()
    weights = np.array(
        [
            sum(p.weight for p in preferred if p.term.holds(dict(node.labels), node.name))
            for node in snapshot.nodes
        ]
        if preferred
        else [0.0] * snapshot.size,
        dtype=np.float64,
    )
    soft = np.array(
        [
            sum(
                1
                for taint in node.taints
                if taint.effect == SOFT_EFFECT and not any(t.tolerates(taint) for t in tolerations)
            )
            for node in snapshot.nodes
        ],
        dtype=np.float64,
    )
    found = None if not weights.any() and not soft.any() else (weights, soft)
    if len(cache) >= MAX_CACHED:
        cache.pop(next(iter(cache)))
    cache[constraints] = found
    return found


def node_preference_score(
    snapshot: ClusterSnapshot, constraints: NodeConstraints | None, nodes: IntArray
) -> FloatArray | None:
    """The weighted NodeAffinity plus TaintToleration score of ``nodes`` (None: all equal).

    Scaled over ``nodes`` as kube-scheduler scales over the feasible nodes it scores.
    """
    raw = _raw(snapshot, constraints)
    if raw is None:
        return None
    weights, soft = raw[0][nodes], raw[1][nodes]
    total = np.zeros(nodes.size, dtype=np.float64)
    if weights.max() > 0:
        total += NODE_AFFINITY_WEIGHT * np.floor(MAX_NODE_SCORE * weights / weights.max())
    if soft.max() > 0:
        total += TAINT_TOLERATION_WEIGHT * (
            MAX_NODE_SCORE - np.floor(MAX_NODE_SCORE * soft / soft.max())
        )
    return total
