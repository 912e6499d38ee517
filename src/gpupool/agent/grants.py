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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gpupool.agent.nvml import GpuDevice
from gpupool.core.model import MILLI_PER_GPU, overcommitted
from gpupool.kube.objects.allocation import AllocationFormatError, AllocationRecord, decode
from gpupool.kube.objects.quantity import QuantityError, to_count
from gpupool.kube.objects.records import Container, PodRecord
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION, RESOURCE_GPU, RESOURCE_MIG_PREFIX


class HandoffRefusedError(RuntimeError):
    """The agent will not start this container; the message says why (shown by the kubelet)."""


class NodeRefusedError(HandoffRefusedError):
    """A refusal for a reason of the node's own, not the pod's (a GPU full, a daemon missing).

    The agent tells the scheduler (:mod:`gpupool.agent.refusals`), which keeps that kind of pod
    off the node for a while; a refusal that is the pod's fault never does, so a tenant cannot
    close nodes with bad pods.
    """


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


class Grant(Protocol):
    """What a consumer is given, whichever path it came by (device plugin or DRA claim).

    The CDI edits (:func:`gpupool.agent.isolation.edits_for`) and the capacity check
    (:func:`check_capacity`) read only this, so both paths give the same caps for the same
    GPUs and neither can oversubscribe a GPU the other has handed out.
    """

    @property
    def owner_uid(self) -> str:
        """The unit capacity is counted per: a pod's UID, or a claim's (shared by its pods)."""

    @property
    def owner(self) -> str:
        """Who it is, for messages."""

    @property
    def gpus(self) -> tuple[GpuGrant, ...]:
        """The GPUs, in the order the container sees them."""

    @property
    def identity(self) -> dict[str, str]:
        """Environment that names the owner in the container (``GPUPOOL_POD_UID``, ...)."""


@dataclass(frozen=True, slots=True)
class ContainerGrant:
    """Everything one container is given, and whose it is (the device-plugin path's grant).

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

    @property
    def owner_uid(self) -> str:
        """The pod's UID."""
        return self.pod_uid

    @property
    def owner(self) -> str:
        """``pod ns/name container 'c'``."""
        return f"pod {self.namespace}/{self.pod} container {self.container!r}"

    @property
    def identity(self) -> dict[str, str]:
        """``GPUPOOL_POD_UID``."""
        return {"GPUPOOL_POD_UID": self.pod_uid}


@dataclass(frozen=True, slots=True)
class GpuCapacity:
    """What one GPU may hand out: compute in milli-GPU and memory in MiB."""

    milli: int
    memory_mib: int


Overcommit = tuple[float, float]
"""The (compute, memory) overcommit of the node's pool (``policy.membership.GpuSharing``)."""
NO_OVERCOMMIT: Overcommit = (1.0, 1.0)


def gpu_capacities(
    devices: Iterable[GpuDevice], overcommit: Overcommit = NO_OVERCOMMIT
) -> dict[str, GpuCapacity]:
    """Each GPU's capacity by UUID under the pool's overcommit, as the scheduler packs it.

    The rounding is the scheduler's (:func:`gpupool.core.model.overcommitted`), so a share it
    placed on an overcommitted GPU is never refused here.
    """
    compute, memory = overcommit
    return {
        gpu.uuid: GpuCapacity(
            overcommitted(MILLI_PER_GPU, compute), overcommitted(gpu.memory_mib, memory)
        )
        for gpu in devices
    }


def check_capacity(
    wanted: Grant, others: Iterable[Grant], capacity: Mapping[str, GpuCapacity]
) -> None:
    """Refuse ``wanted`` if, with the ``others`` live now, it would oversubscribe a GPU.

    Grants of the same owner do not count against each other (a pod's containers, a claim
    prepared again). ``capacity`` is each GPU's by UUID (:func:`gpu_capacities`: the physical
    GPU, or more under a Shared pool's overcommit).

    Raises:
        NodeRefusedError: A GPU would be shared while exclusive, or over its compute or
            memory; the message names the owner and the GPU.
    """
    others = [other for other in others if other.owner_uid != wanted.owner_uid]
    for gpu in wanted.gpus:
        holders: dict[str, tuple[int, int, bool]] = {}
        for other in others:
            for held in other.gpus:
                if held.uuid == gpu.uuid:
                    holders[other.owner_uid] = (held.milli, held.memory_mib, held.exclusive)
        if not holders:
            continue
        if gpu.exclusive or any(exclusive for _, _, exclusive in holders.values()):
            raise NodeRefusedError(
                f"{wanted.owner}: GPU {gpu.uuid} is exclusive but already given to "
                f"{len(holders)} other consumer(s)"
            )
        milli = gpu.milli + sum(m for m, _, _ in holders.values())
        used = gpu.memory_mib + sum(b for _, b, _ in holders.values())
        limit = capacity.get(gpu.uuid, GpuCapacity(MILLI_PER_GPU, 0))
        if milli > limit.milli or used > limit.memory_mib:
            raise NodeRefusedError(
                f"{wanted.owner}: GPU {gpu.uuid} would be oversubscribed "
                f"(compute {milli}/{limit.milli} milli, memory {used}/{limit.memory_mib} MiB)"
            )


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
    cap = (MILLI_PER_GPU, 0) if whole else (wanted.gpu_milli, wanted.gpu_memory_mib)
    _check_shares(record, plain, cap, owner)
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


def _check_shares(
    record: AllocationRecord, plain: tuple[GpuDevice, ...], cap: tuple[int, int], owner: str
) -> None:
    """Every GPU of the record is a distinct, healthy GPU of this node, given what the pod asks.

    Args:
        record: The pod's allocation record.
        plain: This node's GPUs that are not MIG-partitioned, by index.
        cap: The compute (milli) and memory (MiB) each GPU must carry: the pod's request, or
            (1000, 0) for whole GPUs.
        owner: Who, for the messages.
    """
    cap_milli, cap_memory = cap
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
