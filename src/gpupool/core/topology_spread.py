"""PodTopologySpread: ``DoNotSchedule`` constraints as node masks, ``ScheduleAnyway`` as a score.

kube-scheduler's semantics, per constraint:

* a node without the constraint's key fails (reported apart, "(missing required label)");
* the *eligible* nodes are those with every hard constraint's key that the pod's node selector
  and required affinity allow (``nodeAffinityPolicy: Honor``, the default) and whose taints it
  tolerates when ``nodeTaintsPolicy: Honor``; their values are the domains, and only pods on them
  count: pods of the pod's namespace that the selector matches (a missing or empty selector
  counts none);
* a node passes when its domain's count, plus one if the pod matches the selector itself,
  minus the smallest count over the domains is at most ``maxSkew``; with fewer domains than
  ``minDomains`` the smallest count is taken as 0, so pods wait for new domains rather than pile
  on the ones there are.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from gpupool.core.constraints import NO_CONSTRAINTS
from gpupool.core.model import PodSpec
from gpupool.core.pod_terms import HONOR, SpreadConstraint, selects
from gpupool.core.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.core.topology import (
    MISSING,
    domains,
    label_map,
    per_node,
    pod_groups,
    remembered,
)

REASON_SPREAD = "node(s) didn't match pod topology spread constraints"
REASON_SPREAD_LABEL = f"{REASON_SPREAD} (missing required label)"
MAX_NODE_SCORE = 100.0

FloatArray = npt.NDArray[np.float64]


def _keys_mask(snapshot: ClusterSnapshot, constraints: list[SpreadConstraint]) -> BoolArray:
    mask = np.ones(snapshot.size, dtype=np.bool_)
    for constraint in constraints:
        mask &= domains(snapshot, constraint.topology_key)[0] != MISSING
    return mask


def _included(
    snapshot: ClusterSnapshot, pod: PodSpec, constraint: SpreadConstraint
) -> BoolArray | None:
    """The nodes the constraint's inclusion policies keep (None: all of them).

    Remembered per node inventory, as :func:`~gpupool.core.filtering.node_checks` are.
    """
    rules = pod.constraints or NO_CONSTRAINTS
    honour_affinity = constraint.node_affinity_policy == HONOR and pod.constraints is not None
    honour_taints = constraint.node_taints_policy == HONOR
    if not honour_affinity and not honour_taints:
        return None

    def compute() -> BoolArray:
        mask = np.array(
            [
                (not honour_affinity or rules.selects(dict(node.labels), node.name))
                and (not honour_taints or rules.tolerates(node.taints))
                for node in snapshot.nodes
            ],
            dtype=np.bool_,
        )
        mask.setflags(write=False)
        return mask

    key = ("included", pod.constraints, honour_affinity, honour_taints)
    return remembered(snapshot, key, compute)


def _counts(
    snapshot: ClusterSnapshot, pod: PodSpec, constraint: SpreadConstraint, eligible: BoolArray
) -> tuple[IntArray, BoolArray]:
    """Matching pods per domain over the eligible nodes, and which domains exist."""
    ids, count = domains(snapshot, constraint.topology_key)
    present = np.zeros(count, dtype=np.bool_)
    present[ids[eligible & (ids != MISSING)]] = True
    counts = np.zeros(count, dtype=np.int64)
    selector = constraint.selector
    if selector is None or selector.empty:
        return counts, present
    for (namespace, labels), rows in pod_groups(snapshot, pod.name).items():
        if namespace == pod.namespace and selector.matches(label_map(labels)):
            where = np.asarray(rows, dtype=np.int64)
            counted = where[eligible[where] & (ids[where] != MISSING)]  # a node in no domain
            np.add.at(counts, ids[counted], 1)
    return counts, present


def spread_checks(snapshot: ClusterSnapshot, pod: PodSpec) -> tuple[tuple[str, BoolArray], ...]:
    """The failing PodTopologySpread checks for ``pod`` (none when every node passes)."""
    hard = [c for c in pod.terms.spread if c.hard] if pod.terms else []
    if not hard:
        return ()
    has_keys = _keys_mask(snapshot, hard)
    labels = label_map(pod.labels)
    # kube stops at a node's first failing constraint: its key missing, or then its skew
    no_label = np.zeros(snapshot.size, dtype=np.bool_)
    too_skewed = np.zeros(snapshot.size, dtype=np.bool_)
    for constraint in hard:
        included = _included(snapshot, pod, constraint)
        eligible = has_keys if included is None else has_keys & included
        counts, present = _counts(snapshot, pod, constraint, eligible)
        n_domains = int(present.sum())
        minimum = 0 if n_domains < constraint.min_domains else int(counts[present].min())
        ids, _ = domains(snapshot, constraint.topology_key)
        own = int(selects(constraint.selector, labels))
        undecided = ~(no_label | too_skewed)
        no_label |= undecided & (ids == MISSING)
        skew = per_node(ids, counts) + own - minimum
        too_skewed |= undecided & (ids != MISSING) & (skew > constraint.max_skew)
    checks = []
    if no_label.any():
        checks.append((REASON_SPREAD_LABEL, ~no_label))
    if too_skewed.any():
        checks.append((REASON_SPREAD, ~too_skewed))
    return tuple(checks)


def required_keys_mask(snapshot: ClusterSnapshot, pod: PodSpec) -> BoolArray | None:
    """Nodes with every hard constraint's key (no removal gives a node one)."""
    hard = [c for c in pod.terms.spread if c.hard] if pod.terms else []
    return _keys_mask(snapshot, hard) if hard else None


def spread_score(snapshot: ClusterSnapshot, pod: PodSpec, rows: IntArray) -> FloatArray:
    """kube-scheduler's normalised ScheduleAnyway score (0..100, higher: fewer matching pods).

    Domains and counts are taken over ``rows`` (the nodes the score chooses among). A node
    without a soft constraint's key scores 0; under the cluster's default constraints
    (:attr:`PodTerms.system_default`) it is scored on the keys it has instead, and its missing
    value counts as one more domain in the constraint's weight, as kube-scheduler does.
    """
    soft = [c for c in pod.terms.spread if not c.hard] if pod.terms else []
    if not soft:
        return np.zeros(len(rows), dtype=np.float64)
    defaulted = pod.terms is not None and pod.terms.system_default
    has_keys = _keys_mask(snapshot, [] if defaulted else soft)
    raw = np.zeros(len(rows), dtype=np.float64)
    for constraint in soft:
        included = _included(snapshot, pod, constraint)
        eligible = has_keys if included is None else has_keys & included
        counts, _ = _counts(snapshot, pod, constraint, eligible)
        ids, _ = domains(snapshot, constraint.topology_key)
        weight = math.log(len(set(ids[rows[has_keys[rows]]].tolist())) + 2)
        score = per_node(ids[rows], counts) * weight + (constraint.max_skew - 1)
        raw += np.where(ids[rows] != MISSING, score, 0.0)
    raw = np.round(raw)
    valid = has_keys[rows]
    if not valid.any():
        return np.zeros(len(rows), dtype=np.float64)
    low, high = raw[valid].min(), raw[valid].max()
    if high == 0:
        return np.where(valid, MAX_NODE_SCORE, 0.0)
    return np.where(valid, np.floor(MAX_NODE_SCORE * (high + low - raw) / high), 0.0)
