"""Checking an allocation record against its pod before it is believed.

The ``gpupool.io/allocation`` annotation decides which GPUs a bound pod holds in the scheduler's
accounting, and the node agent takes the container's GPUs and caps from it. A record that names
GPUs the pod did not ask for, another node, or GPUs that do not exist would make the accounting
wrong (a GPU given twice, or a pod holding nothing) and, on the node, give a container more than
it asked for. So a record is trusted only if every field agrees with what only gpupool decides
or the pod itself asks for:

* the pod is scheduled by this scheduler (``spec.schedulerName``);
* ``node`` is the pod's ``spec.nodeName``;
* ``kind``, the number of GPUs, each GPU's ``milli`` and ``memoryMib`` and the MIG profile
  equal the pod's request as the scheduler reads it;
* each GPU index exists on the node, appears once, and its UUID is the node's UUID at that index;
* the signature is the scheduler's, for this pod (:mod:`gpupool.kube.objects.signing`).

:func:`problems` lists every disagreement, each naming the field, for the Warning Event.
:func:`signature_problem` is the node agent's part: it has no NodeSpec of the scheduler's, and
checks the other fields against its own NVML inventory, but the signature it checks here, with
the public key, the same way.
"""

from __future__ import annotations

from gpupool.core.model import NodeSpec, PodSpec, RequestKind
from gpupool.kube.objects.allocation import AllocationFormatError, AllocationRecord, decode
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.signing import RecordVerifier, retired_scheme
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION

NOT_SIGNED = "sig: not signed by this cluster's gpupool scheduler for this pod"


def expected_memory_mib(spec: PodSpec) -> int:
    """``memoryMib`` per GPU in a record for ``spec``: 0 for whole GPUs (all of it)."""
    return 0 if spec.kind is RequestKind.WHOLE else spec.gpu_memory_mib


def problems(
    record: AllocationRecord,
    pod: PodRecord,
    spec: PodSpec,
    node: NodeSpec,
    uuids: tuple[str, ...],
    scheduler_name: str,
    signer: RecordVerifier | None,
) -> list[str]:
    """Every way ``record`` disagrees with ``pod`` (read as ``spec``) on ``node``; [] if none."""
    found: list[str] = []
    if pod.spec.scheduler_name != scheduler_name:
        found.append(
            f"spec.schedulerName: the pod is scheduled by {pod.spec.scheduler_name!r}, "
            f"not {scheduler_name!r}"
        )
    if record.node != pod.spec.node_name:
        found.append(f"node: {record.node!r} is not the pod's node {pod.spec.node_name!r}")
    if record.kind != spec.kind.value:
        found.append(f"kind: {record.kind!r}, the pod asks for {spec.kind.value!r}")
    if record.mig_profile != spec.mig_profile:
        found.append(f"migProfile: {record.mig_profile!r}, the pod asks for {spec.mig_profile!r}")
    if len(record.gpus) != spec.gpu_count:
        found.append(f"gpus: {len(record.gpus)} GPUs, the pod asks for {spec.gpu_count}")
    memory = expected_memory_mib(spec)
    seen: set[int] = set()
    for i, share in enumerate(record.gpus):
        where = f"gpus[{i}]"
        if not 0 <= share.index < node.gpu_count:
            found.append(f"{where}.index: {share.index} is not a GPU of node {node.name!r}")
        elif share.index in seen:
            found.append(f"{where}.index: GPU {share.index} is listed twice")
        elif share.uuid != uuids[share.index]:
            found.append(
                f"{where}.uuid: {share.uuid!r} is not GPU {share.index}'s {uuids[share.index]!r}"
            )
        seen.add(share.index)
        if share.milli != spec.gpu_milli:
            found.append(f"{where}.milli: {share.milli}, the pod asks for {spec.gpu_milli}")
        if share.memory_mib != memory:
            found.append(f"{where}.memoryMib: {share.memory_mib}, the pod asks for {memory}")
    if signer is None or not signer.verify(record, pod.metadata.uid):
        found.append(_unsigned(record))
    return found


def _unsigned(record: AllocationRecord) -> str:
    if retired_scheme(record.sig):
        return NOT_SIGNED + " (signed with the retired HMAC scheme: recreate the pod)"
    return NOT_SIGNED


def signature_problem(pod: PodRecord, verifier: RecordVerifier) -> str | None:
    """Why the pod's allocation record is not the scheduler's, or None when its signature checks.

    A pod without a record, or with one that cannot be read, is left to the caller's own
    checks (None), which name those faults more precisely.
    """
    text = pod.metadata.annotations.get(ANNOTATION_ALLOCATION)
    if text is None:
        return None
    try:
        record = decode(text)
    except AllocationFormatError:
        return None
    if verifier.verify(record, pod.metadata.uid):
        return None
    return f"{ANNOTATION_ALLOCATION}.{_unsigned(record)}"
