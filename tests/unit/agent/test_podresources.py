"""The kubelet's PodResources ``List`` read over real gRPC on a unix socket, as the kubelet
answers it: one entry per device (and per NUMA node), so a container holding three GPUs is
listed three times and must be read as one holder of all three."""

from __future__ import annotations

from pathlib import Path

import grpc

from gpupool.agent.podresources import HeldDevices, PodResourcesClient
from gpupool.agent.protos.podresources.v1 import api_pb2, api_pb2_grpc

RESOURCE = "gpupool.io/gpu"


class _Kubelet(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    """Answers ``List`` as kubelet 1.37's ``containerDevicesFromResourceDeviceInstances``."""

    async def List(self, request: object, context: object) -> object:
        def one(device: str, numa: int) -> object:
            topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=numa)])
            return api_pb2.ContainerDevices(
                resource_name=RESOURCE, device_ids=[device], topology=topology
            )

        trainer = api_pb2.ContainerResources(
            name="main", devices=[one(f"GPU-{i}::0", i // 4) for i in (0, 1, 2)]
        )
        sidecar = api_pb2.ContainerResources(name="log", devices=[])
        share = api_pb2.ContainerResources(name="main", devices=[one("GPU-5::1", 1)])
        return api_pb2.ListPodResourcesResponse(
            pod_resources=[
                api_pb2.PodResources(name="train", namespace="ml", containers=[trainer, sidecar]),
                api_pb2.PodResources(name="note", namespace="dev", containers=[share]),
            ]
        )


async def test_a_container_listed_once_per_device_holds_all_its_devices(tmp_path: Path) -> None:
    socket = tmp_path / "kubelet.sock"
    server = grpc.aio.server()
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Kubelet(), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    try:
        held = await PodResourcesClient(str(socket)).held()
    finally:
        await server.stop(None)
    assert sorted(held, key=lambda h: h.pod) == [
        HeldDevices("dev", "note", "main", RESOURCE, frozenset({"GPU-5::1"})),
        HeldDevices(
            "ml", "train", "main", RESOURCE, frozenset({"GPU-0::0", "GPU-1::0", "GPU-2::0"})
        ),
    ]
