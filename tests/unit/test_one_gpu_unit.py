"""One GPU unit everywhere: quota, cost and the API count every kind of request the same.

Each request kind is scheduled by the live scheduler (its cycle binds the pod through an
in-process API server that keeps what it is sent), the bound pod comes back as the API server
would return it, and then every process that counts GPU units reads it through its own entry
point: the quota ledger (the next cycle charges it) and the GPUQueue status written from it; a
governance pass (the cost ledger, with a real SQLite store behind it) and ``gpupool report
cost``'s query over that store; the REST API's teams, queues and pools. They used to disagree:
a MIG profile with an attribute counted as a whole GPU for the quota and 1/7 for the bill, and
a memory cap on a GPU of unknown memory counted whole for one and by compute for the other.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import pytest

from gpupool.api import view
from gpupool.api.sources import LiveView
from gpupool.governance.accounting import GroupBy
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import ADDED, MODIFIED
from gpupool.kube.governance.config import GovernanceConfig
from gpupool.kube.governance.controller import GovernanceController
from gpupool.kube.objects.records import NodeRecord, PodRecord, PolicyObjectRecord
from gpupool.kube.scheduler.governance_port import GovernancePort
from gpupool.kube.scheduler.live import LiveConfig, LiveScheduler
from gpupool.kube.scheduler.read_view import SchedulerReader
from gpupool.store.cost import cost_report
from gpupool.store.engine import open_store
from gpupool.store.queries import allocations_overlapping
from gpupool.store.writer import StoreWriter

from .kube.builders import SIGNER, node_dict, pod_dict

Json = dict[str, Any]
GROUP = "/apis/gpupool.io/v1alpha1"
QUEUE = {"metadata": {"name": "team", "uid": "uid-team"}, "spec": {"namespaces": ["ml"]}}
MIG = {"gpupool.io/mig-3g.40gb": "2", "gpupool.io/mig-1g.10gb+me": "2"}

CASES = [
    # (id, the pod's GPU request, whether its node reports GPU memory, GPU milli-units)
    ("whole", {"gpus": 2}, True, 2000),
    ("share-by-memory", {"gpus": 1, "gpu_memory": 40960}, True, 500),
    ("share-by-compute", {"gpus": 1, "cores": 30}, True, 300),
    ("share-by-both", {"gpus": 1, "cores": 20, "gpu_memory": 61440}, True, 750),
    ("share-by-memory-on-unknown-memory", {"gpus": 1, "gpu_memory": 4096}, False, 1000),
    ("mig", {"mig": "3g.40gb"}, True, 429),
    ("mig-with-attribute", {"mig": "1g.10gb+me"}, True, 143),
    ("cpu-only", {}, True, 0),
]


class ApiServer:
    """Answers the calls the scheduler and governance make, from the objects it holds."""

    def __init__(self, pod: Json) -> None:
        self.pod = pod
        self.binding: Json | None = None

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if request.method == "POST" and path.endswith("/binding"):
            self.binding = json.loads(request.content)
            return httpx2.Response(201, json={})
        if request.method == "GET":
            lists = {
                f"{GROUP}/gpupools": [],
                f"{GROUP}/gpuqueues": [QUEUE],
                "/api/v1/pods": [self.pod],
            }
            if path in lists:
                return httpx2.Response(200, json={"items": lists[path], "metadata": {}})
            return httpx2.Response(200, json=self.pod)
        return httpx2.Response(200, json={})


def _bound(pod: Json, binding: Json) -> Json:
    """The pod as the API server stores it after the Binding: node and annotations set."""
    bound = json.loads(json.dumps(pod))
    bound["spec"]["nodeName"] = binding["target"]["name"]
    bound["metadata"]["annotations"].update(binding["metadata"]["annotations"])
    bound["metadata"]["resourceVersion"] = "2"
    bound["status"] = {"phase": "Running"}
    return bound


async def _schedule(server: ApiServer, memory_known: bool) -> LiveScheduler:
    client = httpx2.AsyncClient(base_url="https://api", transport=httpx2.MockTransport(server))
    scheduler = LiveScheduler(KubeAPI(client), LiveConfig(identity="test"), signer=SIGNER)
    scheduler.state.restart()
    scheduler.leading = True
    queue = msgspec.convert(QUEUE, PolicyObjectRecord)
    scheduler.policies.queues.store[queue.metadata.uid] = queue
    scheduler.policies.queues.handler(ADDED, queue)
    node = node_dict("n0", gpus=4, model="A100", gpu_memory_mib=81920, mig=MIG)
    if not memory_known:
        del node["metadata"]["labels"]["gpupool.io/gpu-memory-mib"]
    scheduler.nodes.handler(ADDED, msgspec.convert(node, NodeRecord))
    scheduler.pods.handler(ADDED, msgspec.convert(server.pod, PodRecord))
    await scheduler.cycle()
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.gather(*scheduler.binder.tasks)
    assert server.binding is not None, "the scheduler bound the pod"
    server.pod = _bound(server.pod, server.binding)
    scheduler.pods.handler(MODIFIED, msgspec.convert(server.pod, PodRecord))
    await scheduler.cycle()  # the bound pod is charged to its queue
    return scheduler


async def _cost(scheduler: LiveScheduler, store: Path) -> tuple[float, float, float]:
    """A governance pass an hour after the bind: the ledger's GPU-hours, the stored units and
    the cost report's GPU-hours."""
    engine = await open_store(f"sqlite+aiosqlite:///{store}")
    try:
        async with StoreWriter(engine) as writer:
            later = time.time() + 3600.0
            controller = GovernanceController(
                GovernancePort(scheduler), GovernanceConfig(), writer, clock=lambda: later
            )
            await controller.run_pass()
            await writer.flush()
        start = datetime.now(UTC) - timedelta(hours=1)
        end = datetime.fromtimestamp(later, UTC)
        (stored,) = await allocations_overlapping(engine, start, end)
        report = await cost_report(engine, start, end, GroupBy.QUEUE, end)
        billed = {usage.group: usage.gpu_hours for usage in report.groups}
    finally:
        await engine.dispose()
    return controller.stats.queue_gpu_hours["team"], stored.units, billed["team"]


@pytest.mark.parametrize(
    ("request_", "memory_known", "milli"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_quota_cost_and_api_count_the_same_gpu_units(
    request_: dict[str, Any], memory_known: bool, milli: int, tmp_path: Path
) -> None:
    server = ApiServer(pod_dict("p", namespace="ml", **request_))
    scheduler = await _schedule(server, memory_known)
    units = milli / 1000

    book = scheduler.book
    assert int(book.ledger.used.sum()) == milli  # the quota's integer count
    queue_status = scheduler.desired_status()[f"{GROUP}/gpuqueues/team"]
    assert queue_status["allocatedGPUUnits"] == units

    hours, stored, billed = await _cost(scheduler, tmp_path / "store.db")
    assert stored == units  # the allocation row the cost report reads
    assert hours == pytest.approx(units, rel=1e-3)  # an hour held
    assert billed == pytest.approx(units, rel=1e-3)

    frozen = LiveView(SchedulerReader(scheduler)).detached()
    (team,) = view.teams(frozen)
    assert (team.name, team.used_units) == ("team", units)
    assert {q.name: q.used_units for q in frozen.queues()}["team"] == units
    assert {p.name: p.allocated_units for p in frozen.pools()}["default"] == units
    assert view.cluster(frozen).allocated_units == units
    await scheduler.api.close()
