"""The PodDisruptionBudgets of the cluster, and which pods each covers, kept for the victim search.

One informer watches every budget (``policy/v1``, list and watch in the scheduler's role). Which
pods a budget covers is kept per pod and updated where it can change: a pod's own event (its
labels, its arrival) looks at the budgets of its namespace; a budget whose selector changes, comes
or goes looks at the pods of its namespace. A change of status (a replica became ready) moves
only the number of disruptions the budget allows. Each cycle then hands the engine both as
:class:`~gpupool.scheduling.disruption.DisruptionBudgets` without a pass over every pod.

The cache is best effort, as budgets are for preemption: the scheduler does not wait for it to
be listed before it schedules (a victim search before then counts no budget, and the eviction
still asks the API server, which applies them), and an API server that refuses the list (a
role without it) leaves it empty while the informer retries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from types import MappingProxyType

from gpupool.core.pod_terms import LabelSelector, selects
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import DELETED, Informer
from gpupool.kube.objects.disruption_budget import PATH, DisruptionBudgetRecord, budget_selector
from gpupool.kube.objects.records import PodRecord
from gpupool.scheduling.disruption import DisruptionBudgets


class BudgetCache:
    """The budgets, what each allows now, and the pods each covers.

    Args:
        api: The API port.
        pods: The scheduler's pods by uid (read when a budget's selector changes).
        changed: Called after a budget changed (wakes the loop while leading).
    """

    def __init__(
        self, api: KubeAPI, pods: Mapping[str, PodRecord], changed: Callable[[], None]
    ) -> None:
        self.pods = pods
        self.changed = changed
        self.informer = Informer(api, PATH, DisruptionBudgetRecord, self._on_budget)
        self.allowed: dict[str, int] = {}
        self.selectors: dict[str, LabelSelector | None] = {}
        self.by_namespace: defaultdict[str, set[str]] = defaultdict(set)
        self.covering: dict[str, tuple[str, ...]] = {}

    def budgets(self) -> DisruptionBudgets:
        """What the engine's victim search takes (read-only views; valid for one cycle)."""
        return DisruptionBudgets(MappingProxyType(self.allowed), MappingProxyType(self.covering))

    def of(self, pod: PodRecord) -> tuple[str, ...]:
        """The budgets that cover ``pod`` (``namespace/name``)."""
        return self.covering.get(pod.metadata.uid, ())

    def on_pod(self, pod: PodRecord, *, gone: bool) -> None:
        """Follow a pod event: the budgets of its namespace that cover it now."""
        uid = pod.metadata.uid
        if gone:
            self.covering.pop(uid, None)
            return
        self._cover(pod)

    def _cover(self, pod: PodRecord) -> None:
        meta = pod.metadata
        keys = self.by_namespace.get(meta.namespace, ())
        found = tuple(sorted(k for k in keys if selects(self.selectors[k], meta.labels)))
        if found:
            self.covering[meta.uid] = found
        else:
            self.covering.pop(meta.uid, None)

    def _on_budget(self, kind: str, budget: DisruptionBudgetRecord) -> None:
        key, namespace = budget.key, budget.metadata.namespace
        before = self.selectors.get(key)
        if kind == DELETED:
            self.allowed.pop(key, None)
            self.selectors.pop(key, None)
            self.by_namespace[namespace].discard(key)
            if not self.by_namespace[namespace]:
                del self.by_namespace[namespace]
        else:
            self.allowed[key] = budget.status.disruptions_allowed
            self.selectors[key] = budget_selector(budget.spec.selector)
            self.by_namespace[namespace].add(key)
        if self.selectors.get(key) != before:
            for pod in self.pods.values():
                if pod.metadata.namespace == namespace:
                    self._cover(pod)
        self.changed()
