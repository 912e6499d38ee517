"""Serving the plugin sockets and registering them with the kubelet, again after it restarts.

The kubelet forgets every plugin when it restarts: it deletes the sockets in its device-plugin
folder and recreates its own ``kubelet.sock``. A plugin that does not notice stays unregistered
and the node's GPUs silently drop to zero allocatable. :class:`PluginHost` therefore watches
the identity (inode, change time) of ``kubelet.sock`` and the presence of its own sockets, and
on any change restarts its servers and registers again; the same loop re-registers when the set
of resources changes (MIG re-partitioned).

Each server gets a socket file of its own name (``gpupool-gpu-<random>.sock``), never the name
of an earlier one. Kubelet 1.37 refuses a registration whose socket path is that of a plugin
it still holds a stream to ("device plugin already connected"), and in refusing forgets the
old plugin's client: that stream's end is then never noticed, the old devices stay allocatable
and every later registration at the path is refused, for good (seen on the real node: an agent
pod started while its predecessor was still terminating left the node stuck at the old count).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from pathlib import Path

import grpc

from gpupool.agent.board import DeviceBoard
from gpupool.agent.handoff import Handoff
from gpupool.agent.plugin import DevicePluginService, plugin_options
from gpupool.agent.protos.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

KUBELET_SOCKET = "kubelet.sock"
API_VERSION = "v1beta1"


def socket_name(resource: str) -> str:
    """A fresh socket file name for a resource's server, never one an earlier server used.

    ``gpupool.io/gpu`` -> ``gpupool-gpu-<8 hex digits>.sock``.
    """
    return f"gpupool-{resource.split('/', 1)[-1]}-{secrets.token_hex(4)}.sock"


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_ino, status.st_ctime_ns


async def register(kubelet_socket: Path, endpoint: str, resource: str) -> None:
    """Call ``Registration.Register`` on the kubelet."""
    async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
        stub = api_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
        await stub.Register(
            api_pb2.RegisterRequest(
                version=API_VERSION,
                endpoint=endpoint,
                resource_name=resource,
                options=plugin_options(),
            ),
            timeout=10,
        )


class PluginHost:
    """One gRPC server per resource in the kubelet's device-plugin folder, kept registered.

    Args:
        plugin_dir: The kubelet's device-plugin folder (``/var/lib/kubelet/device-plugins``).
        board: The advertised devices.
        handoff: Tokens and grants.
    """

    def __init__(self, plugin_dir: Path, board: DeviceBoard, handoff: Handoff) -> None:
        self.plugin_dir = plugin_dir
        self._board = board
        self._handoff = handoff
        self._servers: dict[str, grpc.aio.Server] = {}
        self._sockets: dict[str, str] = {}  # resource -> its server's socket file name
        self._registered_with: tuple[int, int] | None = None
        self.registrations = 0

    async def _serve(self, resource: str) -> None:
        name = socket_name(resource)
        path = self.plugin_dir / name
        server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(  # type: ignore[no-untyped-call]
            DevicePluginService(resource, self._board, self._handoff), server
        )
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        self._servers[resource] = server
        self._sockets[resource] = name

    async def stop(self) -> None:
        """Stop every server (ListAndWatch streams end) and remove the sockets.

        A server leaves the table only once stopped, so a cancellation in the middle (the agent
        shutting down while it re-registers) leaves the rest for the next call to stop.
        """
        self._registered_with = None
        while self._servers:
            resource, server = next(iter(self._servers.items()))
            await server.stop(grace=None)
            del self._servers[resource]
            (self.plugin_dir / self._sockets.pop(resource)).unlink(missing_ok=True)

    def _current(self) -> bool:
        kubelet = _identity(self.plugin_dir / KUBELET_SOCKET)
        return (
            kubelet is not None
            and kubelet == self._registered_with
            and set(self._servers) == set(self._board.resources())
            and all((self.plugin_dir / name).exists() for name in self._sockets.values())
        )

    async def ensure_registered(self) -> bool:
        """(Re)start and (re)register if the kubelet or the resources changed.

        Returns:
            True when a registration happened now.
        """
        if self._current():
            return False
        kubelet = _identity(self.plugin_dir / KUBELET_SOCKET)
        if kubelet is None:
            return False  # no kubelet yet: try again on the next tick
        await self.stop()
        for resource in self._board.resources():
            await self._serve(resource)
        try:
            for resource in self._servers:
                await register(self.plugin_dir / KUBELET_SOCKET, self._sockets[resource], resource)
        except grpc.aio.AioRpcError as error:
            log.warning("registration with the kubelet failed: %s", error.details())
            await self.stop()
            return False
        self._registered_with = kubelet
        self.registrations += 1
        log.info("registered %s with the kubelet", ", ".join(self._servers))
        return True

    async def watch(self, interval: float = 1.0) -> None:
        """Keep registered forever (cancel to stop)."""
        try:
            while True:
                await self.ensure_registered()
                await asyncio.sleep(interval)
        finally:
            await self.stop()
