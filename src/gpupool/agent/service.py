"""The agent process: the loops that keep inventory, plugin, hand-off and telemetry current.

Each loop is independent and survives its own errors (logged, retried on the next tick), so an
API server outage delays a label update but never stops the device plugin, which the kubelet
needs to start containers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpupool.agent.board import DeviceBoard
from gpupool.agent.devices import advertised
from gpupool.agent.handoff import Handoff, HandoffConfig
from gpupool.agent.inventory import NodePublisher, publication
from gpupool.agent.nvml import Nvml
from gpupool.agent.podresources import PodResourcesSource
from gpupool.agent.pools import DEFAULT_MAX_PODS_PER_GPU, node_slots
from gpupool.agent.registration import PluginHost
from gpupool.agent.telemetry import AgentMetrics, UsageTracker, attribute, pod_uid_of
from gpupool.kube.api import ApiError, KubeAPI
from gpupool.kube.records import PodRecord
from gpupool.kube.vocabulary import ANNOTATION_GPU_USAGE

log = logging.getLogger(__name__)


@dataclass(slots=True)
class AgentConfig:
    """Everything ``gpupool agent`` is told.

    Attributes:
        handoff: Node name, CDI and state folders, isolation.
        plugin_dir: The kubelet's device-plugin folder.
        max_pods_per_gpu: Devices per GPU when the node is in no GPUPool.
        publish_allocatable: Write allocatable on the Node (only where no kubelet runs).
        inventory_period: Seconds between NVML inventory refreshes.
        pool_period: Seconds between reads of the node's GPUPool (a LIST per node: at 1,000
            nodes every 10 s that would be 100 requests/s on the API server for a value that
            rarely changes).
        sample_period: Seconds between usage samples (metrics).
        usage_period: Seconds between idle-signal publications on the Node.
        reconcile_period: Seconds between collections of ended containers' tokens.
        proc_root: Where ``/proc`` is (the host's, mounted into the agent's pod).
    """

    handoff: HandoffConfig
    plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    max_pods_per_gpu: int = DEFAULT_MAX_PODS_PER_GPU
    publish_allocatable: bool = False
    inventory_period: float = 10.0
    pool_period: float = 60.0
    sample_period: float = 5.0
    usage_period: float = 60.0
    reconcile_period: float = 30.0
    proc_root: Path = field(default_factory=lambda: Path("/proc"))


class ApiPods:
    """Pods read from the API server (the hand-off's :class:`~.handoff.PodSource`)."""

    def __init__(self, api: KubeAPI) -> None:
        self._api = api

    async def get(self, namespace: str, name: str) -> PodRecord | None:
        """The pod, or None if it does not exist."""
        try:
            body = await self._api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return msgspec.json.decode(body, type=PodRecord)


class Agent:
    """One node's agent.

    Args:
        config: The configuration.
        nvml: NVML (real or fake).
        api: The API server.
        kubelet: The kubelet's PodResources API.
    """

    def __init__(
        self, config: AgentConfig, nvml: Nvml, api: KubeAPI, kubelet: PodResourcesSource
    ) -> None:
        self.config = config
        self.nvml = nvml
        self.api = api
        self.board = DeviceBoard()
        self.handoff = Handoff(config.handoff, ApiPods(api), kubelet, nvml.devices)
        self.host = PluginHost(config.plugin_dir, self.board, self.handoff)
        self.metrics = AgentMetrics()
        self.usage = UsageTracker()
        self._publisher = NodePublisher(
            api, config.handoff.node, allocatable=config.publish_allocatable
        )
        self._slots = config.max_pods_per_gpu
        self._pool_read_at: float | None = None

    async def refresh_inventory(self) -> None:
        """Read NVML (and the pool when due); update the advertised devices and the Node."""
        now = time.monotonic()
        if self._pool_read_at is None or now - self._pool_read_at >= self.config.pool_period:
            try:
                self._slots = await node_slots(
                    self.api, self.config.handoff.node, self.config.max_pods_per_gpu
                )
                self._pool_read_at = now
            except ApiError as error:
                log.warning(
                    "pool lookup failed (%s); keeping %d devices per GPU", error, self._slots
                )
        devices = self.nvml.devices()
        await self.board.update(advertised(devices, self._slots))
        await self._publisher.publish(publication(devices, self._slots))

    async def sample(self) -> None:
        """One usage sample: metrics and the idle tracker."""
        usage = self.nvml.usage()
        pods = attribute(usage, lambda pid: pod_uid_of(pid, self.config.proc_root))
        grants = self.handoff.grants()
        self.metrics.update(self.nvml.devices(), usage, pods, grants)
        self.usage.update({grant.pod_uid for grant in grants}, pods, time.time())

    async def publish_usage(self) -> None:
        """Write the idle signal on the Node."""
        value = json.dumps(self.usage.signal(), separators=(",", ":"), sort_keys=True)
        await self.api.patch(
            f"/api/v1/nodes/{self.config.handoff.node}",
            {"metadata": {"annotations": {ANNOTATION_GPU_USAGE: value}}},
        )

    async def watch_xids(self) -> None:
        """Refresh the inventory as soon as NVML reports a critical XID."""
        while True:
            event = await asyncio.to_thread(self.nvml.wait_xid, 1000)
            if event is not None:
                log.error("GPU %s: critical XID %d; its devices become Unhealthy", *event)
                await self.refresh_inventory()

    async def run(self) -> None:
        """Run every loop until cancelled."""
        await _retrying(self.refresh_inventory)
        loops = [
            self.host.watch(),
            self.watch_xids(),
            _every(self.config.inventory_period, self.refresh_inventory),
            _every(self.config.reconcile_period, self.handoff.reconcile),
            _every(self.config.sample_period, self.sample),
            _every(self.config.usage_period, self.publish_usage),
        ]
        await asyncio.gather(*loops)


async def _retrying(step: Callable[[], Awaitable[object]], delay: float = 2.0) -> None:
    while True:
        try:
            await step()
            return
        except Exception as error:  # keep trying; say why
            log.warning("%s failed: %s; retrying", getattr(step, "__name__", step), error)
            await asyncio.sleep(delay)


async def _every(period: float, step: Callable[[], Awaitable[object]]) -> None:
    while True:
        await asyncio.sleep(period)
        try:
            await step()
        except Exception as error:  # one failed tick must not stop the loop
            log.warning("%s failed: %s", getattr(step, "__name__", step), error)


def _api(kubeconfig: Path | None) -> KubeAPI:
    if kubeconfig is not None:
        return KubeAPI.from_kubeconfig(kubeconfig)
    import httpx2
    from lightkube.config import client_adapter
    from lightkube.config.kubeconfig import KubeConfig

    config = KubeConfig.from_service_account().get()
    if config is None:
        raise RuntimeError("no --kubeconfig and no in-cluster service account")
    params = client_adapter.ConnectionParams(timeout=httpx2.Timeout(30.0), trust_env=False)
    return KubeAPI(httpx2.AsyncClient(**params.httpx_params(config)))


async def serve(
    config: AgentConfig,
    kubeconfig: Path | None,
    fake_gpus: str,
    pod_resources_socket: str,
    metrics_port: int,
) -> None:
    """Run the agent until cancelled (``gpupool agent``).

    Raises:
        ValueError: Unknown fake preset.
        RuntimeError: NVML cannot be loaded.
    """
    from gpupool.agent.fakenvml import FakeNvml
    from gpupool.agent.nvml import RealNvml
    from gpupool.agent.podresources import PodResourcesClient

    node = config.handoff.node
    nvml: Nvml = FakeNvml.preset(fake_gpus, node) if fake_gpus else RealNvml()
    api = _api(kubeconfig)
    agent = Agent(config, nvml, api, PodResourcesClient(pod_resources_socket))
    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, registry=agent.metrics.registry)
    try:
        await agent.run()
    finally:
        await api.close()
        nvml.close()
