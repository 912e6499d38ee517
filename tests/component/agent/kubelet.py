"""A test kubelet: the kubelet's device manager and PodResources server, over real gRPC sockets.

The real kubelet runs in ``tests/integration/test_agent_real_kubelet.py`` (``make test-kubelet``:
it needs root and a 12-minute build). This model of kubelet 1.37's device manager
(``pkg/kubelet/cm/devicemanager``) runs everywhere in seconds, so the property tests and the
restart cases can repeat many times. Call for call, it:

* it serves ``v1beta1.Registration`` on ``<dir>/kubelet.sock``; on ``Register`` it dials the
  plugin's socket, reads its options and keeps a ``ListAndWatch`` stream open, taking each
  message as the full device list;
* it refuses a registration at the socket path of a plugin whose stream is still open
  ("device plugin already connected"), and, as kubelet 1.37 does, forgets that plugin's
  client in refusing: the old stream's end is then never noticed, its devices stay and every
  later registration at that path is refused;
* on start it deletes every socket in the folder (plugins must notice and re-register) and
  restores device assignments from its checkpoint file, so running pods keep their devices;
  PodResources lists a pod again only once the kubelet has read it from the API server
  (:meth:`TestKubelet.readd`), so right after a restart it lists nothing;
* admitting a container it picks free healthy devices (asking ``GetPreferredAllocation`` when
  offered), marks them allocated, calls ``Allocate`` for that container, records the answer
  (``podDevices``) and checkpoints it; too few devices is an admission error;
* starting a container it calls ``PreStartContainer`` (when required) and only then "creates"
  it: like containerd, it resolves the CDI device names of the Allocate answer from the spec
  files, and fails the container when one cannot be resolved;
* ``podresources/v1.List`` reports, per pod and container, the device IDs it recorded.

Unlike the real kubelet, admissions may run concurrently here: the tests are stricter than
production.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpupool.agent.protos.deviceplugin.v1beta1 import api_pb2 as dp
from gpupool.agent.protos.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from gpupool.agent.protos.podresources.v1 import api_pb2 as pr
from gpupool.agent.protos.podresources.v1 import api_pb2_grpc as pr_grpc

CHECKPOINT = "kubelet_internal_checkpoint"


class AdmissionError(RuntimeError):
    """The kubelet refuses the pod (UnexpectedAdmissionError in a real kubelet)."""


class ContainerStartError(RuntimeError):
    """The container could not be started (PreStartContainer or CreateContainer failed)."""


class AlreadyConnectedError(Exception):
    """A registration at the socket path of a plugin the kubelet still holds."""


@dataclass
class Plugin:
    """A registered plugin as the kubelet holds it."""

    resource: str
    channel: grpc.aio.Channel
    stub: dp_grpc.DevicePluginStub
    options: dp.DevicePluginOptions
    endpoint: str = ""
    devices: dict[str, str] = field(default_factory=dict)
    updates: int = 0
    orphaned: bool = False
    stream: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class StartedContainer:
    """What the runtime was asked to create."""

    env: dict[str, str]
    device_nodes: tuple[str, ...]
    mounts: tuple[tuple[str, str], ...]


class TestKubelet:
    """The device-manager side of a kubelet in ``root``."""

    __test__ = False

    def __init__(self, root: Path) -> None:
        self.plugin_dir = root / "device-plugins"
        self.pod_resources_socket = root / "pod-resources" / "kubelet.sock"
        self.cdi_dir = root / "cdi"
        self.plugins: dict[str, Plugin] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        # (pod uid, container) -> resource -> (device ids, Allocate answer)
        self.assigned: dict[tuple[str, str], dict[str, tuple[tuple[str, ...], bytes]]] = {}
        self._reserved: dict[str, set[str]] = {}
        self._lock = asyncio.Lock()
        self._servers: list[grpc.aio.Server] = []
        self.registered = asyncio.Event()

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Clean the plugin folder, restore the checkpoint, serve both APIs."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        for path in self.plugin_dir.iterdir():
            if path.name != CHECKPOINT:
                path.unlink()
        self._restore()
        registration = grpc.aio.server()
        dp_grpc.add_RegistrationServicer_to_server(_Registration(self), registration)
        registration.add_insecure_port(f"unix://{self.plugin_dir / 'kubelet.sock'}")
        resources = grpc.aio.server()
        pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), resources)
        self.pod_resources_socket.unlink(missing_ok=True)
        resources.add_insecure_port(f"unix://{self.pod_resources_socket}")
        for server in (registration, resources):
            await server.start()
        self._servers = [registration, resources]

    async def stop(self) -> None:
        """Stop as a killed kubelet would: streams cut, sockets gone, checkpoint kept."""
        for plugin in self.plugins.values():
            if plugin.stream is not None:
                plugin.stream.cancel()
            await plugin.channel.close()
        self.plugins.clear()
        self.registered.clear()
        for server in self._servers:
            await server.stop(grace=None)
        (self.plugin_dir / "kubelet.sock").unlink(missing_ok=True)

    def _checkpoint(self) -> None:
        entries = [
            {
                "podUID": uid,
                "container": container,
                "resource": resource,
                "deviceIDs": list(ids),
                "allocResp": answer.hex(),
            }
            for (uid, container), resources in self.assigned.items()
            for resource, (ids, answer) in resources.items()
        ]
        data = {"entries": entries}
        (self.plugin_dir / CHECKPOINT).write_text(json.dumps(data))

    def _restore(self) -> None:
        path = self.plugin_dir / CHECKPOINT
        if not path.is_file():
            return
        data = json.loads(path.read_text())
        self.pods = {}  # a restarted kubelet lists a pod again only once it read it anew
        self.assigned = {}
        for entry in data["entries"]:
            key = (entry["podUID"], entry["container"])
            self.assigned.setdefault(key, {})[entry["resource"]] = (
                tuple(entry["deviceIDs"]),
                bytes.fromhex(entry["allocResp"]),
            )

    # --- plugins -------------------------------------------------------------------------

    async def _connect(self, request: dp.RegisterRequest) -> None:
        channel = grpc.aio.insecure_channel(f"unix://{self.plugin_dir / request.endpoint}")
        stub = dp_grpc.DevicePluginStub(channel)
        options = await stub.GetDevicePluginOptions(dp.Empty(), timeout=10)
        old = self.plugins.get(request.resource_name)
        held = old is not None and (
            old.orphaned or (old.stream is not None and not old.stream.done())
        )
        if old is not None and held and old.endpoint == request.endpoint:
            old.orphaned = True
            await channel.close()
            path = self.plugin_dir / request.endpoint
            raise AlreadyConnectedError(f"device plugin already connected: {path}")
        if old is not None and old.stream is not None:
            old.stream.cancel()
        plugin = Plugin(request.resource_name, channel, stub, options, request.endpoint)
        plugin.stream = asyncio.create_task(self._watch(plugin))
        self.plugins[request.resource_name] = plugin

    async def _watch(self, plugin: Plugin) -> None:
        try:
            async for response in plugin.stub.ListAndWatch(dp.Empty()):
                plugin.devices = {device.ID: device.health for device in response.devices}
                plugin.updates += 1
                self.registered.set()
        except grpc.aio.AioRpcError:
            if not plugin.orphaned:  # the plugin went away: its devices are no longer allocatable
                plugin.devices = {}

    async def wait_devices(self, resource: str, count: int, timeout: float = 20.0) -> None:
        """Wait until ``count`` devices of ``resource`` are known."""
        async with asyncio.timeout(timeout):
            while resource not in self.plugins or len(self.plugins[resource].devices) != count:
                await asyncio.sleep(0.02)

    def allocatable(self, resource: str) -> int:
        """Healthy devices of a resource (what the kubelet publishes as allocatable)."""
        plugin = self.plugins.get(resource)
        return sum(h == "Healthy" for h in plugin.devices.values()) if plugin else 0

    # --- pods ----------------------------------------------------------------------------

    def _in_use(self, resource: str) -> set[str]:
        return self._reserved.get(resource, set()) | {
            device
            for resources in self.assigned.values()
            for name, (ids, _) in resources.items()
            if name == resource
            for device in ids
        }

    def readd(self, pod: dict[str, Any]) -> None:
        """The restarted kubelet read a running pod from the API server again."""
        self.pods[pod["metadata"]["uid"]] = pod

    async def admit(self, pod: dict[str, Any]) -> None:
        """Admit a pod: allocate devices for each container that asks for a plugin resource.

        Raises:
            AdmissionError: Too few free healthy devices, or Allocate failed.
        """
        uid = pod["metadata"]["uid"]
        self.pods[uid] = pod
        spec = pod["spec"]
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            limits = container.get("resources", {}).get("limits", {})
            for resource, amount in sorted(limits.items()):
                if resource in self.plugins:
                    await self._allocate(uid, container["name"], resource, int(amount))

    async def _allocate(self, uid: str, container: str, resource: str, count: int) -> None:
        plugin = self.plugins[resource]
        async with self._lock:
            if resource in self.assigned.get((uid, container), {}):
                return  # already allocated (a restarted kubelet reuses its checkpoint)
            free = sorted(
                device
                for device, health in plugin.devices.items()
                if health == "Healthy" and device not in self._in_use(resource)
            )
            if len(free) < count:
                raise AdmissionError(
                    f"Requested number of devices unavailable for {resource}. "
                    f"Requested: {count}, Available: {len(free)}"
                )
            chosen = free[:count]
            if plugin.options.get_preferred_allocation_available:
                answer = await plugin.stub.GetPreferredAllocation(
                    dp.PreferredAllocationRequest(
                        container_requests=[
                            dp.ContainerPreferredAllocationRequest(
                                available_deviceIDs=free, allocation_size=count
                            )
                        ]
                    ),
                    timeout=10,
                )
                preferred = list(answer.container_responses[0].deviceIDs)
                if len(preferred) == count and set(preferred) <= set(free):
                    chosen = preferred
            # reserve before calling the plugin, as devicesToAllocate does; podDevices (what
            # PodResources reports) is written only once Allocate succeeded
            self._reserved.setdefault(resource, set()).update(chosen)
        try:
            response = await plugin.stub.Allocate(
                dp.AllocateRequest(
                    container_requests=[dp.ContainerAllocateRequest(devices_ids=chosen)]
                ),
                timeout=10,
            )
        except grpc.aio.AioRpcError as error:
            async with self._lock:
                self._reserved[resource].difference_update(chosen)
            raise AdmissionError(f"Allocate failed: {error.details()}") from None
        async with self._lock:
            self._reserved[resource].difference_update(chosen)
            answer_bytes = response.container_responses[0].SerializeToString()
            self.assigned.setdefault((uid, container), {})[resource] = (tuple(chosen), answer_bytes)
            self._checkpoint()

    async def start_container(self, uid: str, container: str) -> StartedContainer:
        """PreStartContainer for each plugin resource, then the runtime's CreateContainer.

        Raises:
            ContainerStartError: The plugin refused, or a CDI device cannot be resolved.
        """
        env: dict[str, str] = {}
        nodes: list[str] = []
        mounts: list[tuple[str, str]] = []
        for resource, (ids, answer_bytes) in self.assigned.get((uid, container), {}).items():
            plugin = self.plugins.get(resource)
            if plugin is None:
                raise ContainerStartError(f"no plugin registered for {resource}")
            if plugin.options.pre_start_required:
                try:
                    await plugin.stub.PreStartContainer(
                        dp.PreStartContainerRequest(devices_ids=ids), timeout=30
                    )
                except grpc.aio.AioRpcError as error:
                    raise ContainerStartError(error.details()) from None
            answer = dp.ContainerAllocateResponse.FromString(answer_bytes)
            env.update(answer.envs)
            for device in answer.cdi_devices:
                edits = self._resolve_cdi(device.name)
                env.update(item.split("=", 1) for item in edits.get("env", []))
                nodes.extend(node["path"] for node in edits.get("deviceNodes", []))
                mounts.extend((m["hostPath"], m["containerPath"]) for m in edits.get("mounts", []))
        return StartedContainer(env, tuple(nodes), tuple(mounts))

    def _resolve_cdi(self, qualified: str) -> dict[str, Any]:
        kind, _, name = qualified.partition("=")
        for path in sorted(self.cdi_dir.glob("*.json")) if self.cdi_dir.is_dir() else []:
            spec = json.loads(path.read_text())
            if spec["kind"] != kind:
                continue
            for device in spec["devices"]:
                if device["name"] == name:
                    edits: dict[str, Any] = device["containerEdits"]
                    return edits
        raise ContainerStartError(
            f"failed to inject CDI devices: unresolvable CDI devices {qualified}"
        )

    async def remove_pod(self, uid: str) -> None:
        """The pod ended and was removed: its devices are free again."""
        async with self._lock:
            self.pods.pop(uid, None)
            for key in [key for key in self.assigned if key[0] == uid]:
                del self.assigned[key]
            self._checkpoint()


class _Registration(dp_grpc.RegistrationServicer):
    def __init__(self, kubelet: TestKubelet) -> None:
        self.kubelet = kubelet

    async def Register(self, request: dp.RegisterRequest, context: Any) -> dp.Empty:
        if request.version != "v1beta1":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported version")
        try:
            await self.kubelet._connect(request)
        except AlreadyConnectedError as error:
            await context.abort(grpc.StatusCode.UNKNOWN, str(error))
        return dp.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: TestKubelet) -> None:
        self.kubelet = kubelet

    async def List(
        self, request: pr.ListPodResourcesRequest, context: Any
    ) -> pr.ListPodResourcesResponse:
        kubelet = self.kubelet
        answer = pr.ListPodResourcesResponse()
        for uid, pod in kubelet.pods.items():
            containers = []
            for (pod_uid, container), resources in kubelet.assigned.items():
                if pod_uid != uid:
                    continue
                containers.append(
                    pr.ContainerResources(
                        name=container,
                        devices=[
                            pr.ContainerDevices(resource_name=resource, device_ids=list(ids))
                            for resource, (ids, _) in resources.items()
                        ],
                    )
                )
            answer.pod_resources.append(
                pr.PodResources(
                    name=pod["metadata"]["name"],
                    namespace=pod["metadata"]["namespace"],
                    containers=containers,
                )
            )
        return answer
