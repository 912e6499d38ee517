"""The node's GPUs as the cluster sees them: labels, annotations, allocatable (without a kubelet).

The scheduler reads a node's GPUs from what is published here
(:mod:`gpupool.kube.objects.translate`): the model and memory labels, the UUID annotation (its
length is the number of GPUs the scheduler places on, its order is the ``index`` of the allocation
record), each GPU's NVLink domain when the node has more than one, and MIG slices as
allocatable. Publishing is a merge patch of only gpupool's keys, sent
only when they changed, so an unchanged node costs nothing and other controllers' labels are never
touched.

MIG-enabled GPUs are not in the UUID list: their capacity is their MIG slices, and a whole-GPU
or share pod must never be placed on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.agent.devices import advertised
from gpupool.agent.nvml import GpuDevice
from gpupool.kube.client.api import JsonObject, KubeAPI
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_GPU_LINKS,
    ANNOTATION_GPU_NUMA,
    ANNOTATION_GPU_UNHEALTHY,
    ANNOTATION_GPU_UUIDS,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
)


@dataclass(frozen=True, slots=True)
class NodePublication:
    """What the agent writes on its Node.

    Attributes:
        labels: Model and memory labels (absent when the node has no schedulable GPU).
        annotations: The UUID list and the unhealthy list.
        allocatable: Device counts per gpupool resource (what a kubelet would publish).
    """

    labels: dict[str, str | None]
    annotations: dict[str, str | None]
    allocatable: dict[str, str]


def schedulable_gpus(gpus: tuple[GpuDevice, ...]) -> tuple[GpuDevice, ...]:
    """The GPUs whole and share pods go to (not in MIG mode), in index order.

    The position in this tuple is the ``index`` of an allocation record.
    """
    return tuple(gpu for gpu in gpus if not gpu.mig_enabled)


def gpu_labels(gpus: tuple[GpuDevice, ...]) -> dict[str, str | None]:
    """The model and memory labels for these GPUs (``None`` removes a stale key)."""
    plain = schedulable_gpus(gpus)
    labels: dict[str, str | None] = {LABEL_GPU_MODEL: None, LABEL_GPU_MEMORY: None}
    if plain:
        labels[LABEL_GPU_MODEL] = plain[0].model
        labels[LABEL_GPU_MEMORY] = str(min(gpu.memory_mib for gpu in plain))
    elif gpus:
        labels[LABEL_GPU_MODEL] = gpus[0].model
    return labels


def publication(gpus: tuple[GpuDevice, ...], slots_per_gpu: int) -> NodePublication:
    """What the node should say for these GPUs (``None`` removes a stale key)."""
    plain = schedulable_gpus(gpus)
    labels = gpu_labels(gpus)
    unhealthy = ",".join(gpu.uuid for gpu in gpus if not gpu.healthy)
    links = [str(gpu.link_domain) for gpu in plain]
    numa = [str(gpu.numa_node) for gpu in plain]
    annotations: dict[str, str | None] = {
        ANNOTATION_GPU_UUIDS: ",".join(gpu.uuid for gpu in plain) or None,
        ANNOTATION_GPU_UNHEALTHY: unhealthy or None,
        ANNOTATION_GPU_LINKS: ",".join(links) if len(set(links)) > 1 else None,
        ANNOTATION_GPU_NUMA: ",".join(numa) if len(set(numa)) > 1 and "-1" not in numa else None,
    }
    allocatable = {
        name: str(sum(device.healthy for device in devices))
        for name, devices in advertised(gpus, slots_per_gpu).items()
    }
    return NodePublication(labels, annotations, allocatable)


class NodePublisher:
    """Patches the agent's Node when its publication changes.

    Args:
        api: The API port.
        node: The node name.
        allocatable: Also write ``status.capacity``/``allocatable`` (only where no kubelet
            does it from the device plugin: kwok nodes in the dev cluster and tests).
    """

    def __init__(self, api: KubeAPI, node: str, *, allocatable: bool = False) -> None:
        self._api = api
        self._node = node
        self._allocatable = allocatable
        self._last: NodePublication | None = None

    async def publish(self, wanted: NodePublication) -> bool:
        """Send what changed since the last call; return whether anything was sent."""
        if wanted == self._last:
            return False
        path = f"/api/v1/nodes/{self._node}"
        body: JsonObject = {
            "metadata": {"labels": wanted.labels, "annotations": wanted.annotations}
        }
        await self._api.patch(path, body)
        if self._allocatable:
            stale = {}
            if self._last is not None:
                stale = {name: None for name in self._last.allocatable}
            resources = {**stale, **wanted.allocatable}
            await self._api.patch(
                f"{path}/status",
                {"status": {"capacity": resources, "allocatable": resources}},
            )
        self._last = wanted
        return True
