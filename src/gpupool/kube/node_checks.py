"""Per-node masks for what the resource model does not hold: readiness, cordons, taints, selectors.

The core's filter (:func:`gpupool.core.filtering.filter_nodes`) takes these as extra checks and
counts them in the pending reason like any other, with kube-scheduler's wording. Masks are
cached per distinct toleration list and per distinct selector, because thousands of pending pods
usually share a handful of each; the caches are emptied whenever the node set changes and are
bounded, so a stream of pods with unique selectors cannot grow them without limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from gpupool.core.filtering import NodeCheck
from gpupool.core.snapshot import BoolArray
from gpupool.kube.affinity import node_matches
from gpupool.kube.records import NodeRecord, NodeSelector, PodRecord, Toleration

REASON_NOT_READY = "node(s) were not ready"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_TAINTS = "node(s) had untolerated taint(s)"
REASON_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
MAX_CACHED_MASKS = 1024
"""Distinct selectors (and toleration lists) whose masks are kept between node changes."""

SelectorKey = tuple[frozenset[tuple[str, str]], NodeSelector | None]
K = TypeVar("K")


def tolerates(tolerations: Sequence[Toleration], key: str, value: str, effect: str) -> bool:
    """Whether one of ``tolerations`` tolerates the taint ``key=value:effect``."""
    for toleration in tolerations:
        if toleration.effect and toleration.effect != effect:
            continue
        if toleration.operator == "Exists":
            if not toleration.key or toleration.key == key:
                return True
        elif toleration.key == key and toleration.value == value:
            return True
    return False


@dataclass
class NodeChecks:
    """The masks for one node list (in snapshot row order)."""

    nodes: tuple[NodeRecord, ...] = ()
    _fixed: tuple[NodeCheck, ...] = ()
    _selectors: dict[SelectorKey, BoolArray] = field(default_factory=dict)
    _tolerations: dict[tuple[Toleration, ...], BoolArray] = field(default_factory=dict)

    @classmethod
    def for_nodes(cls, nodes: Sequence[NodeRecord]) -> NodeChecks:
        """Masks for ``nodes``, in the order of the snapshot's rows."""
        fixed = (
            (REASON_NOT_READY, np.array([n.ready for n in nodes], dtype=np.bool_)),
            (REASON_UNSCHEDULABLE, np.array([not n.spec.unschedulable for n in nodes])),
        )
        return cls(nodes=tuple(nodes), _fixed=fixed)

    def for_pod(self, pod: PodRecord) -> tuple[NodeCheck, ...]:
        """Readiness, cordons, taints (NoSchedule and NoExecute) and the node selector."""
        checks = list(self._fixed)
        taints = self._toleration_mask(tuple(pod.spec.tolerations))
        if taints is not None:
            checks.append((REASON_TAINTS, taints))
        selector = self._selector_mask(pod)
        if selector is not None:
            checks.append((REASON_SELECTOR, selector))
        return tuple(checks)

    def _toleration_mask(self, tolerations: tuple[Toleration, ...]) -> BoolArray | None:
        mask = self._tolerations.get(tolerations)
        if mask is None:
            mask = np.array(
                [
                    all(
                        tolerates(tolerations, t.key, t.value, t.effect)
                        for t in node.spec.taints
                        if t.effect in _BLOCKING_EFFECTS
                    )
                    for node in self.nodes
                ],
                dtype=np.bool_,
            )
            _remember(self._tolerations, tolerations, mask)
        return None if mask.all() else mask

    def _selector_mask(self, pod: PodRecord) -> BoolArray | None:
        """Nodes matching the pod's node selector and required node affinity (None: all)."""
        selector = pod.spec.node_selector
        affinity = pod.spec.affinity.node_affinity
        required = (
            affinity.required_during_scheduling_ignored_during_execution if affinity else None
        )
        if not selector and required is None:
            return None
        key = (frozenset(selector.items()), required)
        mask = self._selectors.get(key)
        if mask is None:
            mask = np.array(
                [
                    all(node.metadata.labels.get(k) == v for k, v in selector.items())
                    and (
                        required is None
                        or node_matches(required, node.metadata.labels, node.metadata.name)
                    )
                    for node in self.nodes
                ],
                dtype=np.bool_,
            )
            _remember(self._selectors, key, mask)
        return mask


def _remember(cache: dict[K, BoolArray], key: K, mask: BoolArray) -> None:
    if len(cache) >= MAX_CACHED_MASKS:
        cache.pop(next(iter(cache)))  # the oldest entry: dicts keep insertion order
    cache[key] = mask
