"""The checks and the tie-break that depend on the pods around a node, in one place.

Inter-pod (anti-)affinity (:mod:`gpupool.core.pod_affinity`) and topology spread
(:mod:`gpupool.core.topology_spread`) are what the filter, ``fits_on_node`` (preemption's and
backfill's what-ifs) and the node choice ask about a pod's neighbours. Most pods name no such
term and most snapshots hold no pod that does: then every function here returns at once, so the
common path costs one attribute test.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpupool.core.model import PodSpec
from gpupool.core.node_preference import node_preference_score
from gpupool.core.pod_affinity import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    affinity_checks,
    affinity_score,
)
from gpupool.core.pod_affinity import required_keys_mask as affinity_keys
from gpupool.core.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.core.topology_spread import (
    MAX_NODE_SCORE,
    REASON_SPREAD,
    REASON_SPREAD_LABEL,
    spread_checks,
    spread_score,
)
from gpupool.core.topology_spread import required_keys_mask as spread_keys

POD_RULE_WEIGHT = 2.0
"""InterPodAffinity's and PodTopologySpread's weight among kube-scheduler 1.37's default score
plugins (both 2: their sum keeps the relative weight they had alone)."""
POD_RELATIVE_REASONS = frozenset(
    {
        REASON_AFFINITY,
        REASON_ANTI_AFFINITY,
        REASON_EXISTING_ANTI_AFFINITY,
        REASON_SPREAD,
        REASON_SPREAD_LABEL,
    }
)


def concerned(snapshot: ClusterSnapshot, pod: PodSpec) -> bool:
    """Whether any pod-relative rule can apply: the pod names terms, or a bound pod does."""
    return pod.terms is not None or bool(snapshot.pods_with_terms)


def pod_checks(snapshot: ClusterSnapshot, pod: PodSpec) -> tuple[tuple[str, BoolArray], ...]:
    """The failing pod-relative checks, with kube-scheduler's reasons (none: all nodes pass)."""
    if not concerned(snapshot, pod):
        return ()
    return (*affinity_checks(snapshot, pod), *spread_checks(snapshot, pod))


def fits_neighbours(snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> bool:
    """Whether ``node`` passes every pod-relative check as the snapshot stands now."""
    return all(passed[node] for _, passed in pod_checks(snapshot, pod))


def failed_for_neighbours(reasons: tuple[tuple[str, int], ...]) -> bool:
    """Whether a rejection counted a node against a pod-relative rule.

    Such a failure says nothing of another pod of the same size: its labels, namespace and
    terms decide whether the same neighbours keep it out, so the engine must not skip pods
    "of the failed shape" behind it. A failure by room alone still speaks for every pod at
    least as large, whatever their terms (terms only remove nodes).
    """
    return any(reason in POD_RELATIVE_REASONS for reason, _ in reasons)


def relabel(snapshot: ClusterSnapshot, name: str, labels: tuple[tuple[str, str], ...]) -> None:
    """Give a bound pod new labels where it runs (nothing else about it changes).

    Labels of a running pod may be edited; kube-scheduler matches other pods' affinity terms
    and spread selectors against the current ones, and so must the snapshot.
    """
    held = snapshot.allocations[name]
    if held.pod.labels == labels:
        return
    snapshot.release(name)
    snapshot.bind(replace(held.pod, labels=labels), held.node, held.gpus, running=True)


def static_mask(snapshot: ClusterSnapshot, pod: PodSpec) -> BoolArray | None:
    """Nodes no removal of pods can make pass: those without a required topology key.

    Anti-affinity and spread skew can be fixed by evicting pods, and a required affinity term
    is left to :func:`fits_neighbours` after the removal (None: no such restriction).
    """
    if pod.terms is None:
        return None
    masks = [m for m in (affinity_keys(snapshot, pod), spread_keys(snapshot, pod)) if m is not None]
    if not masks:
        return None
    mask: BoolArray = np.logical_and.reduce(masks)
    return mask


def prefer(snapshot: ClusterSnapshot, pod: PodSpec, tied: IntArray) -> IntArray:
    """Of ``tied`` (nodes with the policy's best score), those kube's soft rules rank highest.

    InterPodAffinity's score (normalised over ``tied``) plus ScheduleAnyway spread's, plus
    preferred node affinity's and soft taints' (:mod:`gpupool.core.node_preference`), each on
    kube's 0..100 scale with kube-scheduler's default plugin weights; the policy's GPU score
    decided first, so fragmentation still rules and this only breaks ties.
    """
    if tied.size < 2:
        return tied
    node_scores = node_preference_score(snapshot, pod.constraints, tied)
    pod_rules = concerned(snapshot, pod) and (
        bool(snapshot.pods_with_terms) or (pod.terms is not None and bool(pod.terms.scores))
    )
    if not pod_rules:
        if node_scores is None:
            return tied
        preferred: IntArray = tied[node_scores == node_scores.max()]
        return preferred
    raw = affinity_score(snapshot, pod, tied).astype(np.float64)
    low, high = raw.min(), raw.max()
    total = np.floor(MAX_NODE_SCORE * (raw - low) / (high - low)) if high > low else raw * 0
    total += spread_score(snapshot, pod, tied)
    total *= POD_RULE_WEIGHT
    if node_scores is not None:
        total += node_scores
    best: IntArray = tied[total == total.max()]
    return best
