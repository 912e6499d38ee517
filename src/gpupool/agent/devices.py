"""What the agent advertises to the kubelet: device IDs per extended resource.

A share asks for ``gpupool.io/gpu: 1`` like a whole GPU does, and the kubelet admits a pod only
if enough devices of the resource are free. Advertising one device per GPU would make a real
kubelet refuse the (N+1)th share on an N-GPU node, however small the shares. So each GPU is
advertised as ``slots`` devices with unique IDs ``<gpu uuid>::<slot>``: ``slots`` is the number
of pods one GPU of the node may hold (:func:`gpupool.policy.membership.pods_per_gpu`: the pool's
``maxPodsPerGPU``, 1 in an Exclusive pool), the scheduler never places more than that many pods
on one GPU, and a whole-GPU pod takes one device while it blocks the GPU's other slots in the
scheduler's accounting, so every pod the scheduler binds finds free devices. The scheduler
reads the GPU count from the node's UUID annotation, not from this (larger) allocatable.

A device ID is an admission token, not a GPU: the kubelet picks which free IDs a container gets
without knowing the pod's allocation, so the GPU a container receives comes from its own pod's
allocation record (:mod:`gpupool.agent.handoff`), never from the UUID inside the ID. The UUID
is there so that a GPU's XID marks exactly its own slots unhealthy.

MIG slices are real devices: ``gpupool.io/mig-<profile>`` advertises each MIG instance by its
UUID, and there the device the kubelet picks is the device the container gets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.agent.nvml import GpuDevice
from gpupool.kube.objects.vocabulary import RESOURCE_GPU, RESOURCE_MIG_PREFIX

SLOT_SEPARATOR = "::"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@dataclass(frozen=True, slots=True)
class AdvertisedDevice:
    """One device of one resource, as ListAndWatch sends it.

    Attributes:
        id: The device ID.
        healthy: Whether it can be allocated.
        gpu_uuid: The physical GPU behind it.
    """

    id: str
    healthy: bool
    gpu_uuid: str


def slot_id(gpu_uuid: str, slot: int) -> str:
    """The device ID of one slot of a GPU."""
    return f"{gpu_uuid}{SLOT_SEPARATOR}{slot}"


def gpu_of(device_id: str) -> str:
    """The GPU UUID a device ID belongs to (a MIG UUID is its own)."""
    return device_id.split(SLOT_SEPARATOR, 1)[0]


def advertised(
    gpus: Iterable[GpuDevice], slots_per_gpu: int
) -> dict[str, tuple[AdvertisedDevice, ...]]:
    """Devices per resource name: GPU slots for non-MIG GPUs, MIG instances by profile.

    ``slots_per_gpu`` 0 advertises no GPU slot (a node two pools select takes no GPU pods).

    Raises:
        ValueError: ``slots_per_gpu`` < 0.
    """
    if slots_per_gpu < 0:
        raise ValueError(f"slots per GPU must be >= 0, got {slots_per_gpu}")
    result: dict[str, list[AdvertisedDevice]] = {RESOURCE_GPU: []}
    for gpu in gpus:
        if gpu.mig_enabled:
            for mig in gpu.mig:
                name = f"{RESOURCE_MIG_PREFIX}{mig.profile}"
                result.setdefault(name, []).append(
                    AdvertisedDevice(mig.uuid, gpu.healthy, gpu.uuid)
                )
            continue
        result[RESOURCE_GPU].extend(
            AdvertisedDevice(slot_id(gpu.uuid, slot), gpu.healthy, gpu.uuid)
            for slot in range(slots_per_gpu)
        )
    return {name: tuple(devices) for name, devices in result.items()}


def preferred(available: Iterable[str], must_include: Iterable[str], size: int) -> list[str]:
    """Which of the available IDs to give: the required ones, then one per GPU, spread.

    The choice cannot matter for correctness (the hand-off does not trust it); spreading keeps
    the kubelet's view readable: a 2-GPU pod holds slots of two different GPUs.
    """
    chosen = list(dict.fromkeys(must_include))
    used_gpus = {gpu_of(device) for device in chosen}
    rest = sorted(set(available) - set(chosen))
    for device in rest:
        if len(chosen) >= size:
            break
        if gpu_of(device) not in used_gpus:
            chosen.append(device)
            used_gpus.add(gpu_of(device))
    for device in rest:
        if len(chosen) >= size:
            break
        if device not in chosen:
            chosen.append(device)
    return chosen[:size]
