"""kube-scheduler's volume PreBind: reserve or provision the pod's volumes, then wait for them.

Once the engine has chosen a node for a pod with unbound WaitForFirstConsumer claims, the
binder asks :meth:`VolumeWriter.prebind` before it sends the Binding, as kube-scheduler's
VolumeBinding does:

* a claim matched to an existing volume: the volume's ``spec.claimRef`` names the claim (and
  ``pv.kubernetes.io/bound-by-controller``), written with the volume's resourceVersion so two
  pods can never reserve one volume; the PV controller then binds the pair;
* a claim to provision: ``volume.kubernetes.io/selected-node: <node>`` on the claim, which its
  provisioner acts on;
* then wait until every such claim is fully bound; a volume reserved for another claim, a
  claim whose selected node its provisioner took back, a deleted claim or the timeout fail the
  bind, and the pod is tried again (its assumed resources are released, as kube's Unreserve).

While it waits the pod says so (``PodScheduled=False``, written before the wait, so it can
never land after the Binding).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from gpupool.kube.client.api import MERGE_PATCH, STRATEGIC_PATCH, ApiError, KubeAPI
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.volumes import (
    ANNOTATION_BOUND_BY_CONTROLLER,
    ANNOTATION_SELECTED_NODE,
    PersistentVolume,
    PersistentVolumeClaim,
    VolumeTermsError,
)
from gpupool.kube.scheduler.volume_binding import (
    VolumeBook,
    VolumePlan,
    VolumesNotReadyError,
    has_claims,
)
from gpupool.kube.scheduler.writes import unschedulable_patch

log = logging.getLogger(__name__)

BIND_TIMEOUT = 600.0
"""Seconds to wait for the pod's claims to be bound (kube-scheduler's bindTimeoutSeconds)."""
RECHECK = 5.0
"""Seconds between looks at the claims when no watch event came (a missed event costs this)."""

NodeLabels = Callable[[str], dict[str, str] | None]
"""The labels of a node by name (None: not known)."""


@dataclass
class VolumeWriter:
    """Carries out a pod's :class:`~gpupool.kube.scheduler.volume_binding.VolumePlan`.

    Args:
        api: The API port.
        book: The volume cache (the writes' answers go into it at once).
        labels: A node's labels, to match volumes against.
        timeout: Seconds to wait for the claims to be bound.
    """

    api: KubeAPI
    book: VolumeBook
    labels: NodeLabels
    timeout: float = BIND_TIMEOUT

    def needed(self, pod: PodRecord) -> bool:
        """Whether the pod has claims that are not fully bound (its bind must wait for them)."""
        if not has_claims(pod):
            return False
        try:
            return any(not claim.fully_bound for claim in self.book.pod_claims(pod))
        except VolumesNotReadyError:
            return True  # prebind says why

    async def prebind(
        self, pod: PodRecord, node: str, wanted: Callable[[], bool] = lambda: True
    ) -> str | None:
        """Reserve or provision the pod's volumes on ``node`` and wait: None, or why it failed.

        ``wanted``: whether the bind is still wanted (the pod was not deleted meanwhile).
        """
        labels = self.labels(node)
        if labels is None:
            return f"node {node} is gone"
        try:
            plan = self.book.plan(pod, node, labels)
            for volume, claim in plan.bindings:
                await self._reserve(volume, claim)
            for claim in plan.provisions:
                await self._select(claim, node)
        except (VolumesNotReadyError, VolumeTermsError) as error:
            return f"binding volumes: {error}"
        except ApiError as error:
            return f"binding volumes: {error.message or error}"
        if not plan.claims:
            return None
        await self._tell_waiting(pod, plan)
        return await self._wait(plan, wanted)

    async def _reserve(self, volume: PersistentVolume, claim: PersistentVolumeClaim) -> None:
        meta = claim.metadata
        body = {
            "metadata": {
                "resourceVersion": volume.metadata.resource_version,
                "annotations": {ANNOTATION_BOUND_BY_CONTROLLER: "yes"},
            },
            "spec": {
                "claimRef": {
                    "kind": "PersistentVolumeClaim",
                    "apiVersion": "v1",
                    "namespace": meta.namespace,
                    "name": meta.name,
                    "uid": meta.uid,
                    "resourceVersion": meta.resource_version,
                }
            },
        }
        raw = await self.api.request(
            "PATCH", f"/api/v1/persistentvolumes/{volume.key}", body=body, content_type=MERGE_PATCH
        )
        self.book.on_volume("MODIFIED", msgspec.json.decode(raw, type=PersistentVolume))

    async def _select(self, claim: PersistentVolumeClaim, node: str) -> None:
        if claim.metadata.annotations.get(ANNOTATION_SELECTED_NODE) == node:
            return  # a retry: its provisioner has been told already
        namespace, name = claim.key
        body = {
            "metadata": {
                "resourceVersion": claim.metadata.resource_version,
                "annotations": {ANNOTATION_SELECTED_NODE: node},
            }
        }
        raw = await self.api.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}",
            body=body,
            content_type=MERGE_PATCH,
        )
        self.book.on_claim("MODIFIED", msgspec.json.decode(raw, type=PersistentVolumeClaim))

    async def _tell_waiting(self, pod: PodRecord, plan: VolumePlan) -> None:
        names = ", ".join(f'"{claim.metadata.name}"' for claim in plan.claims)
        message = f"waiting for persistentvolumeclaim(s) {names} to be bound on node {plan.node}"
        meta = pod.metadata
        try:
            await self.api.request(
                "PATCH",
                f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}/status",
                body=unschedulable_patch(message),
                content_type=STRATEGIC_PATCH,
            )
        except ApiError as error:  # telling is worth a request, never a failed bind
            log.warning("%s: %s", pod.key, error)

    async def _wait(self, plan: VolumePlan, wanted: Callable[[], bool]) -> str | None:
        deadline = time.monotonic() + self.timeout
        while True:
            failure, done = self._check(plan)
            if failure is not None or done:
                return failure
            if not wanted():
                return "binding volumes: the pod is no longer to be bound"
            left = deadline - time.monotonic()
            if left <= 0:
                names = ", ".join(claim.metadata.name for claim in plan.claims)
                return f"binding volumes: timed out waiting for claims {names} to be bound"
            await self.book.pulse.wait(min(left, RECHECK))

    def _check(self, plan: VolumePlan) -> tuple[str | None, bool]:
        """(why binding failed, or None; whether every claim is bound), kube's checkBindings."""
        book, done = self.book, True
        for volume, claim in plan.bindings:
            now = book.claims.get(claim.key)
            if now is None:
                return f'binding volumes: persistentvolumeclaim "{claim.metadata.name}" gone', False
            stored = book.volumes.get(volume.key)
            if stored is None or not stored.reserved_for(now):
                return (
                    f'binding volumes: persistentvolume "{volume.key}" was bound to another claim',
                    False,
                )
            done = done and now.fully_bound
        for claim in plan.provisions:
            now = book.claims.get(claim.key)
            if now is None:
                return f'binding volumes: persistentvolumeclaim "{claim.metadata.name}" gone', False
            if not now.fully_bound and ANNOTATION_SELECTED_NODE not in now.metadata.annotations:
                name = claim.metadata.name
                return f'binding volumes: selectedNode annotation reset for PVC "{name}"', False
            done = done and now.fully_bound
        return None, done
