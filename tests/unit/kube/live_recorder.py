"""The live scheduler against an in-process recorder of the API server, for unit tests.

The recorder answers Bindings and Evictions and keeps every request, so a test can check exactly
what the scheduler asked for; the helpers feed it policies and read back the reasons it wrote.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import msgspec

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import ADDED
from gpupool.kube.objects.records import PolicyObjectRecord
from gpupool.kube.scheduler.config import LiveConfig
from gpupool.kube.scheduler.live import LiveScheduler

from .builders import SIGNER

Json = dict[str, Any]


class Recorder:
    """Answers like the API server; ``evictions`` is the status every eviction gets."""

    def __init__(self, evictions: int = 201) -> None:
        self.requests: list[tuple[str, str, Json]] = []
        self.evictions = evictions

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content) if request.content else {}
        self.requests.append((request.method, request.url.path, body))
        if request.url.path.endswith("/eviction") and self.evictions == 429:
            message = "Cannot evict pod as it would violate the pod's disruption budget."
            return httpx2.Response(429, json={"kind": "Status", "code": 429, "message": message})
        return httpx2.Response(201, json={})

    def posted(self, suffix: str) -> list[tuple[str, Json]]:
        return [(path, body) for method, path, body in self.requests if path.endswith(suffix)]


def live_scheduler(recorder: Recorder, config: LiveConfig | None = None) -> LiveScheduler:
    """A leading scheduler whose API calls go to ``recorder``."""
    client = httpx2.AsyncClient(base_url="https://api", transport=httpx2.MockTransport(recorder))
    scheduler = LiveScheduler(KubeAPI(client), config or LiveConfig(identity="test"), signer=SIGNER)
    scheduler.state.restart()
    scheduler.leading = True
    return scheduler


def add_policy(scheduler: LiveScheduler, kind: str, name: str, spec: Json) -> None:
    """A GPUPool or GPUQueue as its informer would deliver it."""
    body = {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}
    record = msgspec.json.decode(msgspec.json.encode(body), type=PolicyObjectRecord)
    informer = scheduler.policies.pools if kind == "GPUPool" else scheduler.policies.queues
    informer.store[record.metadata.uid] = record
    informer.handler(ADDED, record)


def reports_of(scheduler: LiveScheduler) -> list[tuple[str, str, Json, str]]:
    """The writes the scheduler queued for the API server (conditions, Events), taken."""
    items: list[tuple[str, str, Json, str]] = []
    while not scheduler.reports.queue.empty():
        items.append(scheduler.reports.queue.get_nowait())
    return items


def reasons_of(reports: list[tuple[str, str, Json, str]]) -> dict[str, str]:
    """Pod name to the PodScheduled=False message written for it."""
    found = {}
    for method, path, body, _ in reports:
        if method == "PATCH" and "conditions" in body.get("status", {}):
            found[path.split("/")[-2]] = body["status"]["conditions"][0]["message"]
    return found


async def settle(scheduler: LiveScheduler) -> None:
    """Let queued tasks run and the bindings in flight finish."""
    for _ in range(20):
        await asyncio.sleep(0)
    if scheduler.binder.tasks:
        await asyncio.gather(*scheduler.binder.tasks)
