"""The claim allocation record: gpupool's scheduler's signed word on a claim's allocation.

``status.allocation`` of a ResourceClaim says which devices it holds, and the node agent prepares
exactly those. But status can be written by anyone with ``resourceclaims/status`` rights (kube-
scheduler among them), so the allocation alone does not say that *gpupool* placed it, on its
ledger. The scheduler therefore writes, in the same status update, a record in ``status.devices``:
the entry of the allocation's first gpupool device carries in its ``data`` the node and the
device results, signed for the claim's uid with the scheduler's key and the claim domain
(:data:`gpupool.kube.objects.signing.CLAIM_DOMAIN`), so it can tell its own records from copies
when it rebuilds after a restart, and the agent prepares a claim only when the record exists,
names its node, equals the status and verifies with the scheduler's public key
(:func:`gpupool.agent.dra.grants.claim_signature_problem`).

Why there and not in an annotation, as the pod record is: a claim's metadata and status are
written through different endpoints, so an annotation cost a write of its own on every claim
pod (three writes where an extended-resource pod needs one, measured in the live bench), and
annotations are writable by the claim's owner, the tenant, where only an admission policy stopped
them. ``status.devices`` is written with the allocation in one request, by holders of
``resourceclaims/status`` only; the ValidatingAdmissionPolicy
(``kube/install/manifests/claim-allocation-writers.yaml``) lets only the scheduler's identities
write gpupool's results and entries there. The record is kept as JSON text inside ``data``: the
API server re-encodes ``data`` (a merge patch passes through Go maps, which sort keys), and a
signature is over exact bytes.
"""

from __future__ import annotations

import msgspec

from gpupool.kube.objects.dra.records import (
    CLAIM_RECORD_KEY,
    DRIVER,
    AllocationResult,
    DeviceRequestAllocationResult,
    ResourceClaim,
)

RECORD_FIELD = f"status.devices[{DRIVER}].data[{CLAIM_RECORD_KEY}]"
"""Where the record is, as messages name it."""


class ClaimAllocationRecord(msgspec.Struct, frozen=True, rename="camel"):
    """The record in ``status.devices`` (:data:`RECORD_FIELD`).

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
    """The record as compact JSON text."""
    return msgspec.json.encode(record).decode()


def device_status(allocation: AllocationResult, text: str) -> list[dict[str, object]]:
    """``status.devices`` carrying the record ``text``: one entry, for the first gpupool result."""
    first = gpupool_results(allocation)[0]
    entry: dict[str, object] = {"driver": first.driver, "pool": first.pool, "device": first.device}
    if first.share_id:
        entry["shareID"] = first.share_id
    entry["data"] = {CLAIM_RECORD_KEY: text}
    return [entry]


def record_text(claim: ResourceClaim) -> str | None:
    """The record's JSON text in the claim's status, or None without one.

    A value that is not text counts as none: only the scheduler writes it, and as text.
    """
    for entry in claim.status.devices:
        if entry.driver == DRIVER and entry.data is not None:
            text = entry.data.get(CLAIM_RECORD_KEY)
            return text if isinstance(text, str) else None
    return None


def decode(text: str) -> ClaimAllocationRecord:
    """Read a record's text.

    Raises:
        ClaimRecordError: It is not a claim allocation record.
    """
    try:
        return msgspec.json.decode(text, type=ClaimAllocationRecord)
    except msgspec.MsgspecError as error:
        raise ClaimRecordError(f"{RECORD_FIELD}: {error}") from None
