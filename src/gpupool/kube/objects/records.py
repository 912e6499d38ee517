"""Slim records of nodes and pods, decoded straight from the API server's JSON.

The scheduler needs a few dozen fields of a Pod that has hundreds; decoding only those with
``msgspec`` into frozen structs costs a few microseconds per pod and keeps the cache small
(a full API model per pod is what makes Python controllers slow and large at 50k pods). Unknown
fields are skipped by the decoder, so new API versions do not break us.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from gpupool.kube.objects.constraint_records import (
    Affinity,
    Toleration,
    TopologySpreadConstraintRecord,
)


class OwnerReference(msgspec.Struct, frozen=True, rename="camel"):
    """An owner of the object (``controller``: the one that manages it).

    Read for a pod's controller (its default topology spread) and a claim's pod (an ephemeral
    volume's claim must be its pod's).
    """

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ObjectMeta(msgspec.Struct, frozen=True, rename="camel"):
    """The metadata fields the scheduler reads."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    deletion_timestamp: str | None = None
    creation_timestamp: str | None = None
    generation: int = 0
    finalizers: tuple[str, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()


class KubeObject(msgspec.Struct, frozen=True):
    """What every cached object has: its metadata."""

    metadata: ObjectMeta = ObjectMeta()


class ContainerClaim(msgspec.Struct, frozen=True):
    """One of the pod's resource claims a container uses (``request``: one request of it)."""

    name: str = ""
    request: str = ""


class ResourceRequirements(msgspec.Struct, frozen=True):
    """Requests and limits of one container, and the pod claims it uses."""

    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    claims: tuple[ContainerClaim, ...] = ()


class ContainerPort(msgspec.Struct, frozen=True, rename="camel"):
    """One container port; only one with a ``hostPort`` matters to scheduling (NodePorts)."""

    container_port: int = 0
    host_port: int = 0
    protocol: str = "TCP"
    host_ip: str = msgspec.field(default="", name="hostIP")


class Container(msgspec.Struct, frozen=True, rename="camel"):
    """The part of a container that scheduling reads.

    ``restart_policy`` is ``"Always"`` for a native sidecar (an init container that keeps
    running beside the app containers), which changes how its requests and ports count.
    """

    name: str = ""
    resources: ResourceRequirements = ResourceRequirements()
    ports: tuple[ContainerPort, ...] = ()
    restart_policy: str | None = None

    @property
    def sidecar(self) -> bool:
        """Whether this init container runs for the pod's life (``restartPolicy: Always``)."""
        return self.restart_policy == "Always"


class PodResourceClaim(msgspec.Struct, frozen=True, rename="camel"):
    """``spec.resourceClaims[]``: a claim by name, or a template to make one per pod from."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PersistentVolumeClaimSource(msgspec.Struct, frozen=True, rename="camel"):
    """``spec.volumes[].persistentVolumeClaim``: the claim a volume mounts."""

    claim_name: str = ""


INLINE_DISKS = (
    "gce_persistent_disk",
    "aws_elastic_block_store",
    "rbd",
    "iscsi",
    "azure_disk",
    "cinder",
)


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.capitalize() for part in rest)


class Volume(msgspec.Struct, frozen=True, rename="camel"):
    """A pod volume, as far as scheduling reads it: whether a claim backs it.

    ``ephemeral`` is kept raw: only its presence matters (its claim, ``<pod>-<volume>``, is
    made by kube-controller-manager and read like any other).
    """

    name: str = ""
    persistent_volume_claim: PersistentVolumeClaimSource | None = None
    ephemeral: dict[str, Any] | None = None
    gce_persistent_disk: dict[str, Any] | None = None
    aws_elastic_block_store: dict[str, Any] | None = None
    rbd: dict[str, Any] | None = None
    iscsi: dict[str, Any] | None = None
    azure_disk: dict[str, Any] | None = None
    cinder: dict[str, Any] | None = None

    def inline_disk(self) -> str:
        """The field of an inline in-tree disk this volume names ("" for none).

        kube-scheduler keeps two pods mounting one such disk apart (VolumeRestrictions) and
        counts them against the node's attach limit; gpupool does neither, so such a pod is
        refused naming the field (:func:`gpupool.kube.objects.translate.pod_spec`).
        """
        for field in INLINE_DISKS:
            if getattr(self, field) is not None:
                return _camel(field)
        return ""


class PodSchedulingGroup(msgspec.Struct, frozen=True, rename="camel"):
    """The PodGroup a pod belongs to (``spec.schedulingGroup``, Kubernetes 1.37)."""

    pod_group_name: str = ""


class PodSpecRecord(msgspec.Struct, frozen=True, rename="camel"):
    """The pod spec fields the scheduler reads."""

    node_name: str = ""
    scheduler_name: str = "default-scheduler"
    priority: int = 0
    containers: list[Container] = []
    init_containers: list[Container] = []
    overhead: dict[str, str] = {}
    node_selector: dict[str, str] = {}
    affinity: Affinity = Affinity()
    tolerations: list[Toleration] = []
    topology_spread_constraints: tuple[TopologySpreadConstraintRecord, ...] = ()
    scheduling_gates: list[dict[str, str]] = []
    resource_claims: tuple[PodResourceClaim, ...] = ()
    resources: ResourceRequirements | None = None
    """Pod-level requests and limits (PodLevelResources): for cpu, memory and hugepages they
    replace the containers' sum."""
    volumes: tuple[Volume, ...] = ()
    termination_grace_period_seconds: int | None = None
    scheduling_group: PodSchedulingGroup | None = None


class ContainerStateWaiting(msgspec.Struct, frozen=True):
    """Why a container is not running (``CrashLoopBackOff``, ``ImagePullBackOff``, ...)."""

    reason: str = ""


class ContainerState(msgspec.Struct, frozen=True):
    """The part of a container's state governance reads."""

    waiting: ContainerStateWaiting | None = None


class ContainerStatus(msgspec.Struct, frozen=True, rename="camel"):
    """One container's restarts and state (governance's abnormal-pod rules read them)."""

    name: str = ""
    restart_count: int = 0
    state: ContainerState = ContainerState()


class PodResourceClaimStatus(msgspec.Struct, frozen=True, rename="camel"):
    """The claim generated for a pod from a template (by kube-controller-manager)."""

    name: str = ""
    resource_claim_name: str | None = None


class PodStatusRecord(msgspec.Struct, frozen=True, rename="camel"):
    """The pod status fields the scheduler and governance read."""

    phase: str = "Pending"
    container_statuses: list[ContainerStatus] = []
    resource_claim_statuses: tuple[PodResourceClaimStatus, ...] = ()


class PodRecord(KubeObject, frozen=True):
    """One pod, as the scheduler's cache holds it."""

    spec: PodSpecRecord = PodSpecRecord()
    status: PodStatusRecord = PodStatusRecord()

    @property
    def key(self) -> str:
        """``namespace/name``, the pod's name for people."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def finished(self) -> bool:
        """Whether the pod's containers have ended for good (its resources are free)."""
        return self.status.phase in ("Succeeded", "Failed")


class Taint(msgspec.Struct, frozen=True):
    """A node taint."""

    key: str = ""
    value: str = ""
    effect: str = ""


class NodeSpecRecord(msgspec.Struct, frozen=True):
    """The node spec fields the scheduler reads."""

    unschedulable: bool = False
    taints: list[Taint] = []


class NodeCondition(msgspec.Struct, frozen=True, rename="camel"):
    """One node condition."""

    type: str = ""
    status: str = ""
    last_transition_time: str = ""


class NodeStatusRecord(msgspec.Struct, frozen=True):
    """The node status fields the scheduler reads."""

    allocatable: dict[str, str] = {}
    conditions: list[NodeCondition] = []


class NodeRecord(KubeObject, frozen=True):
    """One node, as the scheduler's cache holds it."""

    spec: NodeSpecRecord = NodeSpecRecord()
    status: NodeStatusRecord = NodeStatusRecord()

    @property
    def key(self) -> str:
        """The node name."""
        return self.metadata.name

    @property
    def ready(self) -> bool:
        """Whether the node reports Ready=True."""
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)


class PolicyObjectRecord(KubeObject, frozen=True):
    """A GPUPool or GPUQueue: its spec kept as the API server's JSON.

    The spec is parsed by :mod:`gpupool.policy.config`, the same code that reads a simulator's
    file, so a field means the same thing in both places and an error names the same path.
    """

    spec: dict[str, Any] = {}

    @property
    def key(self) -> str:
        """The object's name (both kinds are cluster-scoped)."""
        return self.metadata.name


Record = TypeVar("Record", bound=KubeObject)


class ListMeta(msgspec.Struct, frozen=True, rename="camel"):
    """Where a paginated list continues and which resourceVersion it was read at."""

    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class ListPage(msgspec.Struct, Generic[Record], frozen=True):
    """One page of a LIST."""

    metadata: ListMeta = ListMeta()
    items: list[Record] = []


class WatchEvent(msgspec.Struct, Generic[Record], frozen=True):
    """One line of a WATCH stream, with the object left raw until its type is known.

    ``ERROR`` events carry a ``Status`` (410 Gone when the resourceVersion is too old) and
    ``BOOKMARK`` events only a resourceVersion, so the object is decoded in a second step.
    """

    type: str
    object: msgspec.Raw
