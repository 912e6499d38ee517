"""One fake GPU node for component tests: fake NVML, the agent's plugin host, a test kubelet.

Sockets live under a short folder in /tmp: a unix socket path must fit in 108 bytes, which
pytest's temporary folders do not always do.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from gpupool.agent.board import DeviceBoard
from gpupool.agent.devices import advertised
from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.grants import NO_OVERCOMMIT, Overcommit
from gpupool.agent.handoff import Handoff, HandoffConfig
from gpupool.agent.isolation import IsolationConfig
from gpupool.agent.podresources import PodResourcesClient
from gpupool.agent.registration import PluginHost
from gpupool.kube.objects.allocation import AllocationRecord, GpuShare, decode, encode
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.signing import RecordSigner, RecordVerifier
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_ALLOCATION,
    RESOURCE_GPU,
    RESOURCE_GPU_CORES,
    RESOURCE_GPU_MEMORY,
)

from .kubelet import StartedContainer, TestKubelet

NODE = "node-a"
SCHEDULER = RecordSigner.generate()
"""The scheduler of these tests: records made by :func:`share_pod` are signed with its key."""


class PublishedKey:
    """The scheduler's public key as the agent reads it (from its ConfigMap, in a cluster)."""

    def __init__(self) -> None:
        self.reads = 0

    async def verifier(self, *, fresh: bool = False) -> RecordVerifier:
        self.reads += 1
        return RecordVerifier.from_public_pem(SCHEDULER.public_pem())


def signed(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with its allocation record (re-)signed by the scheduler for its current UID."""
    annotations = pod["metadata"]["annotations"]
    record = SCHEDULER.sign(decode(annotations[ANNOTATION_ALLOCATION]), pod["metadata"]["uid"])
    annotations[ANNOTATION_ALLOCATION] = encode(record)
    return pod


class DictPods:
    """Pods by namespace/name, as the API server would return them."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}

    def put(self, pod: dict[str, Any]) -> None:
        self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod

    def by_uid(self, uid: str) -> dict[str, Any]:
        return next(p for p in self.pods.values() if p["metadata"]["uid"] == uid)

    async def get(self, namespace: str, name: str) -> PodRecord | None:
        pod = self.pods.get((namespace, name))
        if pod is None:
            return None
        return msgspec.json.decode(json.dumps(pod), type=PodRecord)


@dataclass
class AgentNode:
    """The agent side and the kubelet side of one node, in ``root``."""

    root: Path
    nvml: FakeNvml
    pods: DictPods
    kubelet: TestKubelet
    board: DeviceBoard
    slots: int
    isolation: IsolationConfig
    overcommit: Overcommit = NO_OVERCOMMIT
    now: list[float] = field(default_factory=lambda: [1_000_000.0])
    events: list[tuple[str, str]] = field(default_factory=list)
    handoff: Handoff | None = None
    host: PluginHost | None = None
    watcher: asyncio.Task[None] | None = None

    async def start_agent(self) -> None:
        """Start (or restart) the agent: a new Handoff from the same state folder."""
        config = HandoffConfig(
            NODE, self.kubelet.cdi_dir, self.root / "state", self.isolation, collect_after=60
        )
        self.handoff = Handoff(
            config,
            self.pods,
            PodResourcesClient(str(self.kubelet.pod_resources_socket)),
            self.nvml.devices,
            PublishedKey(),
            self.report,
            clock=lambda: self.now[0],
            overcommit=lambda: self.overcommit,
        )
        self.board = DeviceBoard()
        await self.board.update(advertised(self.nvml.devices(), self.slots))
        self.host = PluginHost(self.kubelet.plugin_dir, self.board, self.handoff)
        self.watcher = asyncio.create_task(self.host.watch(interval=0.05))

    async def report(self, pod: PodRecord, message: str) -> None:
        """What the agent's Event writer gets: (pod, message)."""
        self.events.append((pod.key, message))

    async def stop_agent(self) -> None:
        """Stop the agent as a SIGTERM would (its sockets go away)."""
        assert self.watcher is not None
        self.watcher.cancel()
        await asyncio.gather(self.watcher, return_exceptions=True)

    async def run(self, pod: dict[str, Any]) -> StartedContainer:
        """The API server has the pod; the kubelet admits it and starts its container."""
        self.pods.put(pod)
        await self.kubelet.admit(pod)
        return await self.kubelet.start_container(pod["metadata"]["uid"], "main")

    async def refresh(self) -> None:
        """What the agent's inventory loop does after NVML changed."""
        await self.board.update(advertised(self.nvml.devices(), self.slots))


def installed_isolation(root: Path, mode: str) -> IsolationConfig:
    """``mode`` with the MPS daemon's pipe and shm folders under ``root``, as its daemon makes
    them (the agent refuses an MPS share's hand-off while they are missing)."""
    config = IsolationConfig(mode=mode, mps_root=root / "mps")
    for folder in ("pipe", "shm"):
        (config.mps_root / folder).mkdir(parents=True, exist_ok=True)
    return config


@asynccontextmanager
async def agent_node(
    preset: str = "h100",
    slots: int = 4,
    isolation: str = "mps",
    overcommit: Overcommit = NO_OVERCOMMIT,
) -> AsyncIterator[AgentNode]:
    """A node with a running test kubelet and agent, registered, in a pool with ``overcommit``."""
    root = Path(tempfile.mkdtemp(prefix="gpa", dir="/tmp"))
    kubelet = TestKubelet(root)
    await kubelet.start()
    node = AgentNode(
        root,
        FakeNvml.preset(preset, NODE),
        DictPods(),
        kubelet,
        DeviceBoard(),
        slots,
        installed_isolation(root, isolation),
        overcommit,
    )
    await node.start_agent()
    try:
        await asyncio.wait_for(kubelet.registered.wait(), 20)
        yield node
    finally:
        await node.stop_agent()
        await node.kubelet.stop()  # the test may have replaced the kubelet
        shutil.rmtree(root, ignore_errors=True)


def share_pod(
    name: str,
    gpus: list[tuple[int, str]],
    cores: int,
    memory_mib: int,
    *,
    node: str = NODE,
    record: AllocationRecord | None = None,
    sign: bool = True,
) -> dict[str, Any]:
    """A pod asking for a share of ``len(gpus)`` GPUs, bound with its allocation record.

    The record is signed by :data:`SCHEDULER` for the pod unless ``sign`` is False.
    """
    limits = {RESOURCE_GPU: str(len(gpus))}
    if cores:
        limits[RESOURCE_GPU_CORES] = str(cores)
    if memory_mib:
        limits[RESOURCE_GPU_MEMORY] = str(memory_mib)
    whole = not cores and not memory_mib
    if record is None:
        record = AllocationRecord(
            node=node,
            kind="whole" if whole else "share",
            gpus=tuple(
                GpuShare(index, uuid, 1000 if whole else cores * 10, 0 if whole else memory_mib)
                for index, uuid in gpus
            ),
            scheduler="test",
        )
    pod = {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": str(uuid.UUID(int=random.Random(name).getrandbits(128), version=4)),
            "annotations": {ANNOTATION_ALLOCATION: encode(record)},
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "gpupool",
            "containers": [{"name": "main", "resources": {"limits": limits}}],
        },
    }
    return signed(pod) if sign else pod


def plan_shares(count: int, gpus: int, slots: int, seed: int) -> list[tuple[int, int, int]]:
    """``count`` shares of different sizes placed as the scheduler would: (gpu, cores, MiB).

    First fit over GPUs, never more than ``slots`` pods, 100 % compute or 80 GiB per GPU.
    """
    rng = random.Random(seed)
    free = [[slots, 100, 81559] for _ in range(gpus)]
    plan = []
    while len(plan) < count:
        cores, memory = rng.choice([10, 15, 20, 25, 30]), rng.choice([2048, 4096, 10240, 16384])
        for index, (pods, compute, mib) in enumerate(free):
            if pods >= 1 and compute >= cores and mib >= memory:
                free[index] = [pods - 1, compute - cores, mib - memory]
                plan.append((index, cores, memory))
                break
        else:
            raise AssertionError("plan does not fit")
    return plan
