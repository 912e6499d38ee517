"""What a pod asks of the pods around it: inter-pod (anti-)affinity and topology spread.

Node constraints (:mod:`gpupool.core.constraints`) ask something of a node alone; these ask
something of the *pods* in a node's topology domain (the nodes sharing its value of a label such
as ``kubernetes.io/hostname`` or ``topology.kubernetes.io/zone``), so whether a node passes
depends on what runs where. The values here are only the request; the checks and scores over a
snapshot are :mod:`gpupool.core.pod_affinity` and :mod:`gpupool.core.topology_spread`.

The semantics are kube-scheduler 1.37's (InterPodAffinity, PodTopologySpread):

* a label selector holds when all its ``matchLabels`` and expressions do; an empty selector
  (``{}``) matches every pod, a missing one (``None`` here) matches none;
* an affinity term matches a pod in one of its namespaces (``None``: every namespace, what
  ``namespaceSelector: {}`` says) whose labels its selector matches; ``matchLabelKeys`` and
  ``mismatchLabelKeys`` are merged into the selector before the term gets here, as the API
  server does;
* a spread constraint counts the pods of the incoming pod's namespace that its selector matches.

The whole set is one optional value on :class:`~gpupool.core.model.PodSpec` (``None`` for the
common pod, so equal requests stay cheap to compare and the filter's fast path is one test).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.core.constraints import Requirement
from gpupool.core.model import InvalidSpecError

LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
"""The operators of a pod label selector (``Gt``/``Lt`` are node-affinity only)."""
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
Labels = tuple[tuple[str, str], ...]
"""A pod's labels as sorted ``(key, value)`` pairs (hashable, so a PodSpec stays a value)."""


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A pod label selector: every pair and every expression must hold.

    Attributes:
        match_labels: Sorted ``(key, value)`` pairs the pod must carry.
        match_expressions: Requirements with operators :data:`LABEL_SELECTOR_OPERATORS`.
    """

    match_labels: Labels = ()
    match_expressions: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        if list(self.match_labels) != sorted(dict(self.match_labels).items()):
            raise InvalidSpecError(
                "label selector", "matchLabels", "must be sorted pairs with distinct keys"
            )
        for requirement in self.match_expressions:
            if requirement.operator not in LABEL_SELECTOR_OPERATORS:
                raise InvalidSpecError(
                    "label selector",
                    "matchExpressions",
                    f"operator must be one of {', '.join(LABEL_SELECTOR_OPERATORS)}",
                )

    @property
    def empty(self) -> bool:
        """Whether it requires nothing (it then matches every pod)."""
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with ``labels`` is selected (plain loops: it runs per pod and term)."""
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for requirement in self.match_expressions:
            if not requirement.holds(labels.get(requirement.key)):
                return False
        return True


def selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Whether ``selector`` matches ``labels``; a missing selector matches nothing."""
    return selector is not None and selector.matches(labels)


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One pod (anti-)affinity term: pods its selector matches, in a topology domain.

    Attributes:
        topology_key: The node label whose value makes a domain; must not be empty.
        selector: The pods the term is about (``None``: none).
        namespaces: The namespaces those pods may be in (``None``: every namespace). The
            translation resolves the default (the pod's own namespace).
        weight: For a preferred term, 1..100; 0 for a required one.
    """

    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str] | None
    weight: int = 0

    def __post_init__(self) -> None:
        if not self.topology_key:
            raise InvalidSpecError("pod affinity term", "topologyKey", "must not be empty")
        if not 0 <= self.weight <= 100:
            raise InvalidSpecError("pod affinity term", "weight", "must be 1..100")

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` is one the term is about."""
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.selector is not None and self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One topology spread constraint.

    Attributes:
        max_skew: Most the matching pods of a domain may exceed the emptiest domain; >= 1.
        topology_key: The node label whose value makes a domain.
        when_unsatisfiable: ``DoNotSchedule`` (a filter) or ``ScheduleAnyway`` (a score).
        selector: The pods counted (``None`` or empty: none are counted, as in kube).
        min_domains: Fewer eligible domains than this count as a global minimum of 0.
        node_affinity_policy: ``Honor``: only nodes the pod's node selector and affinity
            allow make domains; ``Ignore``: every node.
        node_taints_policy: ``Honor``: only nodes whose taints the pod tolerates make
            domains; ``Ignore`` (the default): every node.
    """

    max_skew: int
    topology_key: str
    when_unsatisfiable: str = DO_NOT_SCHEDULE
    selector: LabelSelector | None = None
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    def __post_init__(self) -> None:
        owner = "topology spread constraint"
        if self.max_skew < 1:
            raise InvalidSpecError(owner, "maxSkew", f"must be >= 1, got {self.max_skew}")
        if not self.topology_key:
            raise InvalidSpecError(owner, "topologyKey", "must not be empty")
        if self.when_unsatisfiable not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            raise InvalidSpecError(
                owner, "whenUnsatisfiable", f"must be {DO_NOT_SCHEDULE} or {SCHEDULE_ANYWAY}"
            )
        if self.min_domains < 1:
            raise InvalidSpecError(owner, "minDomains", f"must be >= 1, got {self.min_domains}")
        if self.min_domains > 1 and self.when_unsatisfiable != DO_NOT_SCHEDULE:
            raise InvalidSpecError(
                owner, "minDomains", f"may only be set with whenUnsatisfiable {DO_NOT_SCHEDULE}"
            )
        for name in ("node_affinity_policy", "node_taints_policy"):
            if getattr(self, name) not in (HONOR, IGNORE):
                camel = (
                    "nodeAffinityPolicy" if name == "node_affinity_policy" else "nodeTaintsPolicy"
                )
                raise InvalidSpecError(owner, camel, f"must be {HONOR} or {IGNORE}")

    @property
    def hard(self) -> bool:
        """Whether it filters (``DoNotSchedule``) rather than scores."""
        return self.when_unsatisfiable == DO_NOT_SCHEDULE


@dataclass(frozen=True, slots=True)
class PodTerms:
    """Everything a pod asks of other pods' placement.

    Attributes:
        affinity: Required affinity terms (all must hold).
        anti_affinity: Required anti-affinity terms (none may be violated); they also keep
            later pods they match out of this pod's domains (the symmetric rule).
        preferred_affinity: Weighted terms that raise a node's score.
        preferred_anti_affinity: Weighted terms that lower it.
        spread: Topology spread constraints.
        system_default: ``spread`` is the cluster's default, not the pod's own (it has none):
            kube-scheduler then scores a node that lacks a key on the keys it has, rather than
            leaving it out of the score (zoneless nodes still spread by hostname).
    """

    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    system_default: bool = False

    def __post_init__(self) -> None:
        for name in ("preferred_affinity", "preferred_anti_affinity"):
            if any(term.weight < 1 for term in getattr(self, name)):
                raise InvalidSpecError("pod terms", name, "a preferred term needs weight 1..100")

    @property
    def empty(self) -> bool:
        """Whether it asks nothing (stored as ``None`` on the pod)."""
        return not (
            self.affinity
            or self.anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
            or self.spread
        )

    @property
    def bears_on_others(self) -> bool:
        """Whether, once the pod is bound, its terms bear on where other pods go.

        Its affinity and anti-affinity do (kube's symmetric anti-affinity, and existing pods'
        terms in the InterPodAffinity score); its spread constraints never do: a spread counts
        the pods the *incoming* pod's own selector matches. A Deployment's replica under the
        cluster's default spread so adds nothing to every later pod's placement.
        """
        return bool(
            self.affinity
            or self.anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )

    @property
    def scores(self) -> bool:
        """Whether any part of it scores nodes (preferred terms, ScheduleAnyway spread)."""
        return bool(
            self.preferred_affinity
            or self.preferred_anti_affinity
            or any(not c.hard for c in self.spread)
        )
