"""A device plugin that hands out CDI devices the way gpupool's agent does, for one fake device.

The agent's path (:mod:`gpupool.agent.plugin`, :mod:`gpupool.agent.handoff`): ``Allocate``
answers only a fresh token as a CDI device name (``gpupool.io/container=<token>``, no device
node, no environment), ``PreStartContainer`` (required) writes that token's spec into the CDI
folder, and the container runtime resolves the name when the kubelet creates the container.
This plugin does the same with the project's own gRPC stubs, CDI names and registration call,
but its spec holds a real character device (``mknod``) instead of a GPU's, so the test sees
containerd's own CDI code inject it. ``write_specs=False`` makes it answer PreStart without
writing anything: what the agent does for a refused pod is leave the token unresolvable.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from gpupool.agent.cdi import CDI_KIND, CDI_VERSION, device_name, spec_path
from gpupool.agent.protos.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from gpupool.agent.registration import KUBELET_SOCKET, register

Context = grpc.aio.ServicerContext[object, object]
ENV_TOKEN = "GPUPOOL_E2E_TOKEN"
CONTAINER_DEVICE = "/dev/gpupool-fake0"


@dataclass
class FakeDevicePlugin(api_pb2_grpc.DevicePluginServicer):
    """``v1beta1.DevicePlugin`` for ``resource`` with one device, ``fake-0``."""

    resource: str
    plugin_dir: Path
    cdi_dir: Path
    host_device: Path
    write_specs: bool = True
    tokens: dict[str, str] = field(default_factory=dict)  # device ID -> its latest token
    prestarted: list[str] = field(default_factory=list)  # tokens whose PreStart ran
    server: grpc.aio.Server | None = None

    @property
    def socket(self) -> str:
        return f"e2e-{self.resource.split('/')[-1]}.sock"

    async def start(self) -> None:
        """Serve on the kubelet's device-plugin folder and register with the kubelet."""
        path = self.plugin_dir / self.socket
        path.unlink(missing_ok=True)
        self.server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{path}")
        await self.server.start()
        await register(self.plugin_dir / KUBELET_SOCKET, self.socket, self.resource)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)
        (self.plugin_dir / self.socket).unlink(missing_ok=True)

    async def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: Context
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(pre_start_required=True)

    async def ListAndWatch(
        self, request: api_pb2.Empty, context: Context
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        yield api_pb2.ListAndWatchResponse(devices=[api_pb2.Device(ID="fake-0", health="Healthy")])
        await asyncio.get_running_loop().create_future()  # until the kubelet hangs up

    async def Allocate(
        self, request: api_pb2.AllocateRequest, context: Context
    ) -> api_pb2.AllocateResponse:
        responses = []
        for container in request.container_requests:
            token = secrets.token_hex(8)
            for device_id in container.devices_ids:
                self.tokens[device_id] = token
            responses.append(
                api_pb2.ContainerAllocateResponse(
                    cdi_devices=[api_pb2.CDIDevice(name=device_name(token))]
                )
            )
        return api_pb2.AllocateResponse(container_responses=responses)

    async def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: Context
    ) -> api_pb2.PreStartContainerResponse:
        token = self.tokens[request.devices_ids[0]]
        self.prestarted.append(token)
        if self.write_specs:
            self._write_spec(token)
        return api_pb2.PreStartContainerResponse()

    def _write_spec(self, token: str) -> None:
        edits = {
            "env": [f"{ENV_TOKEN}={token}"],
            "deviceNodes": [{"path": CONTAINER_DEVICE, "hostPath": str(self.host_device)}],
        }
        spec = {
            "cdiVersion": CDI_VERSION,
            "kind": CDI_KIND,
            "devices": [{"name": token, "containerEdits": edits}],
        }
        target = spec_path(self.cdi_dir, token)
        partial = target.with_suffix(".partial")
        partial.write_text(json.dumps(spec))
        partial.rename(target)
