"""Topology domains: which nodes share a value of a label, as one integer id per node.

Inter-pod affinity and topology spread both ask "which pods run in this node's domain", where
a domain is the set of nodes with the same value of a label (``kubernetes.io/hostname``,
``topology.kubernetes.io/zone``). Turning a label into an id array once per node inventory makes
every such question a numpy gather instead of a walk over label dictionaries; the ids are cached
per inventory (a snapshot's copies share its ``nodes``), since preemption asks per node.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np

from gpupool.core.snapshot import BoolArray, ClusterSnapshot, IntArray

T = TypeVar("T")
MISSING = -1
"""The domain id of a node without the label: it is in no domain of that key."""
_CACHED_INVENTORIES = 8
_ENTRIES_PER_INVENTORY = 1024
"""Bounds on what is remembered: a stream of pods with unique constraints cannot grow it."""

_cache: dict[int, tuple[object, dict[Hashable, Any]]] = {}


def remembered(snapshot: ClusterSnapshot, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, once per node inventory and ``key`` (copies of a snapshot share both).

    Only for values that depend on the nodes alone (labels, taints), never on what runs.
    """
    nodes = snapshot.nodes
    entry = _cache.get(id(nodes))
    if entry is None or entry[0] is not nodes:  # the inventory is kept, so its id is not reused
        if len(_cache) >= _CACHED_INVENTORIES:
            _cache.pop(next(iter(_cache)))
        entry = (nodes, {})
        _cache[id(nodes)] = entry
    memo = entry[1]
    if key not in memo:
        if len(memo) >= _ENTRIES_PER_INVENTORY:
            memo.pop(next(iter(memo)))  # the oldest: dicts keep insertion order
        memo[key] = compute()
    found: T = memo[key]
    return found


def domains(snapshot: ClusterSnapshot, key: str) -> tuple[IntArray, int]:
    """Per node, the id of its value of label ``key`` (:data:`MISSING` without), and the count.

    The ids are ``0..count-1``, one per distinct value, so a per-domain table is an array of
    ``count`` entries indexed by a node's id.
    """

    def compute() -> tuple[IntArray, int]:
        ids: dict[str, int] = {}
        values = [dict(node.labels).get(key) for node in snapshot.nodes]
        row = [MISSING if v is None else ids.setdefault(v, len(ids)) for v in values]
        array = np.array(row, dtype=np.int64)
        array.setflags(write=False)
        return array, len(ids)

    return remembered(snapshot, ("domains", key), compute)


def in_domains(ids: IntArray, marked: BoolArray) -> BoolArray:
    """Per node: is its domain one of those ``marked`` (a per-domain bool array)? No if none."""
    if not len(marked):
        return np.zeros(len(ids), dtype=np.bool_)
    inside: BoolArray = (ids != MISSING) & marked[np.maximum(ids, 0)]
    return inside


def per_node(ids: IntArray, table: IntArray) -> IntArray:
    """Per node, its domain's entry of a per-domain ``table`` (0 for a node in no domain)."""
    padded = np.append(table, 0)  # MISSING (-1) reads the appended 0
    values: IntArray = padded[ids]
    return values


PodGroups = dict[tuple[str, tuple[tuple[str, str], ...]], list[int]]
"""Bound pods by (namespace, labels): the node row of each pod of the group."""


def pod_groups(snapshot: ClusterSnapshot, skip: str) -> PodGroups:
    """The snapshot's bound pods (but ``skip``) grouped by namespace and labels.

    Replicas share both, so a term is matched once per group instead of once per pod: the
    matching, not the walk, is what costs.
    """
    groups: PodGroups = {}
    for name, allocation in snapshot.allocations.items():
        if name != skip:
            other = allocation.pod
            groups.setdefault((other.namespace, other.labels), []).append(allocation.node)
    return groups


def domains_of(ids: IntArray, rows: list[int]) -> IntArray:
    """The domains (ids, repeated per row, none MISSING) the nodes ``rows`` are in."""
    found: IntArray = ids[np.asarray(rows, dtype=np.int64)]
    inside: IntArray = found[found != MISSING]
    return inside


@lru_cache(maxsize=4096)
def label_map(labels: tuple[tuple[str, str], ...]) -> Mapping[str, str]:
    """A pod's label pairs as a mapping (cached: the same pods are matched again and again)."""
    return dict(labels)
