"""The device-plugin gRPC service (``v1beta1.DevicePlugin``) for one extended resource.

Every answer is computed from device IDs only, because that is all the kubelet sends: the
options (PreStartContainer is required: it is where the pod becomes known), the device list
with health, a preferred choice, and per container an ``Allocate`` answer that carries only the
hand-off token's CDI device (:mod:`gpupool.agent.handoff`). A refused PreStartContainer returns
FAILED_PRECONDITION with the reason, which the kubelet reports on the pod.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from gpupool.agent.board import DeviceBoard
from gpupool.agent.cdi import device_name
from gpupool.agent.devices import HEALTHY, UNHEALTHY, preferred
from gpupool.agent.grants import HandoffRefusedError
from gpupool.agent.handoff import Handoff
from gpupool.agent.protos.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

HANDOFF_ENV = "GPUPOOL_HANDOFF_TOKEN"


def plugin_options() -> api_pb2.DevicePluginOptions:
    """PreStartContainer required; GetPreferredAllocation offered."""
    return api_pb2.DevicePluginOptions(
        pre_start_required=True, get_preferred_allocation_available=True
    )


class DevicePluginService(api_pb2_grpc.DevicePluginServicer):
    """``v1beta1.DevicePlugin`` for ``resource``.

    Args:
        resource: The extended resource (``gpupool.io/gpu``, ``gpupool.io/mig-1g.10gb``).
        board: The advertised devices.
        handoff: Tokens and grants.
    """

    def __init__(self, resource: str, board: DeviceBoard, handoff: Handoff) -> None:
        self.resource = resource
        self._board = board
        self._handoff = handoff

    def _list(self) -> api_pb2.ListAndWatchResponse:
        return api_pb2.ListAndWatchResponse(
            devices=[
                api_pb2.Device(ID=device.id, health=HEALTHY if device.healthy else UNHEALTHY)
                for device in self._board.devices(self.resource)
            ]
        )

    async def GetDevicePluginOptions(  # noqa: N802 - the gRPC method name
        self, request: api_pb2.Empty, context: grpc.aio.ServicerContext[object, object]
    ) -> api_pb2.DevicePluginOptions:
        """The plugin's options."""
        return plugin_options()

    async def ListAndWatch(  # noqa: N802
        self, request: api_pb2.Empty, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        """The full device list now and after every change, until the kubelet hangs up."""
        version = self._board.version
        last = self._list()
        yield last
        while True:
            version = await self._board.wait_change(version)
            current = self._list()
            if current != last:
                last = current
                yield current

    async def GetPreferredAllocation(  # noqa: N802
        self,
        request: api_pb2.PreferredAllocationRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.PreferredAllocationResponse:
        """A spread choice; it cannot matter for correctness (see :mod:`.devices`)."""
        return api_pb2.PreferredAllocationResponse(
            container_responses=[
                api_pb2.ContainerPreferredAllocationResponse(
                    deviceIDs=preferred(
                        wanted.available_deviceIDs,
                        wanted.must_include_deviceIDs,
                        wanted.allocation_size,
                    )
                )
                for wanted in request.container_requests
            ]
        )

    async def Allocate(  # noqa: N802
        self, request: api_pb2.AllocateRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> api_pb2.AllocateResponse:
        """A fresh hand-off token per container; no GPU and no caps are decided here."""
        known = {device.id for device in self._board.devices(self.resource)}
        responses = []
        for container in request.container_requests:
            unknown = sorted(set(container.devices_ids) - known)
            if unknown:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{self.resource}: unknown device IDs {', '.join(unknown)}",
                )
            token = await self._handoff.allocate(self.resource, container.devices_ids)
            responses.append(
                api_pb2.ContainerAllocateResponse(
                    envs={HANDOFF_ENV: token},
                    cdi_devices=[api_pb2.CDIDevice(name=device_name(token))],
                )
            )
        return api_pb2.AllocateResponse(container_responses=responses)

    async def PreStartContainer(  # noqa: N802
        self,
        request: api_pb2.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.PreStartContainerResponse:
        """Resolve the pod from the kubelet's record, check it, write the container's spec."""
        try:
            await self._handoff.prestart(self.resource, request.devices_ids)
        except HandoffRefusedError as refusal:
            log.warning("refused: %s", refusal)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"gpupool agent: {refusal}")
        return api_pb2.PreStartContainerResponse()
