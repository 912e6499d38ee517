"""The records of what a pod asks of its node and of other pods: tolerations, affinity, spread.

Decoded from pods (and label selectors from the other objects that carry one) by msgspec; the
fields the scheduler reads, in the API's names. Kept apart from the pod and node records of
:mod:`gpupool.kube.objects.records`, which hold them.
"""

from __future__ import annotations

import msgspec


class Toleration(msgspec.Struct, frozen=True):
    """A pod toleration."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class NodeSelectorRequirement(msgspec.Struct, frozen=True):
    """One expression of a node selector term (``key``, ``operator``, ``values``)."""

    key: str = ""
    operator: str = ""
    values: tuple[str, ...] = ()


class NodeSelectorTerm(msgspec.Struct, frozen=True, rename="camel"):
    """Expressions on labels and on fields; all must hold."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class NodeSelector(msgspec.Struct, frozen=True, rename="camel"):
    """Terms of which at least one must hold."""

    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()


class PreferredSchedulingTerm(msgspec.Struct, frozen=True):
    """A weighted node-affinity term that ranks nodes and filters none."""

    weight: int = 0
    preference: NodeSelectorTerm = NodeSelectorTerm()


class NodeAffinity(msgspec.Struct, frozen=True, rename="camel"):
    """A pod's node affinity: required terms filter nodes, preferred ones rank them."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: tuple[PreferredSchedulingTerm, ...] = ()


class LabelSelectorRecord(msgspec.Struct, frozen=True, rename="camel"):
    """A label selector (``matchExpressions`` have the node selector's fields)."""

    match_labels: dict[str, str] = {}
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()


class PodAffinityTermRecord(msgspec.Struct, frozen=True, rename="camel"):
    """One pod (anti-)affinity term."""

    topology_key: str = ""
    label_selector: LabelSelectorRecord | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelectorRecord | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()


class WeightedPodAffinityTermRecord(msgspec.Struct, frozen=True, rename="camel"):
    """A preferred pod (anti-)affinity term and its weight."""

    weight: int = 0
    pod_affinity_term: PodAffinityTermRecord = PodAffinityTermRecord()


class PodAffinityRecord(msgspec.Struct, frozen=True, rename="camel"):
    """``podAffinity`` or ``podAntiAffinity``: required and preferred terms."""

    required_during_scheduling_ignored_during_execution: tuple[PodAffinityTermRecord, ...] = ()
    preferred_during_scheduling_ignored_during_execution: tuple[
        WeightedPodAffinityTermRecord, ...
    ] = ()


class Affinity(msgspec.Struct, frozen=True, rename="camel"):
    """The pod affinity fields the scheduler reads."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinityRecord | None = None
    pod_anti_affinity: PodAffinityRecord | None = None


class TopologySpreadConstraintRecord(msgspec.Struct, frozen=True, rename="camel"):
    """One ``spec.topologySpreadConstraints[]`` entry."""

    max_skew: int = 0
    topology_key: str = ""
    when_unsatisfiable: str = ""
    label_selector: LabelSelectorRecord | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: tuple[str, ...] = ()
