"""One answer per question: the scheduler, the agent, governance and the webhook agree.

The same raw objects (GPUPool, GPUQueue, Node and Pod JSON as the API server returns them) go to
each process's own entry point: the live scheduler's cycle (which binds pods through an
in-process API server and records the pool and queue it charged), the node agent's inventory
refresh (what it advertises to the kubelet), a governance pass's settings, and the admission
webhook's facts cache and review. Each must answer the same:

* which pool a node is in, for a node in one pool, a node no pool selects (the default pool) and
  a node two pools select (none, reported as the pools' ``NodeConflict``);
* which queue a pod is charged to, for a namespace one queue serves, a namespace two queues
  serve (with and without a queue label), a label naming a queue that does not serve the
  namespace (ignored; the webhook refuses it), and a namespace no queue serves;
* how many pods a GPU may hold, for each of those nodes (the default pool's number on a node
  in no GPUPool, none on a contested node);
* how much compute and memory one GPU may hand out: the scheduler packs a Shared pool's
  overcommitted GPU to the capacity the agent lets shares start on (the agent refused every
  hand-off past the physical GPU, so pods the scheduler placed never started);
* which kinds of pod a node refuses: what the agent publishes after a refusal is what the
  scheduler reads (the agent's own refresh, the scheduler's own node translation).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import pytest

from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.grants import ContainerGrant, GpuCapacity, GpuGrant, gpu_capacities
from gpupool.agent.handoff import HandoffConfig
from gpupool.agent.service import Agent, AgentConfig
from gpupool.core.model import RequestKind
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import ADDED
from gpupool.kube.governance.facts import read_settings
from gpupool.kube.objects import allocation
from gpupool.kube.objects.records import NodeRecord, PodRecord, PolicyObjectRecord
from gpupool.kube.objects.translate import node_spec
from gpupool.kube.objects.vocabulary import RESOURCE_GPU
from gpupool.kube.scheduler.live import LiveConfig, LiveScheduler
from gpupool.policy.spec import DEFAULT_MAX_PODS_PER_GPU
from gpupool.webhook.admission import PodReview, review_pod
from gpupool.webhook.cache import FactsCache

from .kube.builders import SIGNER, node_dict, pod_dict

Json = dict[str, Any]
GROUP = "/apis/gpupool.io/v1alpha1"


def _object(name: str, spec: Json) -> Json:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "generation": 1}, "spec": spec}


POOLS = [
    _object("train", {"mode": "Exclusive", "nodeSelector": {"pool": "x"}}),
    _object(
        "dev",
        {
            "mode": "Shared",
            "nodeSelector": {"pool": "s"},
            "shared": {"maxPodsPerGPU": 6, "computeOvercommit": 2, "memoryOvercommit": 1.5},
        },
    ),
    _object("gold", {"mode": "Shared", "nodeSelector": {"tier": "gold"}}),
]
QUEUES = [
    _object("solo", {"namespaces": ["solo"]}),
    _object("b", {"namespaces": ["shared"], "priority": 100}),
    _object("a", {"namespaces": ["shared"]}),
]
NODES = {
    "x0": {"pool": "x"},
    "s0": {"pool": "s"},
    "both": {"pool": "s", "tier": "gold"},  # selected by dev and by gold
    "free": {},  # selected by no pool
}
POOL_OF = {"x0": "train", "s0": "dev", "both": None, "free": "default"}
PODS_PER_GPU = {"x0": 1, "s0": 6, "both": 0, "free": DEFAULT_MAX_PODS_PER_GPU}
OVERCOMMIT = {"s0": (2.0, 1.5)}
"""(compute, memory) overcommit of the nodes in a Shared pool that sets one; 1.0 elsewhere."""
PODS = {
    # name: (namespace, queue label or None, the queue it is charged to)
    "p-solo": ("solo", None, "solo"),
    "p-shared-b": ("shared", "b", "b"),
    "p-shared": ("shared", None, "a"),  # two serve, no label: the first by name
    "p-forged": ("solo", "b", "solo"),  # b does not serve solo: the label is ignored
    "p-nobody": ("nobody", None, "default"),
}
REFUSED_BY_THE_WEBHOOK = {"p-shared", "p-forged"}
"""The webhook asks the tenant to choose among two queues, and refuses a label naming a queue
that does not serve the namespace; it never admits a pod to another queue than the rule's."""


def _node(name: str) -> Json:
    return node_dict(name, gpus=8, labels=NODES[name])


def _pod(name: str) -> Json:
    namespace, label, _ = PODS[name]
    labels = {"gpupool.io/queue": label} if label else {}
    return pod_dict(name, namespace=namespace, gpus=1, cores=10, labels=labels)


class ApiServer:
    """Answers lists and gets from the objects above and keeps every Binding."""

    def __init__(self) -> None:
        self.bindings: dict[str, Json] = {}

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if request.method == "POST" and path.endswith("/binding"):
            self.bindings[path.split("/")[-2]] = json.loads(request.content)
            return httpx2.Response(201, json={})
        lists = {f"{GROUP}/gpupools": POOLS, f"{GROUP}/gpuqueues": QUEUES}
        if request.method == "GET" and path in lists:
            return httpx2.Response(200, json={"items": lists[path], "metadata": {}})
        if request.method == "GET" and path.startswith("/api/v1/nodes/"):
            return httpx2.Response(200, json=_node(path.rsplit("/", 1)[1]))
        return httpx2.Response(200, json={})


def _api(server: ApiServer) -> KubeAPI:
    return KubeAPI(
        httpx2.AsyncClient(base_url="https://api", transport=httpx2.MockTransport(server))
    )


def _feed(informer: Any, objects: list[Json], record: type) -> None:
    for obj in objects:
        decoded = msgspec.convert(obj, record)
        informer.store[decoded.metadata.uid] = decoded
        informer.handler(ADDED, decoded)


async def _scheduler() -> tuple[LiveScheduler, ApiServer]:
    """The scheduler after one cycle over every pod: what it bound, where, for which queue."""
    server = ApiServer()
    scheduler = LiveScheduler(_api(server), LiveConfig(identity="test"), signer=SIGNER)
    scheduler.state.restart()
    scheduler.leading = True
    _feed(scheduler.policies.pools, POOLS, PolicyObjectRecord)
    _feed(scheduler.policies.queues, QUEUES, PolicyObjectRecord)
    _feed(scheduler.nodes, [_node(name) for name in NODES], NodeRecord)
    _feed(scheduler.pods, [_pod(name) for name in PODS], PodRecord)
    await scheduler.cycle()
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.gather(*scheduler.binder.tasks)
    return scheduler, server


@pytest.fixture
async def scheduled() -> tuple[LiveScheduler, ApiServer]:
    scheduler, server = await _scheduler()
    yield scheduler, server
    await scheduler.api.close()


async def test_which_pool_a_node_is_in(scheduled: tuple[LiveScheduler, ApiServer]) -> None:
    scheduler, _ = scheduled
    layout = scheduler.book.policy.layout  # type: ignore[union-attr]
    snapshot = scheduler.state.snapshot
    assert snapshot is not None
    by_scheduler = {
        name: (layout.pools[p].name if (p := int(layout.node_pool[row])) >= 0 else None)
        for row, name in enumerate(snapshot.node_names)
    }
    assert by_scheduler == POOL_OF
    status = scheduler.desired_status()
    for pool in ("dev", "gold"):
        (conflict,) = [
            c
            for c in status[f"{GROUP}/gpupools/{pool}"]["conditions"]
            if c["type"] == "NodeConflict"
        ]
        assert (conflict["status"], "both" in conflict["message"]) == ("True", True)

    settings = read_settings(POOLS, QUEUES)  # what a governance pass reads
    by_governance = {}
    for name in NODES:
        pool = settings.pool_of(msgspec.convert(_node(name), NodeRecord))
        by_governance[name] = pool.name if pool is not None else None
    assert by_governance == POOL_OF


async def test_which_queue_a_pod_is_charged_to(scheduled: tuple[LiveScheduler, ApiServer]) -> None:
    _, server = scheduled
    annotation = "gpupool.io/allocation"
    by_scheduler = {
        name: allocation.decode(binding["metadata"]["annotations"][annotation]).queue
        for name, binding in server.bindings.items()
    }
    expected = {name: queue for name, (_, _, queue) in PODS.items()}
    assert by_scheduler == expected

    settings = read_settings(POOLS, QUEUES)
    by_governance = {
        name: settings.queue_of(msgspec.convert(_pod(name), PodRecord)) for name in PODS
    }
    assert by_governance == expected

    cache = FactsCache(_api(ApiServer()))
    _feed(cache.nodes, [_node(name) for name in NODES], NodeRecord)
    _feed(cache.pools, POOLS, PolicyObjectRecord)
    _feed(cache.queues, QUEUES, PolicyObjectRecord)
    for informer in (cache.nodes, cache.pools, cache.queues):
        informer.synced.set()
    by_webhook: dict[str, str | None] = {}
    for name in PODS:
        obj = _pod(name)
        review = PodReview("CREATE", obj["metadata"]["namespace"], f"req-{name}", obj)
        verdict = review_pod(review, cache.facts())
        if not verdict.allowed:
            by_webhook[name] = None
            continue
        added = {m.field: m.value for m in verdict.mutations}
        label = obj["metadata"]["labels"].get("gpupool.io/queue")
        by_webhook[name] = added.get("metadata.labels[gpupool.io/queue]", label) or "default"
    assert by_webhook == {
        name: None if name in REFUSED_BY_THE_WEBHOOK else queue for name, queue in expected.items()
    }
    await cache.nodes.api.close()


async def test_how_many_pods_a_gpu_may_hold(
    scheduled: tuple[LiveScheduler, ApiServer], tmp_path: Path
) -> None:
    scheduler, _ = scheduled
    snapshot, layout = scheduler.state.snapshot, scheduler.book.policy.layout  # type: ignore[union-attr]
    assert snapshot is not None
    by_scheduler = {
        name: int(layout.pods_per_gpu[row]) for row, name in enumerate(snapshot.node_names)
    }
    assert by_scheduler == PODS_PER_GPU
    for row, name in enumerate(snapshot.node_names):
        if POOL_OF[name] is not None:  # what the snapshot enforces on every GPU of the node
            assert set(snapshot.gpu_pods_capacity[row, :8].tolist()) == {PODS_PER_GPU[name]}

    by_agent = {}
    for name in NODES:
        api = _api(ApiServer())
        handoff = HandoffConfig(name, tmp_path / name / "cdi", tmp_path / name / "state")
        agent = Agent(AgentConfig(handoff), FakeNvml.preset("h100", name), api, kubelet=None)  # type: ignore[arg-type]
        await agent.refresh_inventory()
        by_agent[name] = len(agent.board.devices(RESOURCE_GPU)) // 8
        await api.close()
    assert by_agent == PODS_PER_GPU


async def test_how_much_of_a_gpu_may_be_handed_out(
    scheduled: tuple[LiveScheduler, ApiServer], tmp_path: Path
) -> None:
    scheduler, _ = scheduled
    snapshot = scheduler.state.snapshot
    assert snapshot is not None
    for name in NODES:
        if POOL_OF[name] is None:
            continue  # a contested node takes no GPU pods at all
        api = _api(ApiServer())
        handoff = HandoffConfig(name, tmp_path / name / "cdi", tmp_path / name / "state")
        nvml = FakeNvml.preset("h100", name)
        agent = Agent(AgentConfig(handoff), nvml, api, kubelet=None)  # type: ignore[arg-type]
        await agent.refresh_inventory()
        await api.close()
        assert agent.overcommit() == OVERCOMMIT.get(name, (1.0, 1.0))
        by_agent = gpu_capacities(nvml.devices(), agent.overcommit())
        row = snapshot.node_index[name]
        by_scheduler = {
            gpu.uuid: GpuCapacity(
                int(snapshot.gpu_milli_capacity[row, gpu.index]),
                int(snapshot.gpu_memory_capacity[row, gpu.index]),
            )
            for gpu in nvml.devices()
        }
        assert by_agent == by_scheduler, name
    overcommitted = gpu_capacities(FakeNvml.preset("h100", "s0").devices(), OVERCOMMIT["s0"])
    assert {c.milli for c in overcommitted.values()} == {2000}


class RecordingServer(ApiServer):
    """Also keeps the agent's Node patches (what it publishes)."""

    def __init__(self) -> None:
        super().__init__()
        self.node_patches: list[Json] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "PATCH" and request.url.path.startswith("/api/v1/nodes/"):
            self.node_patches.append(json.loads(request.content))
        return super().__call__(request)


async def test_which_kinds_a_node_refuses(tmp_path: Path) -> None:
    """What the agent publishes after refusing a share is what keeps the scheduler's shares
    (and only shares) off the node."""
    server = RecordingServer()
    api = _api(server)
    handoff = HandoffConfig("s0", tmp_path / "cdi", tmp_path / "state")
    agent = Agent(AgentConfig(handoff), FakeNvml.preset("h100", "s0"), api, kubelet=None)  # type: ignore[arg-type]
    share = ContainerGrant("u", "ns", "p", "main", (GpuGrant("GPU-s0-1", 1, 300, 4096, False),))
    agent.refusals.refused(share, "GPU GPU-s0-1 would be oversubscribed")
    await agent.refresh_inventory()
    await api.close()
    node = _node("s0")
    annotations = node["metadata"].setdefault("annotations", {})
    for patch in server.node_patches:  # merge patches: null removes a key
        for key, value in patch["metadata"]["annotations"].items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
    spec = node_spec(msgspec.convert(node, NodeRecord))
    assert spec.refused_kinds == (RequestKind.SHARE,)
