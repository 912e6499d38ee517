"""The allocation record: what a pod was given, written onto the pod when it is bound.

It travels in the Binding's annotations, so the API server stores it on the pod in the same
write that sets ``spec.nodeName``: there is no moment at which a pod is bound without its
allocation. That makes the pods in the cluster the record of truth; the scheduler's memory is a
cache that :func:`decode` rebuilds at start, on failover and after a relist. The node agent will
read the same record to give the container exactly its GPUs and caps.
"""

from __future__ import annotations

import msgspec

from gpupool.core.decisions import Bind
from gpupool.core.model import RequestKind


class GpuShare(msgspec.Struct, frozen=True, rename="camel"):
    """One GPU of an allocation.

    Attributes:
        index: GPU index on the node (the order of the node's inventory).
        uuid: The GPU's UUID from the node inventory (empty when the inventory has none).
        milli: Compute share in milli-GPU (1000 = whole GPU).
        memory_mib: GPU memory cap in MiB; 0 means the whole GPU's memory (exclusive GPUs) or
            no memory cap (compute-only shares).
    """

    index: int
    uuid: str = ""
    milli: int = 1000
    memory_mib: int = 0


class AllocationRecord(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=False):
    """The ``gpupool.io/allocation`` annotation.

    Attributes:
        node: The node the pod is bound to.
        kind: ``whole``, ``share``, ``mig`` or ``none``.
        gpus: The GPUs given, with their shares.
        mig_profile: The MIG profile for a MIG slice.
        scheduler: Identity of the scheduler replica that decided.
        time: When it was decided (RFC 3339, UTC).
        pool: The GPUPool it was admitted to (``default``: nodes no pool selects).
        queue: The GPUQueue it was charged to.
        sig: The scheduler's signature over the pod's uid and the other fields
            (:mod:`gpupool.kube.objects.signing`); empty on records the scheduler did not make.
    """

    node: str
    kind: str
    gpus: tuple[GpuShare, ...] = ()
    mig_profile: str = ""
    scheduler: str = ""
    time: str = ""
    pool: str = ""
    queue: str = ""
    sig: str = ""


class AllocationFormatError(ValueError):
    """The annotation cannot be read as an allocation record."""


def from_decision(
    decision: Bind,
    uuids: tuple[str, ...],
    scheduler: str,
    time: str,
    *,
    pool: str = "",
    queue: str = "",
) -> AllocationRecord:
    """The record for a bind decision; ``uuids`` are the node's GPU UUIDs by index."""
    pod = decision.pod
    memory = 0 if pod.kind is RequestKind.WHOLE else pod.gpu_memory_mib
    return AllocationRecord(
        node=decision.node_name,
        kind=pod.kind.value,
        gpus=tuple(
            GpuShare(
                index=i,
                uuid=uuids[i] if i < len(uuids) else "",
                milli=pod.gpu_milli,
                memory_mib=memory,
            )
            for i in decision.gpus
        ),
        mig_profile=pod.mig_profile,
        scheduler=scheduler,
        time=time,
        pool=pool,
        queue=queue,
    )


def encode(record: AllocationRecord) -> str:
    """The annotation value (compact JSON)."""
    return msgspec.json.encode(record).decode()


def decode(text: str) -> AllocationRecord:
    """Read an annotation value.

    Raises:
        AllocationFormatError: It is not a valid allocation record.
    """
    try:
        return msgspec.json.decode(text, type=AllocationRecord)
    except msgspec.ValidationError as error:
        raise AllocationFormatError(f"gpupool.io/allocation: {error}") from None
    except msgspec.DecodeError as error:
        raise AllocationFormatError(f"gpupool.io/allocation: not JSON ({error})") from None
