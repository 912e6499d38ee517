"""What a pod requires of a node besides room: labels, affinity terms, tolerated taints.

A pod may name labels its node must carry (a node selector), required node-affinity terms, and
the node taints it tolerates; a node carries labels and taints, and may be not ready or cordoned
(:class:`~gpupool.core.model.NodeSpec`). These are values of the resource model, carried by the
request (:attr:`~gpupool.core.model.PodSpec.constraints`), so every part of the core that asks
"may this pod use this node" (the filter, preemption's victim search, backfill's reservation,
``explain``, the simulator) answers from the same data with the same functions
(:func:`gpupool.core.filtering.node_checks`). When the checks lived beside the live scheduler's
cache and were added to placements by pod name, the victim search could not see them: it chose
nodes the pod could not use, the preemption was refused afterwards, and the pod waited instead of
preempting where it could run.

The semantics are kube-scheduler's (NodeAffinity, TaintToleration):

* a node selector holds when every ``key=value`` is one of the node's labels;
* required affinity holds when any of its terms does; a term holds when all of its expressions
  and fields do, and a term with neither matches no node; ``matchFields`` reads only
  ``metadata.name``; ``Gt``/``Lt`` compare integers (a label that is not one fails);
* a taint with effect ``NoSchedule`` or ``NoExecute`` keeps every pod that does not tolerate it
  off the node; ``PreferNoSchedule`` keeps nobody off;
* a toleration tolerates a taint when its effect is empty or the same, and either its operator
  is ``Exists`` and its key empty or the taint's, or its operator is ``Equal`` with the taint's
  key and value;
* a :class:`RequiredTerms` group (what a pod's volumes require of its node: a PersistentVolume's
  node affinity, the nodes a WaitForFirstConsumer claim can be bound or provisioned on) holds
  when any of its terms does, and every group must hold besides the pod's own affinity: a pod
  affinity and a volume's are ANDed, as kube-scheduler's NodeAffinity and VolumeBinding are two
  filters. Each group carries the reason a node failing it is counted under.

Values are checked when made, as the API server checks pods, and an error names the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupool.core.model import InvalidSpecError

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects that keep pods without a toleration off a node (not ``PreferNoSchedule``)."""
TOLERATION_OPERATORS = ("Equal", "Exists")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
NODE_NAME_FIELD = "metadata.name"
MAX_PREFERRED_WEIGHT = 100
"""Largest weight of a preferred node-affinity term (the API server's limit)."""
"""The one node field a ``matchFields`` requirement may read."""


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint.

    Attributes:
        key: Taint key.
        value: Taint value (may be empty).
        effect: ``NoSchedule``, ``PreferNoSchedule`` or ``NoExecute``.
    """

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if not self.key:
            raise InvalidSpecError("taint", "key", "must not be empty")
        if self.effect not in TAINT_EFFECTS:
            raise InvalidSpecError(
                f"taint {self.key!r}", "effect", f"must be one of {', '.join(TAINT_EFFECTS)}"
            )

    @property
    def blocking(self) -> bool:
        """Whether pods that do not tolerate it are kept off the node."""
        return self.effect in BLOCKING_EFFECTS


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod's toleration of node taints.

    Attributes:
        key: Taint key; empty (with ``Exists``) tolerates every key.
        operator: ``Equal`` (key and value must match) or ``Exists`` (any value).
        value: Value for ``Equal``; must be empty for ``Exists``.
        effect: The effect tolerated; empty tolerates every effect.
    """

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def __post_init__(self) -> None:
        owner = f"toleration {self.key!r}"
        if self.operator not in TOLERATION_OPERATORS:
            raise InvalidSpecError(
                owner, "operator", f"must be one of {', '.join(TOLERATION_OPERATORS)}"
            )
        if self.operator == "Exists" and self.value:
            raise InvalidSpecError(owner, "value", "must be empty when operator is Exists")
        if not self.key and self.operator != "Exists":
            raise InvalidSpecError(owner, "operator", "must be Exists when key is empty")
        if self.effect and self.effect not in TAINT_EFFECTS:
            raise InvalidSpecError(
                owner, "effect", f"must be empty or one of {', '.join(TAINT_EFFECTS)}"
            )

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration tolerates ``taint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One expression of a node-affinity term: ``key operator values``.

    Attributes:
        key: Label key (or ``metadata.name`` in a term's fields).
        operator: One of :data:`SELECTOR_OPERATORS`.
        values: ``In``/``NotIn``: at least one; ``Exists``/``DoesNotExist``: none;
            ``Gt``/``Lt``: exactly one (an integer; another value matches no node, as in
            kube-scheduler).
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        owner = f"requirement {self.key!r}"
        if not self.key:
            raise InvalidSpecError("requirement", "key", "must not be empty")
        operator, count = self.operator, len(self.values)
        if operator not in SELECTOR_OPERATORS:
            raise InvalidSpecError(
                owner, "operator", f"must be one of {', '.join(SELECTOR_OPERATORS)}"
            )
        if operator in ("In", "NotIn") and not count:
            raise InvalidSpecError(owner, "values", f"{operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and count:
            raise InvalidSpecError(owner, "values", f"must be empty for {operator}")
        if operator in ("Gt", "Lt") and count != 1:
            raise InvalidSpecError(owner, "values", f"{operator} needs exactly one value")

    def holds(self, value: str | None) -> bool:
        """Whether a node whose label (or field) is ``value`` (None: absent) meets it."""
        operator = self.operator
        if operator == "In":
            return value is not None and value in self.values
        if operator == "NotIn":
            return value is None or value not in self.values
        if operator == "Exists":
            return value is not None
        if operator == "DoesNotExist":
            return value is None
        have, bound = _integer(value), _integer(self.values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """A node-affinity term: all of its expressions and fields must hold.

    Attributes:
        match_expressions: Requirements on the node's labels.
        match_fields: Requirements on the node's fields (only ``metadata.name``).
    """

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        for requirement in self.match_fields:
            if requirement.key != NODE_NAME_FIELD:
                raise InvalidSpecError(
                    "node selector term", "matchFields", f"only {NODE_NAME_FIELD} may be matched"
                )

    def holds(self, labels: Mapping[str, str], name: str) -> bool:
        """Whether a node with ``labels`` and ``name`` meets the term (an empty one: never)."""
        if not self.match_expressions and not self.match_fields:
            return False
        return all(r.holds(labels.get(r.key)) for r in self.match_expressions) and all(
            r.holds(name) for r in self.match_fields
        )


@dataclass(frozen=True, slots=True)
class RequiredTerms:
    """Node-affinity terms of which one must hold, required besides the pod's own affinity.

    Attributes:
        reason: What a node failing them is counted under ("node(s) didn't match
            PersistentVolume's node affinity"); groups with one reason make one check.
        terms: The terms, any of which may hold; none: no node can (a claim bound to a volume
            that does not exist, a claim no volume can be found for).
    """

    reason: str
    terms: tuple[SelectorTerm, ...] = ()

    def holds(self, labels: Mapping[str, str], name: str) -> bool:
        """Whether a node with ``labels`` and ``name`` meets one of the terms."""
        return any(term.holds(labels, name) for term in self.terms)


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    """A preferred node-affinity term: nodes it holds on gain ``weight`` (kube: 1..100).

    Attributes:
        weight: What a node meeting the term gains.
        term: The term.
    """

    weight: int
    term: SelectorTerm

    def __post_init__(self) -> None:
        if not 1 <= self.weight <= MAX_PREFERRED_WEIGHT:
            raise InvalidSpecError(
                "preferred term", "weight", f"must be 1..{MAX_PREFERRED_WEIGHT}, got {self.weight}"
            )


@dataclass(frozen=True, slots=True)
class NodeConstraints:
    """A pod's node selector, required node affinity and tolerations.

    Attributes:
        node_selector: Labels the node must carry, as sorted ``(key, value)`` pairs (build it
            with :meth:`of` from a mapping), so equal selectors are equal values.
        affinity: Required node-affinity terms (any may hold); ``None`` when the pod has none.
            An empty tuple matches no node, as in Kubernetes.
        tolerations: The taints the pod tolerates.
        required: Further groups of terms that must all hold (the pod's volumes'), each with
            its own reason (:class:`RequiredTerms`).
        preferred: Weighted terms that filter nothing and rank nodes
            (:mod:`gpupool.core.node_preference`).
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[SelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    required: tuple[RequiredTerms, ...] = ()
    preferred: tuple[PreferredTerm, ...] = ()

    def __post_init__(self) -> None:
        if list(self.node_selector) != sorted(dict(self.node_selector).items()):
            raise InvalidSpecError(
                "node constraints", "node_selector", "must be sorted pairs with distinct keys"
            )

    @classmethod
    def of(
        cls,
        node_selector: Mapping[str, str] | None = None,
        affinity: Iterable[SelectorTerm] | None = None,
        tolerations: Iterable[Toleration] = (),
        required: Iterable[RequiredTerms] = (),
        preferred: Iterable[PreferredTerm] = (),
    ) -> NodeConstraints:
        """Constraints from a selector mapping, affinity terms, tolerations and groups."""
        return cls(
            node_selector=tuple(sorted((node_selector or {}).items())),
            affinity=None if affinity is None else tuple(affinity),
            tolerations=tuple(tolerations),
            required=tuple(required),
            preferred=tuple(preferred),
        )

    @property
    def empty(self) -> bool:
        """Whether it constrains nothing (only the node's own state still applies)."""
        return (
            not self.node_selector
            and self.affinity is None
            and not self.tolerations
            and not self.required
            and not self.preferred
        )

    def selects(self, labels: Mapping[str, str], name: str) -> bool:
        """Whether a node with ``labels`` and ``name`` meets the selector and the affinity."""
        if any(labels.get(key) != value for key, value in self.node_selector):
            return False
        return self.affinity is None or any(term.holds(labels, name) for term in self.affinity)

    def required_reasons(self) -> tuple[str, ...]:
        """The distinct reasons of :attr:`required`, in order (one node check each)."""
        return tuple(dict.fromkeys(group.reason for group in self.required))

    def meets_required(self, reason: str, labels: Mapping[str, str], name: str) -> bool:
        """Whether a node meets every group of :attr:`required` counted under ``reason``."""
        return all(g.holds(labels, name) for g in self.required if g.reason == reason)

    def tolerates(self, taints: Iterable[Taint]) -> bool:
        """Whether every blocking taint among ``taints`` is tolerated."""
        return all(
            any(toleration.tolerates(taint) for toleration in self.tolerations)
            for taint in taints
            if taint.blocking
        )


NO_CONSTRAINTS = NodeConstraints()
"""What a pod that names no selector, affinity or toleration requires: only untainted nodes."""


def _integer(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None
