"""A claim pod is preempted like any other pod, and the preemptor gets the claim's devices.

Found on the real API server: a 2-GPU claim pod of priority 1000 waited for ever behind a
4-GPU claim pod of priority 10 on a full node, because the claim's node check passed only
nodes with free eligible GPUs now, so the victim search had no node to look at.
"""

from __future__ import annotations

import asyncio

from gpupool.retry import Backoff

from ...claim_server import (
    ClaimServer,
    add_pods,
    claim_pod_json,
    delete_pod,
    live_scheduler,
    run_cycles,
)
from ...dra_builders import request_json


def _devices(server: ClaimServer, name: str) -> set[str]:
    status = server.claims[name].get("status", {})
    results = status.get("allocation", {}).get("devices", {}).get("results", [])
    return {r["device"] for r in results}


async def test_a_claim_pod_is_preempted_for_a_higher_priority_claim_pod() -> None:
    server = ClaimServer()
    server.add_claim("low", request_json("gpu.gpupool.io", count=4))
    server.add_claim("urgent", request_json("gpu.gpupool.io", count=2))
    scheduler = await live_scheduler(server)
    scheduler.queue.backoff = Backoff(0.001, 0.001)  # retries at once, not after seconds
    low = claim_pod_json("low", "low")
    low["spec"]["priority"] = 10
    pods = {"low": low}
    add_pods(scheduler, pods)
    await run_cycles(scheduler, server, pods)
    held_by_low = _devices(server, "low")
    assert len(held_by_low) == 4  # every whole GPU of the node

    urgent = claim_pod_json("urgent", "urgent")
    urgent["spec"]["priority"] = 1000
    pods["urgent"] = urgent
    add_pods(scheduler, {"urgent": urgent})
    await run_cycles(scheduler, server, pods)
    assert server.evictions == ["team/low"]
    assert scheduler.preemptions.nominated == {"uid-urgent": "n0"}
    assert "urgent" not in server.bindings  # not before its victim is gone

    delete_pod(scheduler, low)  # the eviction went through
    for _ in range(3):
        await asyncio.sleep(0.01)
        await run_cycles(scheduler, server, pods)
    assert "urgent" in server.bindings
    assert server.claims["low"].get("status", {}).get("allocation") is None  # released
    assert _devices(server, "urgent") <= held_by_low
    assert len(_devices(server, "urgent")) == 2
