"""The claim allocation record: gpupool's scheduler's signed word on a claim's allocation.

``status.allocation`` of a ResourceClaim says which devices it holds, and the node agent prepares
exactly those. But status can be written by anyone with ``resourceclaims/status`` rights (kube-
scheduler among them), so the allocation alone does not say that *gpupool* placed it, on its
ledger. The scheduler therefore writes, in the same update, the annotation
``gpupool.io/claim-allocation``: the node and the device results, signed for the claim's uid
with the scheduler's key and the claim domain (:data:`gpupool.kube.objects.signing.CLAIM_DOMAIN`),
so it can tell its own records from copies when it rebuilds after a restart. A
ValidatingAdmissionPolicy (``kube/install/manifests/claim-allocation-writers.yaml``) lets only the
scheduler's identities set or change the annotation and gpupool's results in the status, as the
pod policy does for ``gpupool.io/allocation``; the agent prepares a claim only when the record
exists, names its node, equals the status and verifies with the scheduler's public key
(:func:`gpupool.agent.dra_grants.claim_signature_problem`).
"""

from __future__ import annotations

import msgspec

from gpupool.kube.objects.dra import (
    ANNOTATION_CLAIM_ALLOCATION,
    DRIVER,
    AllocationResult,
    DeviceRequestAllocationResult,
)


class ClaimAllocationRecord(msgspec.Struct, frozen=True, rename="camel"):
    """The ``gpupool.io/claim-allocation`` annotation.

    Attributes:
        node: The node whose devices were allocated.
        results: gpupool's results, as in ``status.allocation.devices.results``.
        scheduler: The scheduler replica that decided.
        time: When (RFC 3339, UTC).
        sig: The signature over the claim's uid and the other fields.
    """

    node: str
    results: tuple[DeviceRequestAllocationResult, ...] = ()
    scheduler: str = ""
    time: str = ""
    sig: str = ""


class ClaimRecordError(ValueError):
    """The annotation cannot be read as a claim allocation record."""


def gpupool_results(
    allocation: AllocationResult | None,
) -> tuple[DeviceRequestAllocationResult, ...]:
    """The results of gpupool's driver in an allocation (none without one)."""
    if allocation is None:
        return ()
    return tuple(r for r in allocation.devices.results if r.driver == DRIVER)


def record_for(
    node: str, allocation: AllocationResult, scheduler: str, time: str
) -> ClaimAllocationRecord:
    """The (unsigned) record of ``allocation`` on ``node``."""
    return ClaimAllocationRecord(node, gpupool_results(allocation), scheduler, time)


def encode(record: ClaimAllocationRecord) -> str:
    """The annotation value (compact JSON)."""
    return msgspec.json.encode(record).decode()


def decode(text: str) -> ClaimAllocationRecord:
    """Read an annotation value.

    Raises:
        ClaimRecordError: It is not a claim allocation record.
    """
    try:
        return msgspec.json.decode(text, type=ClaimAllocationRecord)
    except msgspec.MsgspecError as error:
        raise ClaimRecordError(f"{ANNOTATION_CLAIM_ALLOCATION}: {error}") from None
