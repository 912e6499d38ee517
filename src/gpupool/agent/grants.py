"""From a pod's allocation record to what one container may get, trusting nothing unchecked.

Only the scheduler can write ``gpupool.io/allocation`` (an admission policy refuses anyone else),
but the agent is the last line before a process touches a GPU, so it checks the record again
against the two things it can trust: the pod spec (what was asked) and its own NVML inventory
(what exists). A record for another node, a GPU this node does not have, a UUID that is not the
GPU at that index, a share of another size than the pod asked for, a count that is not the
number of devices the kubelet gave the container: each is refused with a message that names
the pod, the container and the field, and the container does not start. The agent never
guesses a GPU.

Several containers of one pod split the record's GPUs in spec order (container ``i`` gets the
next ``gpupool.io/gpu`` of them); an init container, which runs before the others, gets the
first ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.agent.nvml import GpuDevice
from gpupool.kube.allocation import AllocationFormatError, AllocationRecord, decode
from gpupool.kube.quantity import QuantityError, to_count
from gpupool.kube.records import Container, PodRecord
from gpupool.kube.translate import InvalidObjectError, pod_spec
from gpupool.kube.vocabulary import ANNOTATION_ALLOCATION, RESOURCE_GPU, RESOURCE_MIG_PREFIX

MILLI_PER_GPU = 1000


class HandoffRefusedError(RuntimeError):
    """The agent will not start this container; the message says why (shown by the kubelet)."""


@dataclass(frozen=True, slots=True)
class GpuGrant:
    """One GPU (or MIG instance) a container gets, with its caps.

    Attributes:
        uuid: What the container sees (``GPU-...`` or ``MIG-...``).
        minor: ``/dev/nvidia<minor>`` of the physical GPU.
        milli: Compute share (1000 = whole GPU, no cap).
        memory_mib: Memory cap (0 = none).
        exclusive: A whole GPU or a MIG slice: no caps at all.
    """

    uuid: str
    minor: int
    milli: int = MILLI_PER_GPU
    memory_mib: int = 0
    exclusive: bool = True


@dataclass(frozen=True, slots=True)
class ContainerGrant:
    """Everything one container is given, and whose it is.

    Attributes:
        pod_uid: The pod's UID.
        namespace: The pod's namespace.
        pod: The pod's name.
        container: The container's name.
        gpus: Its GPUs, in the order the container sees them (CUDA index 0, 1, ...).
    """

    pod_uid: str
    namespace: str
    pod: str
    container: str
    gpus: tuple[GpuGrant, ...]


def _count(container: Container, resource: str) -> int:
    amount = container.resources.limits.get(resource, container.resources.requests.get(resource))
    if amount is None:
        return 0
    try:
        return to_count(amount)
    except QuantityError:
        return -1


def _record(pod: PodRecord, node: str, owner: str) -> AllocationRecord:
    if pod.spec.node_name != node:
        raise HandoffRefusedError(
            f"{owner}: pod is bound to node {pod.spec.node_name!r}, not {node!r}"
        )
    text = pod.metadata.annotations.get(ANNOTATION_ALLOCATION)
    if text is None:
        raise HandoffRefusedError(
            f"{owner}: pod has no {ANNOTATION_ALLOCATION} record; gpupool's scheduler writes it "
            "when it binds the pod, so this pod was not placed by gpupool: refusing to guess a GPU"
        )
    try:
        record = decode(text)
    except AllocationFormatError as error:
        raise HandoffRefusedError(f"{owner}: {error}") from None
    if record.node != node:
        raise HandoffRefusedError(
            f"{owner}: {ANNOTATION_ALLOCATION}.node is {record.node!r}, "
            f"but the pod runs on {node!r}"
        )
    return record


def _offset(pod: PodRecord, container: str, owner: str) -> tuple[Container, int]:
    offset = 0
    for candidate in pod.spec.containers:
        if candidate.name == container:
            return candidate, offset
        offset += max(0, _count(candidate, RESOURCE_GPU))
    for candidate in pod.spec.init_containers:
        if candidate.name == container:
            return candidate, 0
    raise HandoffRefusedError(f"{owner}: the pod has no container named {container!r}")


def grant_for(
    pod: PodRecord,
    container: str,
    resource: str,
    device_ids: tuple[str, ...],
    node: str,
    inventory: tuple[GpuDevice, ...],
) -> ContainerGrant:
    """What ``container`` of ``pod`` gets for the ``device_ids`` the kubelet gave it.

    Args:
        pod: The pod as the API server has it.
        container: The container name the kubelet reported for these device IDs.
        resource: The extended resource of the devices.
        device_ids: The IDs the kubelet assigned (from its PodResources record).
        node: This node's name.
        inventory: This node's GPUs from NVML.

    Raises:
        HandoffRefusedError: Anything does not match; the message names pod, container and field.
    """
    owner = f"pod {pod.key} container {container!r}"
    record = _record(pod, node, owner)
    spec_container, offset = _offset(pod, container, owner)
    asked = _count(spec_container, resource)
    if asked != len(device_ids):
        raise HandoffRefusedError(
            f"{owner}: asks for {resource}: {asked} but the kubelet gave {len(device_ids)} devices"
        )
    try:
        wanted = pod_spec(pod)
    except InvalidObjectError as error:
        raise HandoffRefusedError(f"{owner}: {error}") from None
    if record.kind != wanted.kind.value:
        raise HandoffRefusedError(
            f"{owner}: {ANNOTATION_ALLOCATION}.kind is {record.kind!r} "
            f"but the pod asks for {wanted.kind.value!r}"
        )
    identity = (pod.metadata.uid, pod.metadata.namespace, pod.metadata.name, container)
    if resource.startswith(RESOURCE_MIG_PREFIX):
        migs = _mig_grants(record, resource, device_ids, inventory, owner)
        return ContainerGrant(*identity, migs)
    plain = tuple(gpu for gpu in inventory if not gpu.mig_enabled)
    if len(record.gpus) != wanted.gpu_count:
        raise HandoffRefusedError(
            f"{owner}: {ANNOTATION_ALLOCATION}.gpus has {len(record.gpus)} GPUs "
            f"but the pod asks for {wanted.gpu_count}"
        )
    whole = record.kind == "whole"
    cap_milli = MILLI_PER_GPU if whole else wanted.gpu_milli
    cap_memory = 0 if whole else wanted.gpu_memory_mib
    seen: set[int] = set()
    for position, share in enumerate(record.gpus):
        field = f"{ANNOTATION_ALLOCATION}.gpus[{position}]"
        if share.index in seen:
            raise HandoffRefusedError(f"{owner}: {field}.index {share.index} is given twice")
        seen.add(share.index)
        if not 0 <= share.index < len(plain):
            raise HandoffRefusedError(
                f"{owner}: {field}.index {share.index}: this node has {len(plain)} GPUs"
            )
        gpu = plain[share.index]
        if share.uuid != gpu.uuid:
            raise HandoffRefusedError(
                f"{owner}: {field}.uuid {share.uuid!r} is not GPU {share.index} of this node "
                f"({gpu.uuid})"
            )
        if (share.milli, share.memory_mib) != (cap_milli, cap_memory):
            raise HandoffRefusedError(
                f"{owner}: {field} gives milli={share.milli} memoryMib={share.memory_mib} "
                f"but the pod asks for milli={cap_milli} memoryMib={cap_memory}"
            )
        if not gpu.healthy:
            raise HandoffRefusedError(f"{owner}: GPU {gpu.uuid} is unhealthy (critical XID)")
    mine = record.gpus[offset : offset + len(device_ids)]
    if len(mine) != len(device_ids):
        raise HandoffRefusedError(f"{owner}: the record has no GPUs left for this container")
    return ContainerGrant(
        *identity,
        tuple(
            GpuGrant(
                plain[share.index].uuid,
                plain[share.index].minor,
                share.milli,
                share.memory_mib,
                exclusive=whole,
            )
            for share in mine
        ),
    )


def _mig_grants(
    record: AllocationRecord,
    resource: str,
    device_ids: tuple[str, ...],
    inventory: tuple[GpuDevice, ...],
    owner: str,
) -> tuple[GpuGrant, ...]:
    profile = resource.removeprefix(RESOURCE_MIG_PREFIX)
    if record.mig_profile != profile:
        raise HandoffRefusedError(
            f"{owner}: {ANNOTATION_ALLOCATION}.migProfile is {record.mig_profile!r}, "
            f"the container asks for {profile!r}"
        )
    instances = {mig.uuid: (gpu, mig) for gpu in inventory if gpu.mig_enabled for mig in gpu.mig}
    grants = []
    for device in device_ids:
        if device not in instances or instances[device][1].profile != profile:
            raise HandoffRefusedError(
                f"{owner}: {device!r} is not a {profile} MIG device of this node"
            )
        gpu, mig = instances[device]
        grants.append(GpuGrant(mig.uuid, gpu.minor))
    return tuple(grants)
