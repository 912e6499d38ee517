"""The scheduler's DRA watches, and the release of claims no pod uses any more.

Four informers keep the claim book (:class:`~gpupool.kube.scheduler.dra.claims.ClaimBook`) current:
ResourceClaims (their changes also move what the snapshot holds), ResourceClaimTemplates,
DeviceClasses and ResourceSlices. Every replica runs them, like the pod and node informers, so a
new leader starts from a full cache; it relists them with the others before its first cycle,
since a claim allocated before a restart holds GPUs that must not be given again.

A claim that gpupool allocated and that no live pod reserves any more (its pods finished or were
deleted) is released by the leader (:func:`~gpupool.kube.scheduler.dra.claim_writes.release`); its
GPUs are free once the watch shows the cleared status, never before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import Informer
from gpupool.kube.client.informer_group import InformerGroup
from gpupool.kube.objects.dra.records import (
    API_PREFIX,
    CLASSES_PATH,
    SLICES_PATH,
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from gpupool.kube.scheduler.dra import claim_writes
from gpupool.kube.scheduler.dra.claims import gpupool_results
from gpupool.kube.scheduler.state import ClusterState

CLAIM_WATCHES = 4
"""Watches the DRA informers hold open (claims, templates, classes, slices): connections."""
CLAIMS_PATH = f"{API_PREFIX}/resourceclaims"
TEMPLATES_PATH = f"{API_PREFIX}/resourceclaimtemplates"


class ClaimInformers(InformerGroup):
    """The DRA informers of one replica.

    Args:
        api: The API port.
        state: The cache whose claim book they fill.
        changed: Called after every change (wakes the loop while leading).
    """

    def __init__(self, api: KubeAPI, state: ClusterState, changed: Callable[[], None]) -> None:
        self.api = api
        self.state = state
        super().__init__(changed)
        book = state.claims
        self.claims = Informer(api, CLAIMS_PATH, ResourceClaim, self._on_claim)
        self.templates = Informer(
            api, TEMPLATES_PATH, ResourceClaimTemplate, self._wrap(book.on_template)
        )
        self.classes = Informer(api, CLASSES_PATH, DeviceClass, self._wrap(book.on_class))
        self.slices = Informer(api, SLICES_PATH, ResourceSlice, self._wrap(book.on_slice))
        self.releasing: dict[str, asyncio.Task[None]] = {}

    def informers(self) -> tuple[Informer[Any], ...]:
        """The DRA informers."""
        informers = (self.claims, self.templates, self.classes, self.slices)
        assert len(informers) == CLAIM_WATCHES
        return informers

    def _on_claim(self, kind: str, claim: ResourceClaim) -> None:
        self.state.on_claim(kind, claim)
        self.changed()

    def cancel_all(self) -> None:
        """Stop releases in flight (leadership lost)."""
        for task in list(self.releasing.values()):
            task.cancel()

    def release_unused(self) -> None:
        """Start releasing every gpupool allocation that no live pod reserves.

        A deleted claim whose allocation is already cleared but which still carries the delete
        protection (the write removing it failed, or another writer cleared the allocation)
        loses the protection, as kube-controller-manager's resourceclaim controller would do.
        """
        state = self.state
        book = state.claims
        in_use = {bind.plan.claim.metadata.uid for bind in state.claim_binds.values()}
        for uid, claim in book.by_uid.items():
            if uid in self.releasing or uid in in_use or uid in book.assumed:
                continue
            if any(consumer.uid in state.pods for consumer in claim.status.reserved_for):
                continue
            if gpupool_results(claim):
                write = claim_writes.release(self.api, claim)
            elif _protected_leftover(claim):
                write = claim_writes.unprotect(self.api, claim)
            else:
                continue
            self.releasing[uid] = asyncio.create_task(self._release(uid, write))

    async def _release(self, uid: str, write: Awaitable[bool]) -> None:
        try:
            await write
        finally:
            self.releasing.pop(uid, None)


def _protected_leftover(claim: ResourceClaim) -> bool:
    """A deleted claim with no allocation still held back by the delete protection."""
    meta = claim.metadata
    return (
        meta.deletion_timestamp is not None
        and claim.status.allocation is None
        and claim_writes.DELETE_PROTECTION in meta.finalizers
    )
