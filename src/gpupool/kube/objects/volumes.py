"""PersistentVolumeClaims, PersistentVolumes and StorageClasses: slim records and their rules.

The scheduler places every GPU pod, so it must honour the pod's volumes as kube-scheduler's
VolumeBinding, VolumeZone and VolumeRestrictions plugins do: a volume that lives on one node can
only be mounted there. This module holds what those rules read of the storage objects (decoded
like :mod:`gpupool.kube.objects.records`) and the pure parts of the rules, in kube's terms
(component-helpers ``storage/volume``):

* a claim is *fully bound* when ``spec.volumeName`` is set and it carries
  ``pv.kubernetes.io/bind-completed`` (the PV controller's mark), not before;
* a claim's class is the beta annotation if present, else ``spec.storageClassName``;
* a volume *matches* an unbound claim (:func:`matches`) when it is not being deleted, is
  ``Available`` (or already reserved for this claim by ``claimRef``), has the claim's class,
  volume mode and VolumeAttributesClass, at least the storage asked for, every access mode
  asked for, and the labels the claim's selector asks for; its node affinity is checked per
  node by the core;
* a volume's node affinity, a class's ``allowedTopologies`` and a volume's zone labels become
  the core's selector terms in :mod:`gpupool.kube.objects.volume_topology`.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import msgspec

from gpupool.core.pod_terms import selects
from gpupool.kube.objects.constraint_records import LabelSelectorRecord, NodeSelector
from gpupool.kube.objects.label_selector import usable_selector
from gpupool.kube.objects.quantity import QuantityError, parse_quantity
from gpupool.kube.objects.records import KubeObject, PodRecord

PVC_PATH = "/api/v1/persistentvolumeclaims"
PV_PATH = "/api/v1/persistentvolumes"
STORAGE_CLASSES_PATH = "/apis/storage.k8s.io/v1/storageclasses"
CSI_NODES_PATH = "/apis/storage.k8s.io/v1/csinodes"
ATTACHMENTS_PATH = "/apis/storage.k8s.io/v1/volumeattachments"

ANNOTATION_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANNOTATION_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANNOTATION_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANNOTATION_BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
FILESYSTEM = "Filesystem"
PHASE_AVAILABLE = "Available"
PHASE_LOST = "Lost"
STORAGE = "storage"


class ClaimResources(msgspec.Struct, frozen=True):
    """A claim's requested storage."""

    requests: dict[str, str] = {}


class ClaimSpec(msgspec.Struct, frozen=True, rename="camel"):
    """The claim spec fields scheduling reads."""

    access_modes: tuple[str, ...] = ()
    selector: LabelSelectorRecord | None = None
    resources: ClaimResources = ClaimResources()
    volume_name: str = ""
    storage_class_name: str | None = None
    volume_mode: str | None = None
    volume_attributes_class_name: str | None = None


class ClaimStatus(msgspec.Struct, frozen=True):
    """A claim's phase (``Pending``, ``Bound``, ``Lost``)."""

    phase: str = ""


class PersistentVolumeClaim(KubeObject, frozen=True):
    """One PersistentVolumeClaim."""

    spec: ClaimSpec = ClaimSpec()
    status: ClaimStatus = ClaimStatus()

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name)."""
        return (self.metadata.namespace, self.metadata.name)

    @property
    def fully_bound(self) -> bool:
        """Bound by the PV controller (a volume name alone may be a user's pre-binding)."""
        return bool(self.spec.volume_name) and (
            ANNOTATION_BIND_COMPLETED in self.metadata.annotations
        )

    @property
    def class_name(self) -> str:
        """The claim's StorageClass ("" for none)."""
        annotated = self.metadata.annotations.get(ANNOTATION_BETA_CLASS)
        if annotated is not None:
            return annotated
        return self.spec.storage_class_name or ""


class ClaimRef(msgspec.Struct, frozen=True):
    """The claim a volume is bound (or reserved) to."""

    namespace: str = ""
    name: str = ""
    uid: str = ""


class VolumeNodeAffinity(msgspec.Struct, frozen=True):
    """The nodes a volume can be reached from."""

    required: NodeSelector | None = None


class CSIVolumeSource(msgspec.Struct, frozen=True, rename="camel"):
    """A CSI volume's driver and its handle (what counts against a node's attach limit)."""

    driver: str = ""
    volume_handle: str = ""


class VolumeSpec(msgspec.Struct, frozen=True, rename="camel"):
    """The PersistentVolume spec fields scheduling reads."""

    capacity: dict[str, str] = {}
    csi: CSIVolumeSource | None = None
    access_modes: tuple[str, ...] = ()
    claim_ref: ClaimRef | None = None
    storage_class_name: str = ""
    volume_mode: str | None = None
    volume_attributes_class_name: str | None = None
    node_affinity: VolumeNodeAffinity | None = None


class VolumeStatus(msgspec.Struct, frozen=True):
    """A volume's phase (``Available``, ``Bound``, ``Released``...)."""

    phase: str = ""


class PersistentVolume(KubeObject, frozen=True):
    """One PersistentVolume."""

    spec: VolumeSpec = VolumeSpec()
    status: VolumeStatus = VolumeStatus()

    @property
    def key(self) -> str:
        """The volume's name."""
        return self.metadata.name

    @property
    def class_name(self) -> str:
        """The volume's StorageClass ("" for none)."""
        annotated = self.metadata.annotations.get(ANNOTATION_BETA_CLASS)
        return annotated if annotated is not None else self.spec.storage_class_name

    def reserved_for(self, claim: PersistentVolumeClaim) -> bool:
        """Whether ``claimRef`` names ``claim`` (its uid too, when it has one)."""
        ref = self.spec.claim_ref
        if ref is None or (ref.namespace, ref.name) != claim.key:
            return False
        return not ref.uid or ref.uid == claim.metadata.uid


class TopologyRequirement(msgspec.Struct, frozen=True):
    """One label and the values a provisioned volume's node may have for it."""

    key: str = ""
    values: tuple[str, ...] = ()


class TopologyTerm(msgspec.Struct, frozen=True, rename="camel"):
    """One term of a class's ``allowedTopologies``: every requirement must hold."""

    match_label_expressions: tuple[TopologyRequirement, ...] = ()


class StorageClass(KubeObject, frozen=True, rename="camel"):
    """One StorageClass."""

    provisioner: str = ""
    volume_binding_mode: str | None = None
    allowed_topologies: tuple[TopologyTerm, ...] = ()

    @property
    def key(self) -> str:
        """The class's name."""
        return self.metadata.name

    @property
    def delays_binding(self) -> bool:
        """Whether a claim of the class waits for its first pod (``WaitForFirstConsumer``)."""
        return self.volume_binding_mode == WAIT_FOR_FIRST_CONSUMER

    @property
    def provisions(self) -> bool:
        """Whether a claim of the class can get a volume made for it."""
        return bool(self.provisioner) and self.provisioner != NO_PROVISIONER


class DriverAllocatable(msgspec.Struct, frozen=True):
    """How many volumes of a driver a node can have attached."""

    count: int | None = None


class CSINodeDriver(msgspec.Struct, frozen=True):
    """One CSI driver on a node."""

    name: str = ""
    allocatable: DriverAllocatable | None = None


class CSINodeSpec(msgspec.Struct, frozen=True):
    """The drivers of a node.

    ``null`` on a node with none: the API field has no omitempty, and a real kubelet writes its
    CSINode so before any driver registers.
    """

    drivers: tuple[CSINodeDriver, ...] | None = None


class CSINode(KubeObject, frozen=True):
    """A node's CSI drivers and their attach limits (named like the node)."""

    spec: CSINodeSpec = CSINodeSpec()

    @property
    def key(self) -> str:
        """The node's name."""
        return self.metadata.name

    @property
    def limits(self) -> dict[str, int]:
        """Attachable volumes per driver, for the drivers that say."""
        return {
            d.name: d.allocatable.count
            for d in self.spec.drivers or ()
            if d.allocatable is not None and d.allocatable.count is not None
        }


class AttachmentSource(msgspec.Struct, frozen=True, rename="camel"):
    """The volume a VolumeAttachment attaches."""

    persistent_volume_name: str | None = None


class AttachmentSpec(msgspec.Struct, frozen=True, rename="camel"):
    """Which driver attaches which volume to which node."""

    attacher: str = ""
    node_name: str = ""
    source: AttachmentSource = AttachmentSource()


class VolumeAttachment(KubeObject, frozen=True):
    """A volume attached (or being attached) to a node: it counts there, pod or not."""

    spec: AttachmentSpec = AttachmentSpec()

    @property
    def key(self) -> str:
        """The attachment's name."""
        return self.metadata.name


def _storage(amount: str | None) -> Fraction:
    if not amount:
        return Fraction(0)
    try:
        return parse_quantity(amount)
    except QuantityError:
        return Fraction(-1)  # unreadable: matches no claim that asks for storage


def claim_storage(claim: PersistentVolumeClaim) -> Fraction:
    """The storage a claim asks for."""
    return _storage(claim.spec.resources.requests.get(STORAGE))


def volume_storage(volume: PersistentVolume) -> Fraction:
    """The storage a volume offers."""
    return _storage(volume.spec.capacity.get(STORAGE))


def _selector_holds(selector: LabelSelectorRecord | None, labels: Mapping[str, str]) -> bool:
    """A claim's ``spec.selector`` (none: any volume; one the API server refuses: no volume)."""
    return selector is None or selects(usable_selector(selector), labels)


def matches(volume: PersistentVolume, claim: PersistentVolumeClaim) -> bool:
    """Whether ``volume`` could be bound to the unbound ``claim`` on a node it reaches.

    kube's FindMatchingVolume, less the node affinity (the core checks that per node).
    """
    if volume.metadata.deletion_timestamp is not None:
        return False
    reserved = volume.reserved_for(claim)
    if volume.spec.claim_ref is not None and not reserved:
        return False
    if volume_storage(volume) < claim_storage(claim):
        return False
    if (volume.spec.volume_mode or FILESYSTEM) != (claim.spec.volume_mode or FILESYSTEM):
        return False
    claim_attributes = claim.spec.volume_attributes_class_name or ""
    if claim_attributes != (volume.spec.volume_attributes_class_name or ""):
        return False
    if reserved:
        return True
    return (
        volume.status.phase == PHASE_AVAILABLE
        and _selector_holds(claim.spec.selector, volume.metadata.labels)
        and volume.class_name == claim.class_name
        and set(claim.spec.access_modes) <= set(volume.spec.access_modes)
    )


def volume_claim_name(pod_name: str, volume_name: str) -> str:
    """The claim kube-controller-manager makes for a pod's ephemeral volume."""
    return f"{pod_name}-{volume_name}"


def claim_names(pod: PodRecord) -> list[tuple[str, bool]]:
    """The pod's claims by name, each with whether it is an ephemeral volume's."""
    found = []
    for volume in pod.spec.volumes:
        if volume.persistent_volume_claim is not None:
            found.append((volume.persistent_volume_claim.claim_name, False))
        elif volume.ephemeral is not None:
            found.append((volume_claim_name(pod.metadata.name, volume.name), True))
    return found


def uses_claim(pod: PodRecord, claim: str) -> bool:
    """Whether one of the pod's volumes is the claim ``claim`` (of its namespace)."""
    return any(name == claim for name, _ in claim_names(pod))
