"""What a pod's volumes require of its node, and which volumes to bind once a node is chosen.

kube-scheduler's VolumeBinding, VolumeZone, VolumeRestrictions (ReadWriteOncePod) and
NodeVolumeLimits (:mod:`gpupool.kube.scheduler.volume_limits`), in two halves:

* **Before deciding** (:meth:`VolumeBook.requirements`): a pod whose claim does not exist, is
  being deleted or lost, or is unbound with an Immediate class (or none) waits with kube's
  words (:class:`VolumesNotReadyError`); otherwise each claim becomes a group of node-affinity
  terms the core ANDs with the pod's own (:class:`~gpupool.core.constraints.RequiredTerms`): a bound
  claim's volume's node affinity and zone; a WaitForFirstConsumer claim's, the union of where a
  matching volume lives and where its class may provision; a claim the volume controller
  already asked to be provisioned (``volume.kubernetes.io/selected-node``), that node only. So
  the filter, preemption's victim search, backfill and ``explain`` all see them, with kube's
  reasons.
* **Once a node is chosen** (:meth:`VolumeBook.plan`): kube's per-node match, the smallest
  volume that fits each unbound claim (a volume already reserved for the claim first), each
  volume used once, else provisioning on the node. The binder carries it out
  (:mod:`gpupool.kube.scheduler.volume_writes`).

Nothing here trusts a tenant more than kube-scheduler does: a tenant's claim can only narrow
where its own pod goes, and an ephemeral volume's claim must be owned by its pod.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from gpupool.core.constraints import (
    NODE_NAME_FIELD,
    NodeConstraints,
    RequiredTerms,
    Requirement,
    SelectorTerm,
)
from gpupool.core.model import PodSpec
from gpupool.kube.client.informer import DELETED
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import InvalidObjectError
from gpupool.kube.objects.volumes import (
    ANNOTATION_SELECTED_NODE,
    PHASE_LOST,
    READ_WRITE_ONCE_POD,
    CSINode,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    VolumeAttachment,
    VolumeTermsError,
    claim_names,
    claim_storage,
    matches,
    topology_terms,
    volume_storage,
    volume_terms,
    zone_terms,
)
from gpupool.kube.scheduler.volume_limits import (
    REASON_READ_WRITE_ONCE_POD,
    PlacedPods,
    limit_group,
)

REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
REASON_ZONE = "node(s) had no available volume zone"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


class VolumesNotReadyError(Exception):
    """The pod cannot be placed on any node until its claims change; the message is kube's."""


@dataclass(frozen=True, slots=True)
class VolumePlan:
    """What must be written before a pod is bound to its node (kube's PreBind).

    Attributes:
        node: The chosen node.
        bindings: Volumes to reserve for claims (their ``claimRef``), the PV controller binds.
        provisions: Claims to annotate with the node (unless they are), for their provisioner.
    """

    node: str
    bindings: tuple[tuple[PersistentVolume, PersistentVolumeClaim], ...] = ()
    provisions: tuple[PersistentVolumeClaim, ...] = ()

    @property
    def claims(self) -> tuple[PersistentVolumeClaim, ...]:
        """Every claim the plan waits on."""
        return (*(claim for _, claim in self.bindings), *self.provisions)


class Pulse:
    """Wakes every waiter at each change (the PreBind wait for a claim to be bound)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        """Wake every current waiter."""
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        """Until the next change, or ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)


def _node_term(node: str) -> SelectorTerm:
    return SelectorTerm((), (Requirement(NODE_NAME_FIELD, "In", (node,)),))


@dataclass
class VolumeBook:
    """The claims, volumes and classes the scheduler reads, kept by its informers.

    Attributes:
        claims: PersistentVolumeClaims by (namespace, name).
        volumes: PersistentVolumes by name.
        classes: StorageClasses by name.
        csi_nodes: CSINodes (attach limits) by node.
        attachments: VolumeAttachments by name.
        pulse: Fired on every change.
    """

    claims: dict[tuple[str, str], PersistentVolumeClaim] = field(default_factory=dict)
    volumes: dict[str, PersistentVolume] = field(default_factory=dict)
    classes: dict[str, StorageClass] = field(default_factory=dict)
    csi_nodes: dict[str, CSINode] = field(default_factory=dict)
    attachments: dict[str, VolumeAttachment] = field(default_factory=dict)
    pulse: Pulse = field(default_factory=Pulse)

    def _changed(self) -> None:
        self.pulse.fire()

    def on_claim(self, kind: str, claim: PersistentVolumeClaim) -> None:
        """Informer handler for claims."""
        if kind == DELETED:
            self.claims.pop(claim.key, None)
        elif _newer(claim.metadata.resource_version, self.claims.get(claim.key)):
            self.claims[claim.key] = claim
        self._changed()

    def on_volume(self, kind: str, volume: PersistentVolume) -> None:
        """Informer handler for volumes (and the binder's own writes, seen first)."""
        if kind == DELETED:
            self.volumes.pop(volume.key, None)
        elif _newer(volume.metadata.resource_version, self.volumes.get(volume.key)):
            self.volumes[volume.key] = volume
        self._changed()

    def on_class(self, kind: str, storage_class: StorageClass) -> None:
        """Informer handler for StorageClasses."""
        if kind == DELETED:
            self.classes.pop(storage_class.key, None)
        else:
            self.classes[storage_class.key] = storage_class
        self._changed()

    def on_csi_node(self, kind: str, csi_node: CSINode) -> None:
        """Informer handler for CSINodes."""
        if kind == DELETED:
            self.csi_nodes.pop(csi_node.key, None)
        else:
            self.csi_nodes[csi_node.key] = csi_node
        self._changed()

    def on_attachment(self, kind: str, attachment: VolumeAttachment) -> None:
        """Informer handler for VolumeAttachments."""
        if kind == DELETED:
            self.attachments.pop(attachment.key, None)
        else:
            self.attachments[attachment.key] = attachment
        self._changed()

    # -- before deciding ---------------------------------------------------------------------

    def pod_claims(self, pod: PodRecord) -> list[PersistentVolumeClaim]:
        """The pod's claims, in volume order (kube's PreFilter checks).

        Raises:
            VolumesNotReadyError: A claim is missing, being deleted, lost, or not the pod's own.
        """
        namespace, found = pod.metadata.namespace, []
        for name, ephemeral in claim_names(pod):
            claim = self.claims.get((namespace, name))
            if claim is None:
                if ephemeral:
                    raise VolumesNotReadyError(
                        "waiting for ephemeral volume controller to create the "
                        f'persistentvolumeclaim "{name}"'
                    )
                raise VolumesNotReadyError(f'persistentvolumeclaim "{name}" not found')
            if claim.status.phase == PHASE_LOST:
                raise VolumesNotReadyError(
                    f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
                    f'"{claim.spec.volume_name}"'
                )
            if claim.metadata.deletion_timestamp is not None:
                raise VolumesNotReadyError(f'persistentvolumeclaim "{name}" is being deleted')
            if ephemeral and not any(
                o.controller and o.uid == pod.metadata.uid for o in claim.metadata.owner_references
            ):
                raise VolumesNotReadyError(
                    f"PVC {namespace}/{name} was not created for pod {pod.key} (pod is not owner)"
                )
            found.append(claim)
        return found

    def delays_binding(self, claim: PersistentVolumeClaim) -> bool:
        """Whether the unbound claim waits for its first pod (else it is Immediate)."""
        storage_class = self.classes.get(claim.class_name) if claim.class_name else None
        return (
            storage_class is not None
            and storage_class.delays_binding
            and not claim.spec.volume_name
        )

    def requirements(self, pod: PodRecord, placed: PlacedPods) -> tuple[RequiredTerms, ...]:
        """What the pod's claims require of its node, as groups of terms.

        Raises:
            VolumesNotReadyError: The pod can go nowhere until a claim changes.
            VolumeTermsError: A volume's or class's terms cannot be read.
        """
        claims = self.pod_claims(pod)
        groups: list[RequiredTerms] = []
        for claim in claims:
            if READ_WRITE_ONCE_POD in claim.spec.access_modes and placed.in_use(
                claim.metadata.namespace, claim.metadata.name, pod.metadata.uid
            ):
                groups.append(RequiredTerms(REASON_READ_WRITE_ONCE_POD))
        unbound = [claim for claim in claims if not claim.fully_bound]
        if any(not self.delays_binding(claim) for claim in unbound):
            raise VolumesNotReadyError(UNBOUND_IMMEDIATE)
        for claim in claims:
            if claim.fully_bound:
                groups.extend(self._bound(claim))
            else:
                group = self._unbound(claim)
                if group is not None:
                    groups.append(group)
        limits = limit_group(pod, self, placed)
        if limits is not None:
            groups.append(limits)
        return tuple(groups)

    def _bound(self, claim: PersistentVolumeClaim) -> list[RequiredTerms]:
        volume = self.volumes.get(claim.spec.volume_name)
        if volume is None:
            return [RequiredTerms(REASON_PV_NOT_EXIST)]
        groups = [RequiredTerms(REASON_ZONE, terms) for terms in zone_terms(volume)]
        terms = volume_terms(volume)
        if terms is not None:
            groups.append(RequiredTerms(REASON_NODE_CONFLICT, terms))
        return groups

    def _unbound(self, claim: PersistentVolumeClaim) -> RequiredTerms | None:
        """Where the WaitForFirstConsumer claim can be bound or provisioned (None: anywhere)."""
        selected = claim.metadata.annotations.get(ANNOTATION_SELECTED_NODE)
        if selected is not None:
            return RequiredTerms(REASON_BIND_CONFLICT, (_node_term(selected),))
        terms: list[SelectorTerm] = []
        for volume in self._candidates(claim):
            reach = volume_terms(volume)
            if reach is None:
                return None
            terms.extend(reach)
        storage_class = self.classes[claim.class_name]
        if storage_class.provisions:
            topology = topology_terms(storage_class)
            if topology is None:
                return None
            terms.extend(topology)
        return RequiredTerms(REASON_BIND_CONFLICT, tuple(dict.fromkeys(terms)))

    def _candidates(self, claim: PersistentVolumeClaim) -> Iterable[PersistentVolume]:
        return (v for v in self.volumes.values() if matches(v, claim))

    # -- once a node is chosen ---------------------------------------------------------------

    def plan(self, pod: PodRecord, node: str, labels: dict[str, str]) -> VolumePlan:
        """What to write for the pod's unbound claims to be bound on ``node`` (kube's match).

        Raises:
            VolumesNotReadyError: The node can no longer serve them (a volume was taken meanwhile).
            VolumeTermsError: A volume's or class's terms cannot be read.
        """
        unbound = [claim for claim in self.pod_claims(pod) if not claim.fully_bound]
        if any(not self.delays_binding(claim) for claim in unbound):
            raise VolumesNotReadyError(UNBOUND_IMMEDIATE)
        chosen: set[str] = set()
        bindings, provisions = [], []
        for claim in sorted(unbound, key=claim_storage):
            selected = claim.metadata.annotations.get(ANNOTATION_SELECTED_NODE)
            if selected is None:
                volume = self._best(claim, node, labels, chosen)
                if volume is not None:
                    chosen.add(volume.key)
                    bindings.append((volume, claim))
                    continue
            if selected not in (None, node) or not self._provisions_on(claim, node, labels):
                raise VolumesNotReadyError(f"node {node}: {REASON_BIND_CONFLICT}")
            provisions.append(claim)  # already selected for this node: waited on all the same
        return VolumePlan(node, tuple(bindings), tuple(provisions))

    def _best(
        self, claim: PersistentVolumeClaim, node: str, labels: dict[str, str], chosen: set[str]
    ) -> PersistentVolume | None:
        best: PersistentVolume | None = None
        for volume in self._candidates(claim):
            reach = volume_terms(volume)
            if volume.key in chosen or (
                reach is not None and not any(t.holds(labels, node) for t in reach)
            ):
                continue
            if volume.reserved_for(claim):
                return volume
            if best is None or volume_storage(volume) < volume_storage(best):
                best = volume
        return best

    def _provisions_on(
        self, claim: PersistentVolumeClaim, node: str, labels: dict[str, str]
    ) -> bool:
        storage_class = self.classes.get(claim.class_name)
        if storage_class is None or not storage_class.provisions:
            return False
        topology = topology_terms(storage_class)
        return topology is None or any(t.holds(labels, node) for t in topology)


def has_claims(pod: PodRecord) -> bool:
    """Whether a volume of the pod is backed by a claim (most pods: none, and a fast answer)."""
    return any(v.persistent_volume_claim or v.ephemeral is not None for v in pod.spec.volumes)


def with_groups(spec: PodSpec, groups: tuple[RequiredTerms, ...]) -> PodSpec:
    """``spec`` with ``groups`` required of its node besides its own constraints."""
    if not groups:
        return spec
    constraints = spec.constraints or NodeConstraints()
    return replace(spec, constraints=replace(constraints, required=constraints.required + groups))


def with_volumes(spec: PodSpec, pod: PodRecord, book: VolumeBook, placed: PlacedPods) -> PodSpec:
    """The pod's request with what its volumes require of its node added to its constraints.

    Raises:
        VolumesNotReadyError: The pod can go nowhere until a claim changes.
        InvalidObjectError: A volume's or class's node terms cannot be read.
    """
    if not has_claims(pod):
        return spec
    try:
        return with_groups(spec, book.requirements(pod, placed))
    except VolumeTermsError as error:
        raise InvalidObjectError(f"pod {pod.key}", "spec.volumes", str(error)) from None


def volume_groups(
    pod: PodRecord, book: VolumeBook, placed: PlacedPods
) -> tuple[RequiredTerms, ...]:
    """What the pod's volumes require of its node, for a reader (``explain``) that must not raise.

    A pod that can go nowhere yet gets one group no node meets, under the reason it waits for.
    """
    if not has_claims(pod):
        return ()
    try:
        return book.requirements(pod, placed)
    except (VolumesNotReadyError, VolumeTermsError) as error:
        return (RequiredTerms(str(error)),)


def _newer(version: str, known: PersistentVolumeClaim | PersistentVolume | None) -> bool:
    """Whether an object at ``version`` replaces ``known`` (a write's answer may come first)."""
    if known is None:
        return True
    try:
        return int(version) >= int(known.metadata.resource_version)
    except ValueError:
        return True
