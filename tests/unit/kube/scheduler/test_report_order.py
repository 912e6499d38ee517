"""A pod's pending reasons land in the order they were decided, whatever the writers' timing."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx2

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.scheduler.writes import PodReporter

from ..builders import pod


async def test_a_later_reason_for_a_pod_waits_for_the_earlier_write_to_land() -> None:
    arrived: list[str] = []
    release = asyncio.Event()

    async def server(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        if "status" in body:
            reason = body["status"]["conditions"][0]["message"]
            arrived.append(reason)
            if reason == "preempting":  # the first write is slow
                await release.wait()
        return httpx2.Response(200, json={})

    client = httpx2.AsyncClient(base_url="https://api", transport=httpx2.MockTransport(server))
    reporter = PodReporter(KubeAPI(client), "test", workers=4)
    urgent = pod("urgent")
    reporter.unschedulable(urgent, "preempting")
    reporter.event(urgent, "Normal", "Preempting", "an Event is not held up")
    reporter.unschedulable(urgent, "waiting for a budget")
    writers = asyncio.create_task(reporter.run())
    try:
        for _ in range(50):
            await asyncio.sleep(0)
        assert arrived == ["preempting"]  # the later reason queued behind it
        assert reporter.written == 1  # the Event went meanwhile
        release.set()
        for _ in range(50):
            await asyncio.sleep(0)
        assert arrived == ["preempting", "waiting for a budget"]
        assert reporter.written == 3
    finally:
        writers.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writers
