"""The scheduler's storage watches: claims, volumes, classes, CSINodes and VolumeAttachments.

Every replica runs them, like the pod and node informers, so a new leader starts from a full
cache (it relists them with the others before its first cycle). A change moves the capacity
epoch: a pod parked because no node suits its volumes is tried again when a volume appears or a
claim is bound, as kube-scheduler's VolumeBinding queueing hints do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import Informer
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

Record = TypeVar("Record")
VOLUME_WATCHES = 5
"""Watches the storage informers hold open (claims, volumes, classes, CSINodes, attachments)."""


class VolumeInformers:
    """The storage informers of one replica.

    Args:
        api: The API port.
        book: The cache they fill.
        changed: Called after every change (moves the epoch and wakes the loop while leading).
    """

    def __init__(self, api: KubeAPI, book: VolumeBook, changed: Callable[[], None]) -> None:
        self.changed = changed
        self.claims = Informer(api, PVC_PATH, PersistentVolumeClaim, self._wrap(book.on_claim))
        self.volumes = Informer(api, PV_PATH, PersistentVolume, self._wrap(book.on_volume))
        self.classes = Informer(api, STORAGE_CLASSES_PATH, StorageClass, self._wrap(book.on_class))
        self.csi_nodes = Informer(api, CSI_NODES_PATH, CSINode, self._wrap(book.on_csi_node))
        self.attachments = Informer(
            api, ATTACHMENTS_PATH, VolumeAttachment, self._wrap(book.on_attachment)
        )

    def _all(self) -> tuple[Informer[Any], ...]:
        informers = (self.claims, self.volumes, self.classes, self.csi_nodes, self.attachments)
        assert len(informers) == VOLUME_WATCHES
        return informers

    def _wrap(self, handler: Callable[[str, Record], None]) -> Callable[[str, Record], None]:
        def handle(kind: str, record: Record) -> None:
            handler(kind, record)
            self.changed()

        return handle

    @property
    def synced(self) -> bool:
        """Whether every storage informer has completed its first list."""
        return all(informer.synced.is_set() for informer in self._all())

    async def run(self) -> None:
        """List and watch until cancelled."""
        await asyncio.gather(*(informer.run() for informer in self._all()))

    async def resync(self) -> None:
        """Relist them all (a new term as leader)."""
        await asyncio.gather(*(informer.resync() for informer in self._all()))
