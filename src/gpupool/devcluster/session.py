"""``gpupool dev-cluster up``: a local control plane with fake GPU nodes that a person can use.

The tests and the benchmarks start the same :class:`LocalControlPlane`; this module adds what a
person at a terminal needs around it: fake GPU nodes that are Ready before the prompt says so,
the commands to try next, a scheduler user with exactly the scheduler's RBAC role (the only
identity the allocation admission policy lets write ``gpupool.io/allocation``, as in a real
installation), and a shutdown that leaves no etcd, kube-apiserver, kwok or
kube-scheduler behind, whether the session ends with Ctrl-C, SIGTERM, or a child that died.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from gpupool.devcluster.controlplane import LocalControlPlane, SchedulerClient
from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.kube.client.api import JsonObject, KubeAPI
from gpupool.kube.install.admission_policy import DEFAULT_AGENT_IDENTITIES
from gpupool.kube.install.crds import install_crds
from gpupool.kube.install.rbac import grant_scheduler_role
from gpupool.kube.objects.vocabulary import RESOURCE_GPU, SCHEDULER_NAME

if TYPE_CHECKING:
    from gpupool.devcluster.realnode import RealNode

NODE_PREFIX = "gpu-node"
READY_TIMEOUT = 120.0
SCHEDULER_USER = "gpupool-scheduler"
"""The dev cluster's scheduler: a client-certificate user bound to the scheduler's role."""


@dataclass(frozen=True, slots=True)
class DevClusterConfig:
    """What ``dev-cluster up`` starts.

    Attributes:
        nodes: Fake GPU nodes to create (>= 1).
        gpus_per_node: GPUs per node (>= 0; 0 makes CPU-only nodes).
        gpu_model: ``gpupool.io/gpu-model`` label of every node.
        gpu_memory_mib: ``gpupool.io/gpu-memory-mib`` label of every node.
        folder: Where certificates, kubeconfig and logs go; kept after exit. ``None``: a
            temporary folder removed on exit.
        kube_scheduler: Also run the stock kube-scheduler for pods of the default scheduler.
        real_node: Also join a real node (containerd, runc, the real kubelet) named
            ``real_node``; ``None`` for none. Needs root and the node builds
            (:mod:`gpupool.devcluster.realnode`).
    """

    nodes: int = 50
    gpus_per_node: int = 8
    gpu_model: str = "H100"
    gpu_memory_mib: int = 81559
    folder: Path | None = None
    kube_scheduler: bool = True
    real_node: str | None = None

    def validate(self) -> None:
        """Raise ``ValueError`` naming the option (as the CLI spells it) of a bad value."""
        if self.nodes < (0 if self.real_node else 1):
            raise ValueError("--nodes: must be >= 1 (>= 0 with a real node)")
        if self.gpus_per_node < 0:
            raise ValueError("--gpus-per-node: must be >= 0")
        if self.gpu_memory_mib < 1:
            raise ValueError("--gpu-memory-mib: must be >= 1")
        if not self.gpu_model or any(c.isspace() for c in self.gpu_model):
            raise ValueError("--gpu-model: must be a non-empty label value without spaces")
        if self.real_node is not None and not _is_node_name(self.real_node):
            raise ValueError("--real-node-name: must be a lowercase DNS name (a-z, 0-9, -, .)")
        if self.folder is not None and (self.folder / "etcd").exists():
            raise ValueError(
                f"--dir: {self.folder} already holds a cluster (etcd/); use an empty or new folder"
            )

    def fake_nodes(self) -> list[FakeGpuNode]:
        """The node shapes: ``gpu-node-000``, ``gpu-node-001``..."""
        width = max(3, len(str(self.nodes - 1)))
        return [
            FakeGpuNode(
                f"{NODE_PREFIX}-{index:0{width}d}",
                gpus=self.gpus_per_node,
                gpu_model=self.gpu_model,
                gpu_memory_mib=self.gpu_memory_mib,
            )
            for index in range(self.nodes)
        ]


def _is_node_name(name: str) -> bool:
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789-.")
    return 0 < len(name) <= 63 and set(name) <= allowed and name[0].isalnum() and name[-1].isalnum()


def node_is_ready(node: JsonObject) -> bool:
    """Whether the node's Ready condition is True."""
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def wait_nodes_ready(
    api: KubeAPI,
    expected: int,
    label_selector: str | None = None,
    timeout: float = READY_TIMEOUT,
) -> None:
    """Poll the node list until ``expected`` nodes (matching the selector) are Ready.

    Raises:
        TimeoutError: Fewer were Ready after ``timeout`` seconds; the message says how many.
    """
    params = {"labelSelector": label_selector} if label_selector else None
    deadline = time.monotonic() + timeout
    ready = 0
    while time.monotonic() < deadline:
        listing = await api.get("/api/v1/nodes", params)
        ready = sum(1 for node in listing["items"] if node_is_ready(node))
        if ready >= expected:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"only {ready} of {expected} nodes Ready after {timeout:.0f} s")


async def populate(kubeconfig: Path, nodes: list[FakeGpuNode], concurrency: int = 16) -> None:
    """Install CRDs and allocation policy, grant the scheduler its role, create ready nodes.

    The scheduler user gets the scheduler's role and is the only identity the policy lets
    write allocations; the fake nodes are created and waited for until kwok made them Ready.
    """
    api = KubeAPI.from_kubeconfig(kubeconfig)
    try:
        await install_crds(
            api,
            scheduler_identities=(SCHEDULER_USER,),
            agent_identities=DEFAULT_AGENT_IDENTITIES,
        )
        await grant_scheduler_role(api, SCHEDULER_USER)
        await create_nodes(api, nodes, concurrency)
        await wait_nodes_ready(api, len(nodes))
    finally:
        await api.close()


def example_pod_yaml(name: str = "gpu-demo", gpus: int = 1) -> str:
    """A pod that asks gpupool for ``gpus`` whole GPUs (kwok runs it; the image is not pulled)."""
    return (
        "apiVersion: v1\n"
        "kind: Pod\n"
        "metadata:\n"
        f"  name: {name}\n"
        "spec:\n"
        f"  schedulerName: {SCHEDULER_NAME}\n"
        "  containers:\n"
        "  - name: main\n"
        "    image: registry.k8s.io/pause:3.10\n"
        "    resources:\n"
        "      limits:\n"
        f"        {RESOURCE_GPU}: {gpus}\n"
    )


def usage_text(plane: LocalControlPlane, config: DevClusterConfig, scheduler: Path) -> str:
    """What to print once the cluster is up: kubeconfigs, commands to try, an example pod."""
    kubeconfig = plane.kubeconfig
    pod = "".join(f"  {line}\n" for line in example_pod_yaml().splitlines())
    schedulers = "kube-scheduler (default-scheduler)" if config.kube_scheduler else "none"
    keep = f"kept in {plane.folder}" if config.folder is not None else "removed on exit"
    return (
        f"kubeconfig: {kubeconfig}\n"
        f"scheduler kubeconfig: {scheduler}   (user {SCHEDULER_USER}, the scheduler's role)\n"
        f"api server: {plane.server}\n"
        f"nodes: {config.nodes} x {config.gpus_per_node} {config.gpu_model} GPUs "
        f"(Ready, kwok)\n"
        f"schedulers running: {schedulers}\n"
        f"logs: {plane.folder} ({keep})\n"
        "\n"
        "try:\n"
        f"  kubectl --kubeconfig {kubeconfig} get nodes\n"
        f"  gpupool control-plane --kubeconfig {scheduler} --insecure-local   # gpupool's "
        "scheduler; its API open to this machine without a token\n"
        "  curl http://127.0.0.1:9402/metrics   # its metrics (also /healthz, /readyz)\n"
        f"  kubectl --kubeconfig {kubeconfig} apply -f pod.yaml   # with pod.yaml:\n"
        "\n"
        f"{pod}"
        "\n"
        "Ctrl-C stops everything.\n"
    )


class _StopSignalError(Exception):
    """SIGTERM or SIGINT arrived."""


class _SignalGate:
    """SIGINT and SIGTERM raise :class:`_StopSignalError` once; later ones are ignored.

    One handler for the whole session, so no signal can land between "running" and "stopping"
    with the default action (which would kill this process and orphan the children).
    """

    def __init__(self) -> None:
        self.open = True
        self._previous: dict[signal.Signals, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.open:
            self.open = False
            raise _StopSignalError(signal.Signals(signum).name)

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)


class ChildExitedError(RuntimeError):
    """A control-plane process exited while the session was up."""


def run_session(
    config: DevClusterConfig,
    say: Callable[[str], None],
    *,
    poll_seconds: float = 1.0,
) -> str:
    """Start the cluster, print how to use it, wait for SIGINT/SIGTERM, stop everything.

    Children run in their own sessions (a terminal's Ctrl-C reaches only this process), and
    this process stops them newest first, so nothing outlives it except on SIGKILL.

    Returns:
        Why the session ended (``SIGINT`` or ``SIGTERM``).

    Raises:
        ValueError: A bad option (the message names it).
        ChildExitedError: etcd, kube-apiserver, kwok or kube-scheduler died; the message holds
            the end of its log.
    """
    config.validate()
    # a real node runs real workloads (Deployments, DaemonSets, the chart): they need the
    # controllers; kwok-only clusters start faster without them
    controllers = config.real_node is not None
    plane = (
        LocalControlPlane(folder=config.folder, keep_folder=True, controllers=controllers)
        if config.folder is not None
        else LocalControlPlane(controllers=controllers)
    )
    reason = ""
    gate = _SignalGate()
    node: RealNode | None = None
    try:
        gate.install()
        say(f"starting etcd and kube-apiserver in {plane.folder} ...")
        plane.start()
        plane.start_kwok()
        say(f"installing the CRDs and creating {config.nodes} fake GPU nodes ...")
        asyncio.run(populate(plane.kubeconfig, config.fake_nodes()))
        if config.kube_scheduler:
            plane.start_kube_scheduler(SchedulerClient())
        if config.real_node is not None:
            node = _start_real_node(plane, config.real_node, say)
        say(usage_text(plane, config, plane.user_kubeconfig(SCHEDULER_USER)))
        if node is not None:
            say(node.usage_text())
        while True:
            children = {**plane.processes, **(node.processes() if node else {})}
            for name, child in children.items():
                if not child.running:
                    raise ChildExitedError(
                        f"{name} exited with {child.process.returncode}:\n{child.log_tail()}"
                    )
            time.sleep(poll_seconds)
    except _StopSignalError as stop:
        reason = str(stop)
    finally:
        gate.open = False  # a second Ctrl-C must not cut the shutdown short
        try:
            say("stopping ...")
            if node is not None:
                node.stop()
            plane.stop()
            say("stopped.")
        finally:
            gate.restore()
    return reason


def _start_real_node(plane: LocalControlPlane, name: str, say: Callable[[str], None]) -> RealNode:
    """Start the real node (the module is imported here: it imports this one)."""
    from gpupool.devcluster.images import find_images
    from gpupool.devcluster.realnode import RealNode, RealNodeConfig

    node = RealNode(plane, RealNodeConfig(name, find_images(), log_dir=plane.folder / name))
    say(f"starting the real node {name} (containerd, kubelet) in {node.session} ...")
    try:
        node.start()
    except BaseException:
        node.stop()
        raise
    return node
