"""A pod's inter-pod affinity, anti-affinity and topology spread as core values.

``spec.affinity.podAffinity``, ``spec.affinity.podAntiAffinity`` and
``spec.topologySpreadConstraints`` become :class:`~gpupool.core.pod_terms.PodTerms`, with
kube's defaults made explicit: a term with neither ``namespaces`` nor ``namespaceSelector`` is
about the pod's own namespace; ``minDomains`` defaults to 1, ``nodeAffinityPolicy`` to Honor and
``nodeTaintsPolicy`` to Ignore. ``matchLabelKeys`` (and ``mismatchLabelKeys``) are merged into
the selector as the API server does at creation (``key In (value)``, ``key NotIn (value)`` for
the keys the pod carries; merging again what the API server merged changes nothing).

Refused, so that a pod is never placed by a rule gpupool does not keep:

* a ``namespaceSelector`` that selects by labels: the scheduler reads no namespaces, so it could
  not tell which namespaces match (``namespaceSelector: {}``, every namespace, is kept);
* anything the API server would refuse (no topology key, a bad operator, a weight out of range),
  named by its path.

kube-scheduler's cluster-default spread (soft constraints for pods of Services, ReplicaSets and
StatefulSets) is not applied: it only scores, and gpupool's GPU score ranks nodes first.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.core.constraints import Requirement
from gpupool.core.model import InvalidSpecError
from gpupool.core.pod_terms import (
    HONOR,
    IGNORE,
    AffinityTerm,
    LabelSelector,
    PodTerms,
    SpreadConstraint,
)
from gpupool.kube.objects.constraint_records import (
    PodAffinityRecord,
    PodAffinityTermRecord,
    TopologySpreadConstraintRecord,
)
from gpupool.kube.objects.label_selector import label_selector
from gpupool.kube.objects.object_error import InvalidObjectError, at
from gpupool.kube.objects.records import PodRecord

POD_AFFINITY_PATH = "spec.affinity.podAffinity"
POD_ANTI_AFFINITY_PATH = "spec.affinity.podAntiAffinity"
SPREAD_PATH = "spec.topologySpreadConstraints"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def pod_terms(pod: PodRecord) -> PodTerms | None:
    """The pod's inter-pod terms and spread constraints (None: it names none).

    Raises:
        InvalidObjectError: A field gpupool refuses, named by its path.
    """
    spec = pod.spec
    affinity, anti = spec.affinity.pod_affinity, spec.affinity.pod_anti_affinity
    if affinity is None and anti is None and not spec.topology_spread_constraints:
        return None
    required, preferred = _terms(pod, affinity, POD_AFFINITY_PATH)
    anti_required, anti_preferred = _terms(pod, anti, POD_ANTI_AFFINITY_PATH)
    spread = tuple(
        _spread(pod, f"{SPREAD_PATH}[{i}]", item)
        for i, item in enumerate(spec.topology_spread_constraints)
    )
    try:
        return PodTerms(required, anti_required, preferred, anti_preferred, spread)
    except InvalidSpecError as error:
        raise InvalidObjectError(f"pod {pod.key}", "spec.affinity", str(error)) from None


def _terms(
    pod: PodRecord, record: PodAffinityRecord | None, path: str
) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...]]:
    if record is None:
        return (), ()
    required = tuple(
        _term(pod, f"{path}.{REQUIRED}[{i}]", term, 0)
        for i, term in enumerate(record.required_during_scheduling_ignored_during_execution)
    )
    preferred = []
    for i, weighted in enumerate(record.preferred_during_scheduling_ignored_during_execution):
        where = f"{path}.{PREFERRED}[{i}]"
        if not 1 <= weighted.weight <= 100:
            raise InvalidObjectError(
                f"pod {pod.key}", f"{where}.weight", f"must be 1..100, got {weighted.weight}"
            )
        term = _term(pod, f"{where}.podAffinityTerm", weighted.pod_affinity_term, weighted.weight)
        preferred.append(term)
    return required, tuple(preferred)


def _term(pod: PodRecord, path: str, record: PodAffinityTermRecord, weight: int) -> AffinityTerm:
    owner, labels = f"pod {pod.key}", pod.metadata.labels
    selector = label_selector(owner, f"{path}.labelSelector", record.label_selector)
    if selector is not None:
        selector = _merged(selector, labels, record.match_label_keys, "In")
        selector = _merged(selector, labels, record.mismatch_label_keys, "NotIn")
    namespaces: frozenset[str] | None
    chosen = record.namespace_selector
    if chosen is not None and (chosen.match_labels or chosen.match_expressions):
        raise InvalidObjectError(
            owner,
            f"{path}.namespaceSelector",
            "not supported yet: gpupool reads no namespace labels (use namespaces, or {} for all)",
        )
    if chosen is not None:
        namespaces = None  # {}: every namespace
    else:
        namespaces = frozenset(record.namespaces or (pod.metadata.namespace,))
    try:
        return AffinityTerm(record.topology_key, selector, namespaces, weight)
    except InvalidSpecError as error:
        raise at(owner, path, error) from None


def _merged(
    selector: LabelSelector, labels: Mapping[str, str], keys: tuple[str, ...], operator: str
) -> LabelSelector:
    """``selector`` with ``key operator (value)`` for each of ``keys`` the pod carries."""
    extra = tuple(Requirement(key, operator, (labels[key],)) for key in keys if key in labels)
    if not extra:
        return selector
    return LabelSelector(selector.match_labels, (*selector.match_expressions, *extra))


def _spread(pod: PodRecord, path: str, record: TopologySpreadConstraintRecord) -> SpreadConstraint:
    owner = f"pod {pod.key}"
    selector = label_selector(owner, f"{path}.labelSelector", record.label_selector)
    if selector is not None:
        selector = _merged(selector, pod.metadata.labels, record.match_label_keys, "In")
    try:
        return SpreadConstraint(
            max_skew=record.max_skew,
            topology_key=record.topology_key,
            when_unsatisfiable=record.when_unsatisfiable,
            selector=selector,
            min_domains=1 if record.min_domains is None else record.min_domains,
            node_affinity_policy=record.node_affinity_policy or HONOR,
            node_taints_policy=record.node_taints_policy or IGNORE,
        )
    except InvalidSpecError as error:
        raise at(owner, path, error) from None
