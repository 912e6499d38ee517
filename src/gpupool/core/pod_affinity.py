"""InterPodAffinity: the required terms as node masks, the preferred ones as a score.

Three checks, kube-scheduler's, each reported once per node in kube's order (a node that fails
the first is not counted again under the next, so the pending reason reads as kube's):

* **affinity**: every required affinity term needs, in the node's domain of its key, a pod
  that matches *all* the pod's affinity terms; a node without a term's key fails. The first pod
  of a group that is affine to itself may go anywhere that has the keys: when no pod anywhere
  matches and the pod matches its own terms (else a group of replicas could never start);
* **anti-affinity**: no required anti-affinity term may match a pod in the node's domain;
* **existing pods' anti-affinity** (the symmetric rule): no running pod's required
  anti-affinity term may match the newcomer when the node is in that pod's domain. Without it
  a pod without terms could land next to a pod that forbade it.

What runs where is read from the snapshot each time (preemption's what-ifs release pods on it),
so a removal is seen at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from gpupool.core.model import PodSpec
from gpupool.core.pod_terms import AffinityTerm, Labels, PodTerms
from gpupool.core.snapshot import Allocation, BoolArray, ClusterSnapshot, IntArray
from gpupool.core.topology import (
    MISSING,
    domains,
    domains_of,
    in_domains,
    label_map,
    per_node,
    pod_groups,
)

REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
HARD_AFFINITY_WEIGHT = 1
"""What a running pod's required affinity term matching the newcomer adds to its domain's score
(kube-scheduler's ``hardPodAffinityWeight`` default)."""


def affinity_checks(snapshot: ClusterSnapshot, pod: PodSpec) -> tuple[tuple[str, BoolArray], ...]:
    """The failing InterPodAffinity checks for ``pod`` (none when every node passes)."""
    terms = pod.terms
    masks: list[tuple[str, BoolArray | None]] = [
        (REASON_AFFINITY, _affinity(snapshot, pod, terms.affinity) if terms else None),
        (
            REASON_ANTI_AFFINITY,
            _anti_affinity(snapshot, pod, terms.anti_affinity) if terms else None,
        ),
        (REASON_EXISTING_ANTI_AFFINITY, _existing_anti_affinity(snapshot, pod)),
    ]
    checks = []
    remaining = np.ones(snapshot.size, dtype=np.bool_)
    for reason, ok in masks:
        if ok is None:
            continue
        passed = ok | ~remaining  # rejected already, under an earlier reason
        if not passed.all():
            checks.append((reason, passed))
        remaining &= ok
    return tuple(checks)


def _matches_all(terms: tuple[AffinityTerm, ...], namespace: str, labels: Labels) -> bool:
    mapping = label_map(labels)
    return all(term.matches(namespace, mapping) for term in terms)


def _affinity(
    snapshot: ClusterSnapshot, pod: PodSpec, terms: tuple[AffinityTerm, ...]
) -> BoolArray | None:
    if not terms:
        return None
    keyed = [domains(snapshot, term.topology_key)[0] for term in terms]
    present = [np.zeros(domains(snapshot, t.topology_key)[1], dtype=np.bool_) for t in terms]
    counted = False
    for (namespace, labels), rows in pod_groups(snapshot, pod.name).items():
        if not _matches_all(terms, namespace, labels):
            continue
        for ids, marked in zip(keyed, present, strict=True):
            found = domains_of(ids, rows)
            if found.size:
                marked[found] = True
                counted = True
    has_keys = np.ones(snapshot.size, dtype=np.bool_)
    for ids in keyed:
        has_keys &= ids != MISSING
    if not counted and _matches_all(terms, pod.namespace, pod.labels):
        return has_keys  # the first of a group affine to itself
    ok = has_keys
    for ids, marked in zip(keyed, present, strict=True):
        ok &= in_domains(ids, marked)
    return ok


def _anti_affinity(
    snapshot: ClusterSnapshot, pod: PodSpec, terms: tuple[AffinityTerm, ...]
) -> BoolArray | None:
    if not terms:
        return None
    ok = np.ones(snapshot.size, dtype=np.bool_)
    groups = pod_groups(snapshot, pod.name)
    for term in terms:
        ids, count = domains(snapshot, term.topology_key)
        marked = np.zeros(count, dtype=np.bool_)
        for (namespace, labels), rows in groups.items():
            if term.matches(namespace, label_map(labels)):
                marked[domains_of(ids, rows)] = True
        ok &= ~in_domains(ids, marked)
    return ok


def _neighbours_with_terms(
    snapshot: ClusterSnapshot, pod: PodSpec
) -> Iterator[tuple[Allocation, PodTerms]]:
    """The bound pods (not ``pod`` itself) that carry pod terms, with their terms."""
    for name in snapshot.pods_with_terms:
        allocation = snapshot.allocations[name]
        terms = allocation.pod.terms
        if terms is not None and name != pod.name:
            yield allocation, terms


def _existing_anti_affinity(snapshot: ClusterSnapshot, pod: PodSpec) -> BoolArray | None:
    """Nodes in no domain of a running pod whose required anti-affinity matches ``pod``."""
    labels = label_map(pod.labels)
    banned: dict[str, set[int]] = {}
    for allocation, terms in _neighbours_with_terms(snapshot, pod):
        for term in terms.anti_affinity:
            if term.matches(pod.namespace, labels):
                domain = int(domains(snapshot, term.topology_key)[0][allocation.node])
                if domain != MISSING:
                    banned.setdefault(term.topology_key, set()).add(domain)
    if not banned:
        return None
    ok = np.ones(snapshot.size, dtype=np.bool_)
    for key, ids in banned.items():
        ok &= ~np.isin(domains(snapshot, key)[0], list(ids))
    return ok


def required_keys_mask(snapshot: ClusterSnapshot, pod: PodSpec) -> BoolArray | None:
    """Nodes with every key of the pod's required affinity terms (no removal gives one)."""
    if pod.terms is None or not pod.terms.affinity:
        return None
    mask = np.ones(snapshot.size, dtype=np.bool_)
    for term in pod.terms.affinity:
        mask &= domains(snapshot, term.topology_key)[0] != MISSING
    return mask


def affinity_score(snapshot: ClusterSnapshot, pod: PodSpec, rows: IntArray) -> IntArray:
    """kube-scheduler's raw InterPodAffinity score of each node of ``rows``.

    The newcomer's preferred terms add (affinity) or take (anti-affinity) their weight for each
    matching pod in a node's domain; running pods' preferred terms that match the newcomer do
    the same in their domains, and their required affinity terms add
    :data:`HARD_AFFINITY_WEIGHT`.
    """
    own = pod.terms
    own_terms = [
        (term, sign)
        for terms, sign in (
            (own.preferred_affinity if own else (), 1),
            (own.preferred_anti_affinity if own else (), -1),
        )
        for term in terms
    ]
    labels = label_map(pod.labels)
    totals: dict[str, IntArray] = {}  # per topology key, the weight each domain gathered

    def add(term: AffinityTerm, where: list[int], weight: int) -> None:
        ids, count = domains(snapshot, term.topology_key)
        table = totals.setdefault(term.topology_key, np.zeros(count, dtype=np.int64))
        np.add.at(table, domains_of(ids, where), weight)

    if own_terms:
        for (namespace, other_labels), where in pod_groups(snapshot, pod.name).items():
            mapping = label_map(other_labels)
            for term, sign in own_terms:
                if term.matches(namespace, mapping):
                    add(term, where, sign * term.weight)
    for allocation, theirs in _neighbours_with_terms(snapshot, pod):
        for term in theirs.affinity:
            if term.matches(pod.namespace, labels):
                add(term, [allocation.node], HARD_AFFINITY_WEIGHT)
        for terms, sign in ((theirs.preferred_affinity, 1), (theirs.preferred_anti_affinity, -1)):
            for term in terms:
                if term.matches(pod.namespace, labels):
                    add(term, [allocation.node], sign * term.weight)
    score = np.zeros(len(rows), dtype=np.int64)
    for key, table in totals.items():
        score += per_node(domains(snapshot, key)[0][rows], table)
    return score
