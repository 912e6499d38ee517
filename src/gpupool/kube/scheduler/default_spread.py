"""The cluster's default topology spread, for pods that state none, as kube-scheduler applies it.

kube-scheduler's PodTopologySpread, with its ``System`` defaulting (the default), scores a pod
without ``topologySpreadConstraints`` by two ScheduleAnyway constraints: ``maxSkew`` 3 over
``kubernetes.io/hostname`` and 5 over ``topology.kubernetes.io/zone``, counting the pods that its
*default selector* matches (``helper.DefaultSelector``): the labels every Service selecting the
pod selects, plus the selector of its controlling ReplicationController, ReplicaSet or
StatefulSet. A pod no Service or such controller selects gets none. So the replicas of an
inference Deployment spread over the nodes gpupool's GPU score leaves tied, as they would under
kube-scheduler; fragmentation still decides first.

Four informers keep the selectors (list and watch of services, replicationcontrollers,
replicasets and statefulsets, as in kube-scheduler's role). Like the budgets, they are best
effort: a score only breaks ties, so the scheduler does not wait for them to be listed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpupool.core.constraints import Requirement
from gpupool.core.model import PodSpec
from gpupool.core.pod_terms import SCHEDULE_ANYWAY, LabelSelector, PodTerms, SpreadConstraint
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import DELETED, Informer
from gpupool.kube.client.informer_group import InformerGroup
from gpupool.kube.objects.label_selector import usable_selector
from gpupool.kube.objects.records import KubeObject, PodRecord
from gpupool.kube.objects.spread_owners import (
    REPLICA_SETS_PATH,
    REPLICATION_CONTROLLERS_PATH,
    SERVICES_PATH,
    STATEFUL_SETS_PATH,
    ReplicaSetRecord,
    ReplicationControllerRecord,
    ServiceRecord,
    StatefulSetRecord,
)

SPREAD_WATCHES = 4
"""Services, ReplicationControllers, ReplicaSets and StatefulSets."""
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
SYSTEM_DEFAULT = ((HOSTNAME, 3), (ZONE, 5))
"""kube-scheduler's system default constraints: (topology key, maxSkew), both ScheduleAnyway."""

CONTROLLERS = (
    ("v1", "ReplicationController", REPLICATION_CONTROLLERS_PATH, ReplicationControllerRecord),
    ("apps/v1", "ReplicaSet", REPLICA_SETS_PATH, ReplicaSetRecord),
    ("apps/v1", "StatefulSet", STATEFUL_SETS_PATH, StatefulSetRecord),
)
"""Controllers whose selector joins a pod's default selector: (apiVersion, kind, path, record)."""


class DefaultSpread(InformerGroup):
    """The Services and controllers of the cluster, and the default spread they give a pod.

    Args:
        api: The API port.
    """

    def __init__(self, api: KubeAPI) -> None:
        super().__init__(lambda: None)  # a score: no pod becomes placeable when one changes
        self.services: defaultdict[str, dict[str, ServiceRecord]] = defaultdict(dict)
        self.controllers: dict[tuple[str, str, str, str], KubeObject] = {}
        """By (apiVersion, kind, namespace, name), as a pod's controller reference names one."""
        self.service_informer = Informer(api, SERVICES_PATH, ServiceRecord, self._on_service)
        self.controller_informers = tuple(
            Informer(api, path, record, self._keeper(version, kind))
            for version, kind, path, record in CONTROLLERS
        )

    def informers(self) -> tuple[Informer[Any], ...]:
        """The Service and controller informers."""
        informers: tuple[Informer[Any], ...] = (self.service_informer, *self.controller_informers)
        assert len(informers) == SPREAD_WATCHES
        return informers

    def _keeper(self, version: str, kind: str) -> Callable[[str, KubeObject], None]:
        def keep(event: str, record: KubeObject) -> None:
            key = (version, kind, record.metadata.namespace, record.metadata.name)
            if event == DELETED:
                self.controllers.pop(key, None)
            else:
                self.controllers[key] = record

        return keep

    def _on_service(self, kind: str, service: ServiceRecord) -> None:
        namespace = self.services[service.metadata.namespace]
        if kind == DELETED:
            namespace.pop(service.metadata.name, None)
        else:
            namespace[service.metadata.name] = service

    def selector(self, pod: PodRecord) -> LabelSelector | None:
        """The pod's default selector (``helper.DefaultSelector``); ``None`` when it is empty."""
        meta = pod.metadata
        labels: dict[str, str] = {}
        for service in self.services.get(meta.namespace, {}).values():
            wanted = service.spec.selector
            if wanted is not None and all(meta.labels.get(k) == v for k, v in wanted.items()):
                labels |= wanted
        expressions: tuple[Requirement, ...] = ()
        owner = next((o for o in meta.owner_references if o.controller), None)
        found = (
            self.controllers.get((owner.api_version, owner.kind, meta.namespace, owner.name))
            if owner is not None
            else None
        )
        if isinstance(found, ReplicationControllerRecord):
            labels |= found.spec.selector or {}
        elif isinstance(found, ReplicaSetRecord | StatefulSetRecord):
            own = usable_selector(found.spec.selector) if found.spec.selector else None
            if own is not None:
                equal = (Requirement(k, "In", (v,)) for k, v in own.match_labels)
                expressions = (*equal, *own.match_expressions)
        if not labels and not expressions:
            return None
        return LabelSelector(tuple(sorted(labels.items())), expressions)

    def applied(self, pod: PodRecord, spec: PodSpec) -> PodSpec:
        """``spec`` with the default constraints when the pod states none and has a selector."""
        if pod.spec.topology_spread_constraints:
            return spec
        selector = self.selector(pod)
        return spec if selector is None else with_default_spread(spec, selector)


def with_default_spread(spec: PodSpec, selector: LabelSelector) -> PodSpec:
    """``spec`` scored by the system default constraints over the pods ``selector`` matches."""
    spread = tuple(
        SpreadConstraint(skew, key, SCHEDULE_ANYWAY, selector) for key, skew in SYSTEM_DEFAULT
    )
    terms = spec.terms or PodTerms()
    return replace(spec, terms=replace(terms, spread=spread, system_default=True))
