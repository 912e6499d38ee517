"""The objects whose selectors make a pod's default topology spread: Services and controllers.

kube-scheduler spreads a pod that states no ``topologySpreadConstraints`` by the cluster's
default constraints, counting the pods that the Services selecting it and its controlling
ReplicationController, ReplicaSet or StatefulSet select (``helper.DefaultSelector``). These are
the fields of those four kinds it reads: a Service's or ReplicationController's ``spec.selector``
(a plain label map) and a ReplicaSet's or StatefulSet's (a label selector).
"""

from __future__ import annotations

import msgspec

from gpupool.kube.objects.constraint_records import LabelSelectorRecord
from gpupool.kube.objects.records import KubeObject

SERVICES_PATH = "/api/v1/services"
REPLICATION_CONTROLLERS_PATH = "/api/v1/replicationcontrollers"
REPLICA_SETS_PATH = "/apis/apps/v1/replicasets"
STATEFUL_SETS_PATH = "/apis/apps/v1/statefulsets"


class MapSelectorSpec(msgspec.Struct, frozen=True):
    """A Service's or ReplicationController's selector (``None``: it selects no pods)."""

    selector: dict[str, str] | None = None


class SetSelectorSpec(msgspec.Struct, frozen=True):
    """A ReplicaSet's or StatefulSet's selector."""

    selector: LabelSelectorRecord | None = None


class ServiceRecord(KubeObject, frozen=True):
    """A Service as the default spread reads it."""

    spec: MapSelectorSpec = MapSelectorSpec()


class ReplicationControllerRecord(KubeObject, frozen=True):
    """A ReplicationController as the default spread reads it."""

    spec: MapSelectorSpec = MapSelectorSpec()


class ReplicaSetRecord(KubeObject, frozen=True):
    """A ReplicaSet as the default spread reads it."""

    spec: SetSelectorSpec = SetSelectorSpec()


class StatefulSetRecord(KubeObject, frozen=True):
    """A StatefulSet as the default spread reads it."""

    spec: SetSelectorSpec = SetSelectorSpec()
