"""The scheduler's storage watches: claims, volumes, classes, CSINodes and VolumeAttachments.

Every replica runs them, like the pod and node informers, so a new leader starts from a full
cache (it relists them with the others before its first cycle). A change moves the capacity
epoch: a pod parked because no node suits its volumes is tried again when a volume appears or a
claim is bound, as kube-scheduler's VolumeBinding queueing hints do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import Informer
from gpupool.kube.client.informer_group import InformerGroup
from gpupool.kube.objects.volumes import (
    ATTACHMENTS_PATH,
    CSI_NODES_PATH,
    PV_PATH,
    PVC_PATH,
    STORAGE_CLASSES_PATH,
    CSINode,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    VolumeAttachment,
)
from gpupool.kube.scheduler.volume_binding import VolumeBook

VOLUME_WATCHES = 5
"""Watches the storage informers hold open (claims, volumes, classes, CSINodes, attachments)."""


class VolumeInformers(InformerGroup):
    """The storage informers of one replica.

    Args:
        api: The API port.
        book: The cache they fill.
        changed: Called after every change (moves the epoch and wakes the loop while leading).
    """

    def __init__(self, api: KubeAPI, book: VolumeBook, changed: Callable[[], None]) -> None:
        super().__init__(changed)
        self.claims = Informer(api, PVC_PATH, PersistentVolumeClaim, self._wrap(book.on_claim))
        self.volumes = Informer(api, PV_PATH, PersistentVolume, self._wrap(book.on_volume))
        self.classes = Informer(api, STORAGE_CLASSES_PATH, StorageClass, self._wrap(book.on_class))
        self.csi_nodes = Informer(api, CSI_NODES_PATH, CSINode, self._wrap(book.on_csi_node))
        self.attachments = Informer(
            api, ATTACHMENTS_PATH, VolumeAttachment, self._wrap(book.on_attachment)
        )

    def informers(self) -> tuple[Informer[Any], ...]:
        """The storage informers."""
        informers = (self.claims, self.volumes, self.classes, self.csi_nodes, self.attachments)
        assert len(informers) == VOLUME_WATCHES
        return informers
