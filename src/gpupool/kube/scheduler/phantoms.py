"""Phantom allocations: shares the scheduler's cache counts for pods that no longer hold them.

The cache follows the pod watch; a missed deletion, a pod finished while the watch was down or
a pod rebound by someone else would leave GPUs counted as taken that nobody uses, for as long
as the scheduler runs. Each governance pass compares every pod's allocation in the cache with a
fresh LIST from the API server (:func:`gpupool.governance.rules.phantoms`), confirms each
candidate with a direct read of the pod (a pod created after the LIST was taken must never be
taken for a phantom), gives the watch a moment to deliver the news itself (a pod evicted a
second ago is not a phantom), and releases the confirmed ones in the cache through its own
informer handler, as if the missed event had arrived.

A DRA claim's holding (``claim:<uid>``) is no pod's and is left out: taken for a deleted pod,
it freed an allocated claim's GPUs in the cache on every pass. The scheduler itself releases
claims that no live pod reserves.
"""

from __future__ import annotations

import asyncio
import logging

from gpupool.governance.decisions import Release
from gpupool.governance.rules import PodPlacement, phantoms
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.client.informer import ADDED, DELETED
from gpupool.kube.objects.records import ObjectMeta, PodRecord
from gpupool.kube.scheduler.dra.claims import CLAIM_KEY
from gpupool.kube.scheduler.state import ClusterState

log = logging.getLogger(__name__)

FINISHED = ("Succeeded", "Failed")
WATCH_SETTLE = 2.0
"""Seconds a confirmed candidate is given for its watch event to arrive before it is released."""


async def find_phantoms(
    api: KubeAPI, state: ClusterState, settle: float = WATCH_SETTLE
) -> list[tuple[Release, PodRecord]]:
    """Confirmed phantoms, each with the pod record the cache holds (or a bare one).

    Args:
        api: The API server.
        state: The scheduler's cache.
        settle: Seconds to give the watch to deliver what a candidate's direct read showed
            (a pod deleted a moment ago is not a phantom, only news on its way).
    """
    snapshot = state.snapshot
    if snapshot is None or not snapshot.allocations:
        return []
    held = {  # a claim's holding is no pod's: the claim path releases claims nobody reserves
        uid: snapshot.node_names[alloc.node]
        for uid, alloc in snapshot.allocations.items()
        if not uid.startswith(CLAIM_KEY)
    }
    actual = {
        item["metadata"]["uid"]: PodPlacement(
            item["spec"].get("nodeName", ""), item.get("status", {}).get("phase") in FINISHED
        )
        for item in await api.list_items("/api/v1/pods")
    }
    confirmed = [
        (release, cached)
        for release in phantoms(held, actual, in_flight=set(state.assumed))
        if await _confirmed(api, release, cached := state.pods.get(release.pod_uid))
    ]
    if not confirmed:
        return []
    await asyncio.sleep(settle)
    state.sync()
    snapshot = state.snapshot
    return [
        (release, cached or PodRecord(metadata=ObjectMeta(uid=release.pod_uid)))
        for release, cached in confirmed
        if snapshot is not None
        and release.pod_uid in snapshot.allocations
        and state.pods.get(release.pod_uid) is cached
    ]


async def _confirmed(api: KubeAPI, release: Release, cached: PodRecord | None) -> bool:
    """Whether a direct read still shows the pod gone, finished or elsewhere."""
    if cached is None:
        return True  # the cache itself no longer has the pod: nothing can bring it back
    meta = cached.metadata
    try:
        current = await api.get(f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}")
    except ApiError as error:
        return error.status == 404
    if current["metadata"]["uid"] != meta.uid:
        return True
    if current.get("status", {}).get("phase") in FINISHED:
        return True
    return bool(current["spec"].get("nodeName", "") != release.values["held_on"])


def release_phantom(state: ClusterState, release: Release, pod: PodRecord) -> None:
    """Drop the phantom from the cache; a pod bound elsewhere is then re-read as it is now."""
    state.on_pod(DELETED, pod)
    state.sync()
    if release.values.get("why") == "moved" and pod.metadata.name:
        state.on_pod(ADDED, pod)  # held again from its record; its next watch event updates it
        state.sync()
    log.warning("released phantom allocation of %s: %s", release.pod_uid, release.message)
