"""PodGroups, the objects that make pods a gang, in both forms users write them.

* Kubernetes 1.37's ``scheduling.k8s.io/v1beta1`` PodGroup (gate ``GenericWorkload``): the pod
  names it in ``spec.schedulingGroup.podGroupName``; ``spec.schedulingPolicy.gang.minCount``
  pods must start together, a ``basic`` policy schedules them one by one;
  ``spec.disruptionMode.single`` (the API server's default) lets preemption and reclaim take
  its pods one at a time; ``spec.schedulingConstraints.topology[0].key`` keeps its pods on
  nodes sharing one value of that node label.
* The scheduler-plugins coscheduling ``scheduling.x-k8s.io/v1alpha1`` PodGroup that Kubeflow's
  training operator and KubeRay write: the pod carries the label
  ``scheduling.x-k8s.io/pod-group``; ``spec.minMember`` pods must start together.

A gang is named ``namespace/name``: a PodGroup groups pods of its own namespace only.
"""

from __future__ import annotations

import msgspec

from gpupool.kube.objects.records import KubeObject, PodRecord
from gpupool.scheduling.decisions import GangSpec

WORKLOAD_API = "/apis/scheduling.k8s.io/v1beta1"
WORKLOAD_API_GROUPS = f"{WORKLOAD_API}/podgroups"
COSCHEDULING_API = "/apis/scheduling.x-k8s.io/v1alpha1"
COSCHEDULING_GROUPS = f"{COSCHEDULING_API}/podgroups"
LABEL_COSCHEDULING = "scheduling.x-k8s.io/pod-group"


class GangPolicy(msgspec.Struct, frozen=True, rename="camel"):
    """``schedulingPolicy.gang``: how many pods start together."""

    min_count: int = 0


class SchedulingPolicy(msgspec.Struct, frozen=True):
    """``spec.schedulingPolicy``: ``gang``, or ``basic`` (no gang: pods go one by one)."""

    gang: GangPolicy | None = None


class DisruptionMode(msgspec.Struct, frozen=True):
    """``spec.disruptionMode``: ``single`` (pods disrupted one at a time) or ``all``."""

    single: dict[str, object] | None = None


class TopologyConstraint(msgspec.Struct, frozen=True):
    """One ``spec.schedulingConstraints.topology`` entry: the node label of the domain."""

    key: str = ""


class SchedulingConstraints(msgspec.Struct, frozen=True):
    """``spec.schedulingConstraints``: where the group's pods must be together."""

    topology: tuple[TopologyConstraint, ...] = ()


class PodGroupSpec(msgspec.Struct, frozen=True, rename="camel"):
    """The spec fields a gang is made of."""

    scheduling_policy: SchedulingPolicy = SchedulingPolicy()
    disruption_mode: DisruptionMode = DisruptionMode()
    scheduling_constraints: SchedulingConstraints = SchedulingConstraints()


class PodGroupRecord(KubeObject, frozen=True):
    """A ``scheduling.k8s.io/v1beta1`` PodGroup."""

    spec: PodGroupSpec = PodGroupSpec()

    @property
    def gang(self) -> GangSpec | None:
        """What the gang asks; ``None`` for a basic group (no gang)."""
        gang = self.spec.scheduling_policy.gang
        if gang is None:
            return None
        topology = self.spec.scheduling_constraints.topology
        return GangSpec(
            gang.min_count,
            evict_alone=self.spec.disruption_mode.single is not None,
            topology_key=topology[0].key if topology else "",  # the API allows one
        )


class CoschedulingSpec(msgspec.Struct, frozen=True, rename="camel"):
    """The coscheduling PodGroup's spec field a gang is made of."""

    min_member: int = 0


class CoschedulingGroupRecord(KubeObject, frozen=True):
    """A ``scheduling.x-k8s.io/v1alpha1`` PodGroup."""

    spec: CoschedulingSpec = CoschedulingSpec()

    @property
    def gang(self) -> GangSpec | None:
        """Pods that must start together (``minMember``), evicted together."""
        return GangSpec(self.spec.min_member)


def workload_group_path(key: str) -> str:
    """The API path of the 1.37 PodGroup ``namespace/name``."""
    namespace, _, name = key.partition("/")
    return f"{WORKLOAD_API}/namespaces/{namespace}/podgroups/{name}"


def group_key(pod: PodRecord) -> str:
    """The ``namespace/name`` of the PodGroup ``pod`` belongs to ("" for none).

    The 1.37 field comes first; a pod with both names the same group in practice (the
    coscheduling label is only read where the field is absent).
    """
    group = pod.spec.scheduling_group
    name = group.pod_group_name if group is not None else ""
    name = name or pod.metadata.labels.get(LABEL_COSCHEDULING, "")
    return f"{pod.metadata.namespace}/{name}" if name else ""
