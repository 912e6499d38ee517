"""PodDisruptionBudgets (``policy/v1``): the fields the scheduler reads, and whom one covers.

A budget covers the pods of its own namespace its selector matches, as the Eviction API decides
(``pkg/registry/core/pod/storage/eviction.go``): a missing selector matches no pod, an empty one
(``{}``) every pod of the namespace (policy/v1's meaning), and a selector the server could not
turn into one matches nothing. That is what refuses an eviction, so it is what the victim search
must predict. (kube-scheduler's own count skips empty selectors and unlabelled pods; following
the Eviction API instead keeps a tenant's ``selector: {}`` from being a budget the scheduler
ignores and the eviction obeys.)

The selector is read as every label selector is (:mod:`gpupool.kube.objects.label_selector`).
"""

from __future__ import annotations

import msgspec

from gpupool.core.pod_terms import LabelSelector
from gpupool.kube.objects.constraint_records import LabelSelectorRecord
from gpupool.kube.objects.label_selector import usable_selector
from gpupool.kube.objects.records import KubeObject

PATH = "/apis/policy/v1/poddisruptionbudgets"


class BudgetSpec(msgspec.Struct, frozen=True):
    """The spec field the scheduler reads (which pods the budget covers)."""

    selector: LabelSelectorRecord | None = None


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


def budget_selector(selector: LabelSelectorRecord | None) -> LabelSelector | None:
    """The pods a budget's ``spec.selector`` covers (None: none).

    As the Eviction API reads it: a missing or unusable selector covers nothing, an empty one
    every pod of the namespace.
    """
    return None if selector is None else usable_selector(selector)
