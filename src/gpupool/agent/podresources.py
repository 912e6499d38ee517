"""The kubelet's own record of which container holds which device IDs (PodResources API v1).

This is the authority the hand-off rests on: the kubelet writes it when it allocates devices to
a container (before it starts that container), and a device ID is never held by two live
containers. Asking it "who holds these IDs?" cannot return another pod, whatever order or
concurrency the kubelet admitted pods in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass(frozen=True, slots=True)
class HeldDevices:
    """Devices of one resource held by one container.

    Attributes:
        namespace: The pod's namespace.
        pod: The pod's name.
        container: The container's name.
        resource: The extended resource.
        device_ids: The IDs, as the kubelet assigned them.
    """

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: frozenset[str]


class PodResourcesSource(Protocol):
    """Who holds which devices, as the kubelet reports it."""

    async def held(self) -> list[HeldDevices]:
        """Every (container, resource) with devices on this node."""


class PodResourcesClient:
    """A gRPC client of ``podresources/v1`` ``List`` on the kubelet's unix socket.

    Args:
        socket: Path of the kubelet's pod-resources socket.
        timeout: Seconds per call.
    """

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout: float = 10.0) -> None:
        self._socket = socket
        self._timeout = timeout

    async def held(self) -> list[HeldDevices]:
        """Every (container, resource) with devices on this node."""
        import grpc

        from gpupool.agent.protos.podresources.v1 import api_pb2, api_pb2_grpc

        async with grpc.aio.insecure_channel(f"unix://{self._socket}") as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
            response = await stub.List(api_pb2.ListPodResourcesRequest(), timeout=self._timeout)
        return gathered(
            (pod.namespace, pod.name, container.name, devices.resource_name, devices.device_ids)
            for pod in response.pod_resources
            for container in pod.containers
            for devices in container.devices
        )


def gathered(entries: Iterable[tuple[str, str, str, str, Iterable[str]]]) -> list[HeldDevices]:
    """One :class:`HeldDevices` per (pod, container, resource) from the kubelet's entries.

    The kubelet lists a container's devices one entry per device (and per NUMA node of it:
    ``containerDevicesFromResourceDeviceInstances``), so a container holding three GPUs appears
    three times; read one entry as the container's devices and no multi-GPU container would
    ever be found holding exactly its IDs.
    """
    held: dict[tuple[str, str, str, str], set[str]] = {}
    for namespace, pod, container, resource, ids in entries:
        held.setdefault((namespace, pod, container, resource), set()).update(ids)
    return [HeldDevices(*key, frozenset(ids)) for key, ids in held.items()]
