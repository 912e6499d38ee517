"""The node's GPUs as one ResourceSlice, kept current in the API server.

What the slice says is the DRA path's inventory, as the Node's labels and annotations are the
device-plugin path's (:mod:`gpupool.agent.inventory`): the scheduler places claims on exactly
these devices and the agent prepares only what they name. Device names and attributes are the
vocabulary of :mod:`gpupool.kube.objects.dra.records`.

* A GPU not in MIG mode is one shared device (``allowMultipleAllocations``), with ``memory`` and
  ``compute`` as consumable capacity: several claims take parts of it, and a request that does
  not ask for one of them consumes its ``requestPolicy.default`` (0: no cap asked), never the
  whole GPU by surprise.
* MIG instances are pre-partitioned devices, one per instance NVML reports. The alternative,
  partitionable devices with the GPU's memory and compute slices as shared counters, suits a
  driver that creates instances when a claim is prepared; gpupool's agent creates none (an
  administrator or the MIG manager does), so counters would promise partitions it cannot make.
  A GPU in MIG mode is not a device itself, as it is not a GPU of the Node's UUID list.
* A GPU broken by a critical XID keeps its device, with a ``NoSchedule`` taint: new claims stay
  away, running ones are governance's business (the device plugin's Unhealthy devices behave
  the same). ``NoExecute`` would let the eviction controller kill running pods for a fault they
  may not have seen.
* The slice is owned by the Node (garbage-collected with it) and its pool generation grows with
  each change, which is how consumers tell a stale slice from a current one. The kubelet deletes
  a node's slices when it starts and when a plugin goes away, so the publisher re-creates it when
  it finds it gone (:meth:`ResourceSlicePublisher.publish` with ``verify``).
"""

from __future__ import annotations

import logging
import re

import msgspec

from gpupool.agent.nvml import GpuDevice
from gpupool.kube.client.api import ApiError, JsonObject, KubeAPI
from gpupool.kube.objects.dra.records import (
    API_VERSION,
    ATTRIBUTE_TYPE,
    CAPACITY_COMPUTE,
    CAPACITY_MEMORY,
    DRIVER,
    SLICES_PATH,
    TAINT_UNHEALTHY,
    TYPE_GPU,
    TYPE_MIG,
    CapacityRange,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceTaint,
    RequestPolicy,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
    gpu_device_name,
    mig_device_name,
    slice_name,
)
from gpupool.kube.objects.quantity import MIB, binary_quantity

log = logging.getLogger(__name__)

_SEMVER_PART = re.compile(r"^[0-9]+$")


def driver_semver(version: str) -> str | None:
    """A driver version as a semantic version: ``570.124.06`` -> ``570.124.6``; None if not one.

    NVIDIA pads the last part with a zero, which semver forbids, and the API server refuses a
    slice whose ``version`` attribute is not semver: the whole slice, not just the attribute.
    """
    parts = version.strip().split(".")
    if not 2 <= len(parts) <= 3 or not all(_SEMVER_PART.match(part) for part in parts):
        return None
    numbers = [str(int(part)) for part in parts] + ["0"] * (3 - len(parts))
    return ".".join(numbers)


def _common(gpu: GpuDevice) -> dict[str, DeviceAttribute]:
    attributes = {
        "model": DeviceAttribute(string=gpu.model),
        "index": DeviceAttribute(integer=gpu.index),
        "migCapable": DeviceAttribute(boolean=gpu.mig_capable),
        "migEnabled": DeviceAttribute(boolean=gpu.mig_enabled),
    }
    if gpu.product_name:
        attributes["productName"] = DeviceAttribute(string=gpu.product_name[:64])
    version = driver_semver(gpu.driver_version)
    if version is not None:
        attributes["driverVersion"] = DeviceAttribute(version=version)
    return attributes


def _taints(gpu: GpuDevice) -> tuple[DeviceTaint, ...]:
    if gpu.healthy:
        return ()
    return (DeviceTaint(key=TAINT_UNHEALTHY, value="xid", effect="NoSchedule"),)


def gpu_device(gpu: GpuDevice) -> Device:
    """The shared device of a GPU not in MIG mode."""
    return Device(
        name=gpu_device_name(gpu.index),
        attributes={
            ATTRIBUTE_TYPE: DeviceAttribute(string=TYPE_GPU),
            "uuid": DeviceAttribute(string=gpu.uuid),
            **_common(gpu),
        },
        capacity={
            CAPACITY_MEMORY: DeviceCapacity(
                value=binary_quantity(gpu.memory_mib * MIB),
                request_policy=RequestPolicy(
                    default="0", valid_range=CapacityRange(min="0", step="1Mi")
                ),
            ),
            CAPACITY_COMPUTE: DeviceCapacity(
                value="1",
                request_policy=RequestPolicy(
                    default="0", valid_range=CapacityRange(min="0", max="1")
                ),
            ),
        },
        allow_multiple_allocations=True,
        taints=_taints(gpu),
    )


def mig_devices(gpu: GpuDevice) -> tuple[Device, ...]:
    """One exclusive device per MIG instance of a GPU in MIG mode."""
    return tuple(
        Device(
            name=mig_device_name(gpu.index, position),
            attributes={
                ATTRIBUTE_TYPE: DeviceAttribute(string=TYPE_MIG),
                "uuid": DeviceAttribute(string=mig.uuid),
                "profile": DeviceAttribute(string=mig.profile),
                "parentUUID": DeviceAttribute(string=gpu.uuid),
                "parentIndex": DeviceAttribute(integer=gpu.index),
                **_common(gpu),
            },
            capacity={CAPACITY_MEMORY: DeviceCapacity(value=binary_quantity(mig.memory_mib * MIB))},
            taints=_taints(gpu),
        )
        for position, mig in enumerate(gpu.mig)
    )


def slice_devices(gpus: tuple[GpuDevice, ...]) -> tuple[Device, ...]:
    """Every device of the node, in NVML order."""
    devices: list[Device] = []
    for gpu in gpus:
        devices.extend(mig_devices(gpu) if gpu.mig_enabled else (gpu_device(gpu),))
    return tuple(devices)


def slice_object(
    node: str, node_uid: str, devices: tuple[Device, ...], generation: int
) -> JsonObject:
    """The ResourceSlice as JSON, owned by its Node."""
    spec = ResourceSliceSpec(
        driver=DRIVER,
        pool=ResourcePool(name=node, generation=generation, resource_slice_count=1),
        node_name=node,
        devices=devices,
    )
    body: JsonObject = {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node,
                    "uid": node_uid,
                    "controller": True,
                }
            ],
        },
        "spec": msgspec.to_builtins(spec),
    }
    return body


class ResourceSlicePublisher:
    """Keeps the node's ResourceSlice equal to its inventory.

    Args:
        api: The API port (the agent's identity: resourceslices get/create/update/delete).
        node: The node name.
    """

    def __init__(self, api: KubeAPI, node: str) -> None:
        self._api = api
        self._node = node
        self._path = f"{SLICES_PATH}/{slice_name(node)}"
        self._published: tuple[Device, ...] | None = None
        self.writes = 0

    async def _stored(self) -> ResourceSlice | None:
        try:
            body = await self._api.request("GET", self._path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return msgspec.json.decode(body, type=ResourceSlice)

    async def publish(self, gpus: tuple[GpuDevice, ...], *, verify: bool = False) -> bool:
        """Create, update or delete the slice so it says ``gpus``; return whether it wrote.

        Without ``verify`` an unchanged inventory costs nothing; with it the stored slice is
        read first (after a kubelet restart, which deletes it, and periodically).
        """
        devices = slice_devices(gpus)
        if devices == self._published and not verify:
            return False
        stored = await self._stored()
        if not devices:
            if stored is not None:
                await self._api.delete(self._path)
                self.writes += 1
            self._published = devices
            return stored is not None
        if stored is not None and stored.spec.devices == devices:
            self._published = devices
            return False
        generation = stored.spec.pool.generation + 1 if stored is not None else 1
        node = await self._api.get(f"/api/v1/nodes/{self._node}")
        body = slice_object(self._node, node["metadata"]["uid"], devices, generation)
        if stored is None:
            await self._api.create(SLICES_PATH, body)
        else:
            body["metadata"]["resourceVersion"] = stored.metadata.resource_version
            await self._api.replace(self._path, body)
        self.writes += 1
        self._published = devices
        log.info(
            "ResourceSlice %s: %d devices, generation %d", self._path, len(devices), generation
        )
        return True

    async def withdraw(self) -> None:
        """Delete the slice (the agent is leaving the node)."""
        await self._api.delete(self._path)
        self._published = None
