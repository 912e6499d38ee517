"""kube-scheduler's NodeVolumeLimits for CSI: no node gets more volumes of a driver than it takes.

A node's CSINode says, per CSI driver, how many volumes can be attached to it (cloud disks:
a few dozen per instance). A pod's CSI volumes (the driver and handle of each bound claim's
volume; for an unbound claim, its class's provisioner and the claim) that are not attached there
yet count against the limit with what the node's pods and VolumeAttachments already hold, as
kube's CSILimits does (in-tree volumes migrated to CSI are not translated, and not counted).

Two uses: :func:`limit_group`, the nodes a pending pod's new volumes would overfill, as a group
the core's filter counts under kube's reason; and :func:`volume_conflict`, the same question
(and ReadWriteOncePod's) for the one node a decision chose, asked when the decision is assumed,
so two pods of one cycle cannot take a node's last attach slot, or one claim, together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from gpupool.core.constraints import NODE_NAME_FIELD, RequiredTerms, Requirement, SelectorTerm
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.volumes import READ_WRITE_ONCE_POD, PersistentVolumeClaim, claim_names

if TYPE_CHECKING:
    from gpupool.kube.scheduler.volume_binding import VolumeBook

REASON_MAX_VOLUME_COUNT = "node(s) exceed max volume count"
REASON_READ_WRITE_ONCE_POD = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)


class PlacedPods(Protocol):
    """The pods that are bound to a node or being bound (the scheduler's cache)."""

    def in_use(self, namespace: str, claim: str, uid: str) -> bool:
        """Whether a pod other than ``uid`` bound or being bound uses the claim."""

    def pods_on(self, node: str) -> Iterable[PodRecord]:
        """The pods bound, or being bound, to ``node``."""


def _driver_of(claim: PersistentVolumeClaim, book: VolumeBook) -> tuple[str, str]:
    """(driver, handle) the claim's volume counts under; ("", "") when not a CSI volume."""
    volume = book.volumes.get(claim.spec.volume_name) if claim.spec.volume_name else None
    if volume is not None:
        csi = volume.spec.csi
        return (csi.driver, csi.volume_handle) if csi is not None else ("", "")
    storage_class = book.classes.get(claim.class_name) if claim.class_name else None
    if storage_class is None:
        return "", ""
    namespace, name = claim.key
    return storage_class.provisioner, f"unbound-{namespace}/{name}"


def csi_volumes(pod: PodRecord, book: VolumeBook) -> dict[str, str]:
    """The pod's CSI volumes: unique name (``driver/handle``) to driver."""
    found = {}
    for name, _ in claim_names(pod):
        claim = book.claims.get((pod.metadata.namespace, name))
        if claim is None:
            continue  # a pending pod's missing claim keeps it waiting before this is asked
        driver, handle = _driver_of(claim, book)
        if driver and handle:
            found[f"{driver}/{handle}"] = driver
    return found


def _exceeds(
    node: str,
    new: dict[str, str],
    limits: dict[str, int],
    pods: Iterable[PodRecord],
    book: VolumeBook,
) -> bool:
    held: dict[str, str] = {}
    for pod in pods:
        held.update(csi_volumes(pod, book))
    counts = Counter(held.values())
    for attachment in book.attachments.values():
        name = attachment.spec.source.persistent_volume_name
        volume = book.volumes.get(name) if name else None
        if attachment.spec.node_name != node or volume is None or volume.spec.csi is None:
            continue
        csi = volume.spec.csi
        if f"{csi.driver}/{csi.volume_handle}" not in held:
            counts[csi.driver] += 1
    wanted = Counter(driver for unique, driver in new.items() if unique not in held)
    return any(
        driver in limits and counts[driver] + count > limits[driver]
        for driver, count in wanted.items()
    )


def limit_group(pod: PodRecord, book: VolumeBook, placed: PlacedPods) -> RequiredTerms | None:
    """The nodes the pod's new CSI volumes would overfill, as a group (None: none would)."""
    new = csi_volumes(pod, book)
    if not new:
        return None
    over = sorted(
        node
        for node, csi_node in book.csi_nodes.items()
        if (limits := csi_node.limits) and _exceeds(node, new, limits, placed.pods_on(node), book)
    )
    if not over:
        return None
    term = SelectorTerm((), (Requirement(NODE_NAME_FIELD, "NotIn", tuple(over)),))
    return RequiredTerms(REASON_MAX_VOLUME_COUNT, (term,))


def volume_conflict(pod: PodRecord, node: str, book: VolumeBook, placed: PlacedPods) -> str | None:
    """Why ``pod`` cannot have its volumes on ``node`` given the pods placed so far, or None."""
    namespace, uid = pod.metadata.namespace, pod.metadata.uid
    for name, _ in claim_names(pod):
        claim = book.claims.get((namespace, name))
        rwop = claim is not None and READ_WRITE_ONCE_POD in claim.spec.access_modes
        if rwop and placed.in_use(namespace, name, uid):
            return REASON_READ_WRITE_ONCE_POD
    csi_node = book.csi_nodes.get(node)
    limits = csi_node.limits if csi_node is not None else {}
    new = csi_volumes(pod, book) if limits else {}
    if new and _exceeds(node, new, limits, placed.pods_on(node), book):
        return REASON_MAX_VOLUME_COUNT
    return None
