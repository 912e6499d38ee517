"""The agent as a DRA kubelet plugin: registration and the ``DRAPlugin`` gRPC service.

The kubelet's plugin watcher finds plugins by their registration sockets in
``<kubelet root>/plugins_registry``; for each new socket it calls ``Registration.GetInfo`` (type
``DRAPlugin``, the driver name, the service socket, the services offered) and then
``NotifyRegistrationStatus``. It calls ``DRAPlugin`` on the service socket, by convention
``<kubelet root>/plugins/<driver>/dra.sock``. The 1.37 kubelet picks the newest service both
sides know, ``v1.DRAPlugin`` (``pkg/kubelet/cm/dra/plugin``), the only one gpupool offers.

A kubelet that restarts re-scans ``plugins_registry`` and registers the plugin again, but it also
deletes the node's ResourceSlices when it starts; :class:`DraPluginHost` therefore asks for the
slice to be published again whenever a registration succeeds. A claim that cannot be prepared
is answered with an error for that claim alone (the kubelet retries it and shows the message on
the pod); the others of the same call are prepared.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from gpupool.agent.dra.prepare import ClaimPreparer
from gpupool.agent.grants import HandoffRefusedError
from gpupool.agent.protos.dra.v1 import api_pb2 as dra_pb2
from gpupool.agent.protos.dra.v1 import api_pb2_grpc as dra_grpc
from gpupool.agent.protos.pluginregistration.v1 import api_pb2 as reg_pb2
from gpupool.agent.protos.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from gpupool.kube.objects.dra.records import DRIVER

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SERVICES = ("v1.DRAPlugin",)
"""``<gRPC package>.<service>`` names the kubelet chooses from (``dra/v1/types.go``)."""


def registration_socket(registry_dir: Path) -> Path:
    """The registration socket the kubelet's plugin watcher finds."""
    return registry_dir / f"{DRIVER}-reg.sock"


def service_socket(plugins_dir: Path) -> Path:
    """The DRA service socket (``<kubelet root>/plugins/gpu.gpupool.io/dra.sock``)."""
    return plugins_dir / DRIVER / "dra.sock"


class DraService(dra_grpc.DRAPluginServicer):
    """``v1.DRAPlugin``: prepare and unprepare claims.

    Args:
        preparer: The prepared claims.
    """

    def __init__(self, preparer: ClaimPreparer) -> None:
        self._preparer = preparer

    async def NodePrepareResources(  # noqa: N802 - the gRPC method name
        self,
        request: dra_pb2.NodePrepareResourcesRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> dra_pb2.NodePrepareResourcesResponse:
        """Prepare each claim; a refusal or failure is that claim's error."""
        response = dra_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            answer = response.claims[claim.uid]
            try:
                grant, cdi = await self._preparer.prepare(claim.namespace, claim.uid, claim.name)
            except HandoffRefusedError as refusal:
                log.warning("refused: %s", refusal)
                answer.error = f"gpupool agent: {refusal}"
                continue
            except Exception as error:  # the API server is away: the kubelet retries
                log.warning("claim %s/%s: %s", claim.namespace, claim.name, error)
                answer.error = f"gpupool agent: claim {claim.namespace}/{claim.name}: {error}"
                continue
            for position, device in enumerate(grant.devices):
                entry = answer.devices.add(
                    request_names=[device.request],
                    pool_name=device.pool,
                    device_name=device.device,
                    # one CDI device carries the whole claim's edits: given once, not per GPU
                    cdi_device_ids=[cdi] if position == 0 else [],
                )
                if device.share_id:
                    entry.share_id = device.share_id
        return response

    async def NodeUnprepareResources(  # noqa: N802
        self,
        request: dra_pb2.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> dra_pb2.NodeUnprepareResourcesResponse:
        """Unprepare each claim (one that is not prepared is not an error)."""
        response = dra_pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            answer = response.claims[claim.uid]
            try:
                await self._preparer.unprepare(claim.uid)
            except OSError as error:
                answer.error = f"gpupool agent: claim {claim.namespace}/{claim.name}: {error}"
        return response


class RegistrationService(reg_grpc.RegistrationServicer):
    """``pluginregistration.Registration`` for the kubelet's plugin watcher.

    Args:
        endpoint: The DRA service socket.
        on_registered: Called after each successful registration (republish the slice).
    """

    def __init__(self, endpoint: Path, on_registered: Callable[[], Awaitable[object]]) -> None:
        self._endpoint = endpoint
        self._on_registered = on_registered
        self.registrations = 0
        self.last_error = ""

    async def GetInfo(  # noqa: N802
        self, request: reg_pb2.InfoRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> reg_pb2.PluginInfo:
        """Type, driver name, service socket and services."""
        return reg_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRIVER,
            endpoint=str(self._endpoint),
            supported_versions=list(SERVICES),
        )

    async def NotifyRegistrationStatus(  # noqa: N802
        self,
        request: reg_pb2.RegistrationStatus,
        context: grpc.aio.ServicerContext[object, object],
    ) -> reg_pb2.RegistrationStatusResponse:
        """Log the outcome; after a success, have the slice published again."""
        if request.plugin_registered:
            self.registrations += 1
            self.last_error = ""
            log.info("registered %s with the kubelet as a DRA plugin", DRIVER)
            try:
                await self._on_registered()
            except Exception as error:  # the next inventory tick publishes it
                log.warning("republishing the ResourceSlice failed: %s", error)
        else:
            self.last_error = request.error
            log.error("the kubelet refused the DRA plugin: %s", request.error)
        return reg_pb2.RegistrationStatusResponse()


class DraPluginHost:
    """The two sockets, served until stopped.

    Args:
        registry_dir: ``<kubelet root>/plugins_registry``.
        plugins_dir: ``<kubelet root>/plugins``.
        preparer: The prepared claims.
        on_registered: Called after each successful registration.
    """

    def __init__(
        self,
        registry_dir: Path,
        plugins_dir: Path,
        preparer: ClaimPreparer,
        on_registered: Callable[[], Awaitable[object]],
    ) -> None:
        self.registry = registration_socket(registry_dir)
        self.endpoint = service_socket(plugins_dir)
        self.registration = RegistrationService(self.endpoint, on_registered)
        self._service = DraService(preparer)
        self._servers: list[grpc.aio.Server] = []

    async def start(self) -> None:
        """Serve the DRA service first, then the registration socket the kubelet watches for.

        In this order the kubelet, which connects to the service right after GetInfo, never
        finds a registered plugin without its service.
        """
        service = self._server(self.endpoint)
        dra_grpc.add_DRAPluginServicer_to_server(self._service, service)  # type: ignore[no-untyped-call]
        await service.start()
        registry = self._server(self.registry)
        reg_grpc.add_RegistrationServicer_to_server(  # type: ignore[no-untyped-call]
            self.registration, registry
        )
        await registry.start()

    def _server(self, path: Path) -> grpc.aio.Server:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        server = grpc.aio.server()
        server.add_insecure_port(f"unix://{path}")
        self._servers.append(server)
        return server

    async def stop(self) -> None:
        """Stop both servers and remove the sockets (the kubelet then unregisters the plugin)."""
        while self._servers:
            await self._servers.pop().stop(grace=None)
        for path in (self.registry, self.endpoint):
            path.unlink(missing_ok=True)
