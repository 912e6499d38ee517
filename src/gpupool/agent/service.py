"""The agent process: the loops that keep inventory, plugin, hand-off and telemetry current.

Each loop is independent and survives its own errors (logged, retried on the next tick), so an
API server outage delays a label update but never stops the device plugin, which the kubelet
needs to start containers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpupool.agent.api_reads import ApiClaims, ApiPods
from gpupool.agent.board import DeviceBoard
from gpupool.agent.contention import (
    ContentionMetrics,
    ContentionTracker,
    assess_gpus,
    shares_on_gpus,
)
from gpupool.agent.devices import advertised
from gpupool.agent.dra.plugin import DraPluginHost
from gpupool.agent.dra.prepare import ClaimPreparer
from gpupool.agent.dra.slice import ResourceSlicePublisher
from gpupool.agent.grants import NO_OVERCOMMIT, Overcommit
from gpupool.agent.handoff import Handoff, HandoffConfig
from gpupool.agent.inventory import NodePublisher, gpu_labels, publication
from gpupool.agent.keys import EventReporter, PublishedKey
from gpupool.agent.nvml import Nvml
from gpupool.agent.podresources import PodResourcesSource
from gpupool.agent.pools import node_sharing
from gpupool.agent.refusals import NodeRefusals
from gpupool.agent.registration import PluginHost
from gpupool.agent.telemetry import (
    AgentMetrics,
    UsageTracker,
    attribute,
    pod_uid_of,
    tracked_pods,
)
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.contention_signal import encode_contention
from gpupool.kube.objects.handoff_refusals import encode as encode_refusals
from gpupool.kube.objects.usage_signal import encode_usage
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_GPU_CONTENTION,
    ANNOTATION_GPU_USAGE,
    ANNOTATION_HANDOFF_REFUSED,
)
from gpupool.policy.membership import GpuSharing
from gpupool.retry import Backoff, retry

log = logging.getLogger(__name__)

STARTUP_BACKOFF = Backoff(0.5, 10.0)
"""Waits while the first inventory cannot be published (the API server is starting): as the
control plane waits for it, quick at first, and a thousand agents do not keep asking every
two seconds through a long outage."""


@dataclass(frozen=True, slots=True)
class DraConfig:
    """Where the kubelet looks for DRA plugins (``None`` in :class:`AgentConfig`: no DRA).

    Attributes:
        registry_dir: The kubelet's plugin registration folder.
        plugins_dir: The kubelet's plugin folder (the service socket goes in ``<driver>/``).
    """

    registry_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    plugins_dir: Path = Path("/var/lib/kubelet/plugins")


@dataclass(slots=True)
class AgentConfig:
    """Everything ``gpupool agent`` is told.

    Attributes:
        handoff: Node name, CDI and state folders, isolation.
        plugin_dir: The kubelet's device-plugin folder.
        publish_allocatable: Write allocatable on the Node (only where no kubelet runs).
        inventory_period: Seconds between NVML inventory refreshes.
        pool_period: Seconds between reads of the node's GPUPool (a LIST per node: at 1,000
            nodes every 10 s that would be 100 requests/s on the API server for a value that
            rarely changes).
        sample_period: Seconds between usage samples (metrics).
        usage_period: Seconds between idle-signal publications on the Node.
        reconcile_period: Seconds between collections of ended containers' tokens.
        proc_root: Where ``/proc`` is (the host's, mounted into the agent's pod).
        dra: The DRA kubelet plugin's folders (None: the agent is no DRA plugin and publishes
            no ResourceSlice).
        key_namespace: The scheduler's namespace, where it publishes its public key.
        key_period: Seconds a read public key is used before it is read again.
    """

    handoff: HandoffConfig
    plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    publish_allocatable: bool = False
    inventory_period: float = 10.0
    pool_period: float = 60.0
    sample_period: float = 5.0
    usage_period: float = 60.0
    reconcile_period: float = 30.0
    proc_root: Path = field(default_factory=lambda: Path("/proc"))
    dra: DraConfig | None = field(default_factory=DraConfig)
    key_namespace: str = "kube-system"
    key_period: float = 300.0


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
        keys = PublishedKey(api, config.key_namespace, config.key_period)
        self.refusals = NodeRefusals()
        self.handoff = Handoff(
            config.handoff,
            ApiPods(api),
            kubelet,
            nvml.devices,
            keys,
            EventReporter(api, config.handoff.node).untrusted,
            other_grants=lambda: self.preparer.grants(),
            overcommit=self.overcommit,
            refusals=self.refusals,
        )
        self.preparer = ClaimPreparer(
            config.handoff,
            ApiClaims(api),
            keys,
            nvml.devices,
            other_grants=self.handoff.grants,
            overcommit=self.overcommit,
            refusals=self.refusals,
        )
        self.host = PluginHost(config.plugin_dir, self.board, self.handoff)
        self.slices = ResourceSlicePublisher(api, config.handoff.node)
        self.dra_host = (
            DraPluginHost(
                config.dra.registry_dir, config.dra.plugins_dir, self.preparer, self.publish_slice
            )
            if config.dra is not None
            else None
        )
        self.metrics = AgentMetrics()
        self.usage = UsageTracker()
        self.contention = ContentionTracker()
        self.contention_metrics = ContentionMetrics(self.metrics.registry)
        self._publisher = NodePublisher(
            api, config.handoff.node, allocatable=config.publish_allocatable
        )
        self._sharing: GpuSharing | None = None
        self._pool_read_at: float | None = None
        self._slice_read_at: float | None = None

    def overcommit(self) -> Overcommit:
        """The node's pool's (compute, memory) overcommit, as last read (none before)."""
        sharing = self._sharing
        if sharing is None:
            return NO_OVERCOMMIT
        return sharing.compute_overcommit, sharing.memory_overcommit

    async def refresh_inventory(self) -> None:
        """Read NVML (and the pool when due); update the advertised devices and the Node.

        Until the node's pool has been read once, nothing is advertised or published: a guess
        could let the kubelet admit pods the scheduler would not place (the start-up loop
        retries until the read succeeds).
        """
        now = time.monotonic()
        devices = self.nvml.devices()
        sharing = self._sharing
        due = self._pool_read_at is None or now - self._pool_read_at >= self.config.pool_period
        if sharing is None or due:
            try:
                sharing = await node_sharing(
                    self.api, self.config.handoff.node, gpu_labels(devices)
                )
                self._sharing, self._pool_read_at = sharing, now
            except ApiError as error:
                if sharing is None:
                    raise
                log.warning("pool lookup failed (%s); keeping %s", error, sharing)
        await self.board.update(advertised(devices, sharing.pods_per_gpu))
        wanted = publication(devices, sharing.pods_per_gpu)
        refused = {ANNOTATION_HANDOFF_REFUSED: encode_refusals(self.refusals.current())}
        await self._publisher.publish(
            replace(wanted, annotations={**wanted.annotations, **refused})
        )
        if self.dra_host is not None:
            # read back now and then: the kubelet deletes the node's slices when it starts
            due = (
                self._slice_read_at is None or now - self._slice_read_at >= self.config.pool_period
            )
            await self.slices.publish(devices, verify=due)
            if due:
                self._slice_read_at = now

    async def publish_slice(self) -> None:
        """Publish the ResourceSlice now, reading back what is stored (after a registration)."""
        await self.slices.publish(self.nvml.devices(), verify=True)
        self._slice_read_at = time.monotonic()

    async def sample(self) -> None:
        """One usage sample: metrics, the idle tracker and each GPU's contention."""
        usage = self.nvml.usage()
        pods = attribute(usage, lambda pid: pod_uid_of(pid, self.config.proc_root))
        grants = self.handoff.grants()
        devices = self.nvml.devices()
        self.metrics.update(devices, usage, pods, grants)
        claimed = (gpu.uuid for claim in self.preparer.grants() for gpu in claim.gpus)
        tracked = tracked_pods((grant.pod_uid for grant in grants), claimed, pods)
        now = time.time()
        self.usage.update(tracked, pods, now)
        contention = assess_gpus(usage, shares_on_gpus(grants, pods), pods)
        self.contention.update(devices, usage, contention, now)
        self.contention_metrics.update(contention, grants)

    async def publish_usage(self) -> None:
        """Write the idle and the contention signals on the Node (one write)."""
        period = self.config.usage_period
        annotations = {
            ANNOTATION_GPU_USAGE: encode_usage(self.usage.signal(period)),
            ANNOTATION_GPU_CONTENTION: encode_contention(self.contention.signal(period)),
        }
        await self.api.patch(
            f"/api/v1/nodes/{self.config.handoff.node}", {"metadata": {"annotations": annotations}}
        )
        self.usage.published()
        self.contention.published()

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
        if self.dra_host is not None:
            await self.dra_host.start()
        try:
            await self._loops()
        finally:
            if self.dra_host is not None:
                await self.dra_host.stop()

    async def _loops(self) -> None:
        loops = [
            self.host.watch(),
            self.watch_xids(),
            _every(self.config.inventory_period, self.refresh_inventory),
            _every(self.config.reconcile_period, self.handoff.reconcile),
            _every(self.config.sample_period, self.sample),
            _every(self.config.usage_period, self.publish_usage),
        ]
        await asyncio.gather(*loops)


async def _retrying(step: Callable[[], Awaitable[object]]) -> None:
    def failed(error: Exception, _delay: float) -> None:  # keep trying; say why
        log.warning("%s failed: %s; retrying", getattr(step, "__name__", step), error)

    await retry(step, STARTUP_BACKOFF, failed)


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


def use_fake_device_tree(config: AgentConfig, nvml: Nvml) -> None:
    """Make the fake GPUs' device nodes (in the state folder) and name them in CDI specs.

    The state folder is a host path mounted at the same path in the agent's pod, so the host
    paths the specs name are the ones the container runtime finds.
    """
    from gpupool.agent.fakedevices import create_tree

    root = config.handoff.state_dir / "fake-dev"
    major = create_tree(root, nvml.devices())
    log.info("fake GPU device nodes in %s (character major %d)", root, major)
    config.handoff.isolation = replace(config.handoff.isolation, device_root=root)


async def serve(
    config: AgentConfig,
    kubeconfig: Path | None,
    fake_gpus: str,
    pod_resources_socket: str,
    metrics_port: int,
) -> None:
    """Run the agent until cancelled or sent SIGTERM/SIGINT (``gpupool agent``).

    SIGTERM stops it at once, its plugin servers stopped and sockets removed, so the kubelet
    sees the streams end before a successor registers. In a container the agent is PID 1,
    which the kernel spares every signal it has no handler for: without one the pod ignored
    SIGTERM for its whole grace period, still registered while the next agent started.

    Raises:
        ValueError: Unknown fake preset.
        RuntimeError: NVML cannot be loaded.
    """
    from gpupool.agent.fakenvml import FakeNvml
    from gpupool.agent.fakescript import SCRIPT_FILE, ScriptFile
    from gpupool.agent.nvml import RealNvml
    from gpupool.agent.podresources import PodResourcesClient

    node = config.handoff.node
    nvml: Nvml
    if fake_gpus:
        fake = FakeNvml.preset(fake_gpus, node)
        fake.follow(ScriptFile(config.handoff.state_dir / SCRIPT_FILE))
        use_fake_device_tree(config, fake)
        nvml = fake
    else:
        nvml = RealNvml()
    api = _api(kubeconfig)
    agent = Agent(config, nvml, api, PodResourcesClient(pod_resources_socket))
    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, registry=agent.metrics.registry)
    running = asyncio.ensure_future(agent.run())
    stopped: list[int] = []

    def stop(signum: int) -> None:
        stopped.append(signum)
        running.cancel()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    try:
        await running
    except asyncio.CancelledError:
        if not stopped:
            raise
        log.info("stopped by %s", signal.Signals(stopped[0]).name)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await api.close()
        nvml.close()
