"""PodDisruptionBudgets (``policy/v1``): the fields the scheduler reads, and whom one covers.

A budget covers the pods of its own namespace its selector matches, as the Eviction API decides
(``pkg/registry/core/pod/storage/eviction.go``): a missing selector matches no pod, an empty one
(``{}``) every pod of the namespace (policy/v1's meaning), and a selector the server could not
turn into one matches nothing. That is what refuses an eviction, so it is what the victim search
must predict. (kube-scheduler's own count skips empty selectors and unlabelled pods; following
the Eviction API instead keeps a tenant's ``selector: {}`` from being a budget the scheduler
ignores and the eviction obeys.)

Expressions use the label-selector operators (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``),
which :class:`~gpupool.core.constraints.Requirement` evaluates the same way for node labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from gpupool.core.constraints import Requirement
from gpupool.core.model import InvalidSpecError
from gpupool.kube.objects.records import KubeObject

PATH = "/apis/policy/v1/poddisruptionbudgets"
LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


class LabelSelectorRequirement(msgspec.Struct, frozen=True):
    """``key operator values`` of a label selector."""

    key: str = ""
    operator: str = ""
    values: tuple[str, ...] = ()


class LabelSelector(msgspec.Struct, frozen=True, rename="camel"):
    """A ``metav1.LabelSelector``: all labels and expressions must hold."""

    match_labels: dict[str, str] = {}
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


class BudgetSpec(msgspec.Struct, frozen=True):
    """The spec field the scheduler reads (which pods the budget covers)."""

    selector: LabelSelector | None = None


class BudgetStatus(msgspec.Struct, frozen=True, rename="camel"):
    """How many disruptions the budget allows now (kube-controller-manager computes it)."""

    disruptions_allowed: int = 0


class DisruptionBudgetRecord(KubeObject, frozen=True):
    """One PodDisruptionBudget as the scheduler's cache holds it."""

    spec: BudgetSpec = BudgetSpec()
    status: BudgetStatus = BudgetStatus()

    @property
    def key(self) -> str:
        """``namespace/name``, the budget's name for people."""
        return f"{self.metadata.namespace}/{self.metadata.name}"


@dataclass(frozen=True, slots=True)
class Selector:
    """A budget's selector, compiled once; :meth:`matches` per pod.

    Attributes:
        labels: ``matchLabels``.
        expressions: ``matchExpressions``.
        valid: False for a missing selector or one the API server could not use (no pod
            matches it).
    """

    labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()
    valid: bool = False

    @classmethod
    def of(cls, selector: LabelSelector | None) -> Selector:
        """The compiled ``spec.selector``."""
        if selector is None:
            return cls()
        try:
            expressions = tuple(_requirement(item) for item in selector.match_expressions)
        except InvalidSpecError:
            return cls()
        return cls(tuple(sorted(selector.match_labels.items())), expressions, valid=True)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with ``labels`` is covered."""
        return (
            self.valid
            and all(labels.get(key) == value for key, value in self.labels)
            and all(r.holds(labels.get(r.key)) for r in self.expressions)
        )


def _requirement(item: LabelSelectorRequirement) -> Requirement:
    if item.operator not in LABEL_OPERATORS:
        raise InvalidSpecError("label selector", "operator", f"{item.operator!r} is not one")
    return Requirement(item.key, item.operator, item.values)
