"""What the scheduler writes into ResourceClaims: the allocation, the pods reserving it, release.

A claim pod is bound only after its claim says it may be used there (the kubelet refuses a pod
whose claims are not allocated and reserved for it), in one status write with the claim's
``resourceVersion`` as a precondition, so a claim changed meanwhile (by another scheduler, the
claim controller, a deletion) fails the write instead of being overwritten: ``allocation``
(gpupool's device results, the node selector), ``reservedFor`` the pod and, in ``devices``, the
signed record (:mod:`gpupool.kube.objects.dra.claim_record`). One write, so the agent, which
prepares a claim only when record and results agree, never sees one without the other, and a
claim pod costs two writes (this and its Binding) where it cost three while the record was an
annotation.
A pod joining an allocated claim writes only ``reservedFor`` with itself appended.

Before the allocation, the claim gets kube-scheduler's ``resource.kubernetes.io/delete-protection``
finalizer (:data:`DELETE_PROTECTION`, in a metadata write of its own: a status write cannot
change metadata), as kube-scheduler sets it when it allocates: a claim deleted under a running
pod stays (Terminating) and keeps its devices charged until no pod uses it, instead of vanishing
and letting the scheduler give its GPUs to another pod while the first still holds them.

A claim reserved by no live pod is released by the scheduler (:func:`release`): ``reservedFor``,
``allocation`` and the record cleared in one write, then the finalizer removed, which lets a
deleted claim go. kube-controller-manager's resourceclaim controller does the same for any claim
carrying the finalizer (whichever driver), but a cluster may run without it, so the scheduler does
it too; both only ever remove what is no longer used. A deleted claim whose allocation someone
else cleared loses the finalizer here as well (:func:`unprotect`), as the controller would do.
"""

from __future__ import annotations

import logging

import msgspec

from gpupool.kube.client.api import MERGE_PATCH, STRATEGIC_PATCH, ApiError, JsonObject, KubeAPI
from gpupool.kube.objects.dra.claim_record import device_status, gpupool_results
from gpupool.kube.objects.dra.records import (
    API_PREFIX,
    AllocationResult,
    ConsumerReference,
    ResourceClaim,
)
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.writes import BindOutcome, BindResult, classify

log = logging.getLogger(__name__)
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""The finalizer kube-scheduler puts on a claim it allocates (k8s.io/api/resource/v1)."""


def claim_path(claim: ResourceClaim) -> str:
    """The claim's API path."""
    meta = claim.metadata
    return f"{API_PREFIX}/namespaces/{meta.namespace}/resourceclaims/{meta.name}"


def _failed(claim: ResourceClaim, error: ApiError) -> BindResult:
    """A failed claim write as a failed bind.

    A conflict or a server error is retried after a backoff (the watch then shows what the claim
    holds); anything else refuses the pod.
    """
    result = classify(error)
    message = f"ResourceClaim {claim.key}: {result.message}"
    if result.outcome in (BindOutcome.CONFLICT, BindOutcome.UNKNOWN):
        return BindResult(BindOutcome.CONFLICT, result.reason, message)
    reason = "invalid" if result.outcome is BindOutcome.GONE else result.reason
    return BindResult(BindOutcome.REFUSED, reason, message)


def _consumer(pod: PodRecord) -> JsonObject:
    return {"resource": "pods", "name": pod.metadata.name, "uid": pod.metadata.uid}


def _node_selector(node: str) -> JsonObject:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeSelectorTerms": [term]}


async def allocate(
    api: KubeAPI,
    claim: ResourceClaim,
    pod: PodRecord,
    allocation: AllocationResult,
    record: str,
) -> ResourceClaim | BindResult:
    """Write ``allocation`` and its record (JSON text) into ``claim``, reserved for ``pod``.

    Returns:
        The claim as stored (for the cache at once: see :meth:`Binder._write_claim`), or why
        not.
    """
    node = allocation.devices.results[0].pool
    status = msgspec.to_builtins(allocation)
    status["nodeSelector"] = _node_selector(node)
    try:
        version = await _protect(api, claim)
    except ApiError as error:
        log.warning("protecting claim %s for %s: %s", claim.key, pod.key, error)
        return _failed(claim, error)
    body = {
        "metadata": {"resourceVersion": version},
        "status": {
            "allocation": status,
            "reservedFor": [_consumer(pod)],
            "devices": device_status(allocation, record),
        },
    }
    try:
        stored = await api.request(
            "PATCH", f"{claim_path(claim)}/status", body=body, content_type=MERGE_PATCH
        )
    except ApiError as error:
        log.warning("allocating claim %s for %s: %s", claim.key, pod.key, error)
        return _failed(claim, error)
    return msgspec.json.decode(stored, type=ResourceClaim)


async def _protect(api: KubeAPI, claim: ResourceClaim) -> str:
    """Add :data:`DELETE_PROTECTION` to ``claim`` (as cached); its new ``resourceVersion``.

    The cached ``resourceVersion`` is a precondition, so the allocation that follows, written
    with the version returned, still fails on any change the cache has not seen.
    """
    meta = claim.metadata
    if DELETE_PROTECTION in meta.finalizers:
        return meta.resource_version
    body = {
        "metadata": {"resourceVersion": meta.resource_version, "finalizers": [DELETE_PROTECTION]}
    }
    # a strategic merge patch adds to the list (finalizers merge) instead of replacing it
    stored = await api.request("PATCH", claim_path(claim), body=body, content_type=STRATEGIC_PATCH)
    return msgspec.json.decode(stored, type=ResourceClaim).metadata.resource_version


async def unprotect(api: KubeAPI, claim: ResourceClaim) -> bool:
    """Remove :data:`DELETE_PROTECTION` from a claim no pod uses (True: done or gone)."""
    body = {
        "metadata": {
            "resourceVersion": claim.metadata.resource_version,
            "$deleteFromPrimitiveList/finalizers": [DELETE_PROTECTION],
        }
    }
    try:
        await api.request("PATCH", claim_path(claim), body=body, content_type=STRATEGIC_PATCH)
    except ApiError as error:
        if error.status != 404:
            log.warning("removing the delete protection of claim %s: %s", claim.key, error)
        return error.status == 404
    return True


async def reserve(api: KubeAPI, claim: ResourceClaim, pod: PodRecord) -> ResourceClaim | BindResult:
    """Add ``pod`` to an allocated claim's ``reservedFor``; the claim as stored, or why not.

    The claim is read afresh: another pod's allocation of it may have landed a moment ago.
    """
    path = claim_path(claim)
    try:
        current = msgspec.json.decode(await api.request("GET", path), type=ResourceClaim)
        if not gpupool_results(current.status.allocation):
            message = f"ResourceClaim {claim.key}: not allocated yet"
            return BindResult(BindOutcome.CONFLICT, "conflict", message)
        reserved = current.status.reserved_for
        if any(c.uid == pod.metadata.uid for c in reserved):
            return current
        body = {
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "status": {"reservedFor": [*(_reference(c) for c in reserved), _consumer(pod)]},
        }
        stored = await api.request("PATCH", f"{path}/status", body=body, content_type=MERGE_PATCH)
    except ApiError as error:
        log.warning("reserving claim %s for %s: %s", claim.key, pod.key, error)
        return _failed(claim, error)
    return msgspec.json.decode(stored, type=ResourceClaim)


def _reference(consumer: ConsumerReference) -> JsonObject:
    reference: JsonObject = {"resource": consumer.resource, "name": consumer.name}
    reference["uid"] = consumer.uid
    if consumer.api_group:
        reference["apiGroup"] = consumer.api_group
    return reference


async def release(api: KubeAPI, claim: ResourceClaim) -> bool:
    """Clear a claim nobody uses: reservedFor, allocation, record, protection (True: done)."""
    try:
        stored = await api.request(
            "PATCH",
            f"{claim_path(claim)}/status",
            body={
                "metadata": {"resourceVersion": claim.metadata.resource_version},
                "status": {"allocation": None, "reservedFor": None, "devices": None},
            },
            content_type=MERGE_PATCH,
        )
    except ApiError as error:
        if error.status != 404:
            log.warning("releasing claim %s: %s", claim.key, error)
        return error.status == 404
    released = msgspec.json.decode(stored, type=ResourceClaim)
    if DELETE_PROTECTION not in released.metadata.finalizers:
        return True
    return await unprotect(api, released)
