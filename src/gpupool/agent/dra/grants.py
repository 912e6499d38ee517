"""From a ResourceClaim's allocation to what its containers may get, trusting nothing unchecked.

The DRA path's counterpart of :mod:`gpupool.agent.grants`. The kubelet names the claim
(namespace, name, uid) and the agent reads it from the API server; what it then checks:

* the claim is the one the kubelet means (same uid: a claim deleted and re-created under the
  same name is another claim);
* ``status.allocation`` holds results of gpupool's driver, and the claim carries gpupool's
  allocation record (:mod:`gpupool.kube.objects.dra.claim_record`) that names this node and lists
  exactly those results: an allocation written by anyone but gpupool's scheduler (kube-scheduler
  included) is refused, as a pod bound without a record is on the device-plugin path;
* the record is signed with the scheduler's key for this claim's uid
  (:func:`claim_signature_problem`): the admission policy that keeps others from writing it is
  not the only wall, since an administrator, or a cluster installed without the policy, passes
  it; and a record copied from another claim, or a pod's record, does not verify;
* each result is in this node's pool and names a device this node has, healthy: ``gpu-<index>``
  a GPU not in MIG mode, ``mig-<index>-<n>`` an instance of a GPU in MIG mode;
* the consumed capacity is a share (memory, compute) within the GPU, or the whole GPU.

The grant it makes is the same :class:`~gpupool.agent.grants.GpuGrant` list the device-plugin
path makes, so the same CDI edits and caps follow (:func:`gpupool.agent.isolation.edits_for`).
Every refusal names the claim and the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from gpupool.agent.grants import GpuGrant, HandoffRefusedError
from gpupool.agent.nvml import GpuDevice
from gpupool.core.model import MILLI_PER_GPU
from gpupool.kube.objects.dra.claim_record import (
    RECORD_FIELD,
    ClaimRecordError,
    decode,
    gpupool_results,
    record_text,
)
from gpupool.kube.objects.dra.records import (
    CAPACITY_COMPUTE,
    CAPACITY_MEMORY,
    DeviceRequestAllocationResult,
    ResourceClaim,
    gpu_device_name,
    mig_device_name,
)
from gpupool.kube.objects.quantity import MIB, QuantityError, parse_quantity
from gpupool.kube.objects.signing import CLAIM_DOMAIN, RecordVerifier

NOT_SIGNED = "sig: not signed by this cluster's gpupool scheduler for this claim"


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of a prepared claim, as NodePrepareResources reports it.

    Attributes:
        request: The claim's request it serves.
        pool: Its pool (this node).
        device: Its name.
        share_id: The allocation's share on a shared device ("" for exclusive ones).
    """

    request: str
    pool: str
    device: str
    share_id: str = ""


@dataclass(frozen=True, slots=True)
class ClaimGrant:
    """What a prepared claim gives the containers that use it.

    Attributes:
        claim_uid: The claim's uid.
        namespace: Its namespace.
        name: Its name.
        gpus: The GPUs and caps, in result order.
        devices: The devices, in result order.
    """

    claim_uid: str
    namespace: str
    name: str
    gpus: tuple[GpuGrant, ...]
    devices: tuple[PreparedDevice, ...]

    @property
    def owner_uid(self) -> str:
        """The claim's uid: its pods share what it holds, counted once."""
        return self.claim_uid

    @property
    def owner(self) -> str:
        """``claim ns/name``."""
        return f"claim {self.namespace}/{self.name}"

    @property
    def identity(self) -> dict[str, str]:
        """``GPUPOOL_CLAIM_UID``."""
        return {"GPUPOOL_CLAIM_UID": self.claim_uid}


def _devices(inventory: tuple[GpuDevice, ...]) -> dict[str, tuple[GpuDevice, str, int]]:
    """Device name to (GPU, UUID the container sees, its memory) for this node's inventory."""
    devices: dict[str, tuple[GpuDevice, str, int]] = {}
    for gpu in inventory:
        if not gpu.mig_enabled:
            devices[gpu_device_name(gpu.index)] = (gpu, gpu.uuid, gpu.memory_mib)
            continue
        for position, mig in enumerate(gpu.mig):
            devices[mig_device_name(gpu.index, position)] = (gpu, mig.uuid, mig.memory_mib)
    return devices


def _amount(owner: str, field: str, result: DeviceRequestAllocationResult, name: str) -> Fraction:
    text = result.consumed_capacity.get(name, "0")
    try:
        return parse_quantity(text)
    except QuantityError as error:
        raise HandoffRefusedError(f"{owner}: {field}.consumedCapacity[{name}]: {error}") from None


def _gpu_grant(
    owner: str, field: str, result: DeviceRequestAllocationResult, gpu: GpuDevice
) -> GpuGrant:
    memory = _amount(owner, field, result, CAPACITY_MEMORY)
    compute = _amount(owner, field, result, CAPACITY_COMPUTE)
    if memory >= gpu.memory_mib * MIB and compute >= 1:
        return GpuGrant(gpu.uuid, gpu.minor)  # the whole GPU
    memory_mib = math.ceil(memory / MIB)
    milli = math.ceil(compute * MILLI_PER_GPU)
    if memory_mib > gpu.memory_mib or milli > MILLI_PER_GPU or (not memory_mib and not milli):
        raise HandoffRefusedError(
            f"{owner}: {field}.consumedCapacity {dict(result.consumed_capacity)} is not a share "
            f"of GPU {gpu.uuid} ({gpu.memory_mib}Mi, compute 1)"
        )
    return GpuGrant(gpu.uuid, gpu.minor, milli, memory_mib, exclusive=False)


def _meaning(results: tuple[DeviceRequestAllocationResult, ...]) -> list[tuple[object, ...]]:
    """Results compared by value: ``8Gi`` in the record equals ``8192Mi`` in the status."""
    try:
        return [
            (
                r.request,
                r.driver,
                r.pool,
                r.device,
                r.share_id,
                {k: parse_quantity(v) for k, v in r.consumed_capacity.items()},
            )
            for r in results
        ]
    except QuantityError:
        return [results]  # unreadable: compared as written


def claim_grant(
    claim: ResourceClaim, uid: str, node: str, inventory: tuple[GpuDevice, ...]
) -> ClaimGrant:
    """What ``claim`` (the kubelet's ``uid``) gives on ``node``.

    Raises:
        HandoffRefusedError: Anything does not match; the message names the claim and field.
    """
    owner = f"claim {claim.key}"
    if claim.metadata.uid != uid:
        raise HandoffRefusedError(
            f"{owner}: the kubelet prepares uid {uid}, the API server has {claim.metadata.uid} "
            "(deleted and re-created)"
        )
    results = gpupool_results(claim.status.allocation)
    if not results:
        raise HandoffRefusedError(f"{owner}: status.allocation has no result of gpupool's driver")
    text = record_text(claim)
    if text is None:
        raise HandoffRefusedError(
            f"{owner}: no allocation record {RECORD_FIELD}; gpupool's scheduler writes it with "
            "the allocation, so this claim was not allocated by gpupool: refusing it"
        )
    try:
        record = decode(text)
    except ClaimRecordError as error:
        raise HandoffRefusedError(f"{owner}: {error}") from None
    if record.node != node:
        raise HandoffRefusedError(
            f"{owner}: {RECORD_FIELD}.node is {record.node!r}, this is {node!r}"
        )
    if _meaning(record.results) != _meaning(results):
        raise HandoffRefusedError(
            f"{owner}: status.allocation.devices.results differ from {RECORD_FIELD}"
        )
    devices = _devices(inventory)
    gpus, prepared, seen = [], [], set()
    for position, result in enumerate(results):
        field = f"status.allocation.devices.results[{position}]"
        if result.pool != node:
            raise HandoffRefusedError(f"{owner}: {field}.pool is {result.pool!r}, not {node!r}")
        if result.device not in devices or result.device in seen:
            raise HandoffRefusedError(
                f"{owner}: {field}.device {result.device!r} is not a device of this node, "
                "or is given twice"
            )
        seen.add(result.device)
        gpu, visible, _ = devices[result.device]
        if not gpu.healthy:
            raise HandoffRefusedError(f"{owner}: GPU {gpu.uuid} is unhealthy (critical XID)")
        if gpu.mig_enabled:
            gpus.append(GpuGrant(visible, gpu.minor))
        else:
            gpus.append(_gpu_grant(owner, field, result, gpu))
        prepared.append(
            PreparedDevice(result.request, result.pool, result.device, result.share_id or "")
        )
    return ClaimGrant(
        uid, claim.metadata.namespace, claim.metadata.name, tuple(gpus), tuple(prepared)
    )


def claim_signature_problem(claim: ResourceClaim, verifier: RecordVerifier) -> str | None:
    """Why the claim's record is not the scheduler's, or None when its signature checks.

    ``verifier`` is the scheduler's public key (for any domain: the claim domain is used, so a
    pod's signature never passes). A claim without a readable record is left to
    :func:`claim_grant`, which names that fault.
    """
    text = record_text(claim)
    if text is None:
        return None
    try:
        record = decode(text)
    except ClaimRecordError:
        return None
    if verifier.for_domain(CLAIM_DOMAIN).verify(record, claim.metadata.uid):
        return None
    return f"{RECORD_FIELD}.{NOT_SIGNED}"
