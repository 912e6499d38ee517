"""No mix-ups: 20 shares of different sizes bound to one node, admitted in shuffled order and
concurrently; every container gets its own GPU and its own caps. Repeated over random orders
and delays (hypothesis), each example on a fresh node with real gRPC sockets."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.kube.objects.vocabulary import RESOURCE_GPU

from .kubelet import StartedContainer
from .node import agent_node, plan_shares, share_pod


async def _admit_and_start(node: Any, pod: dict[str, Any], rng: random.Random) -> StartedContainer:
    await asyncio.sleep(rng.random() * 0.02)
    await node.kubelet.admit(pod)
    await asyncio.sleep(rng.random() * 0.02)
    return await node.kubelet.start_container(pod["metadata"]["uid"], "main")


async def _scenario(seed: int, restart_each: bool = False) -> None:
    rng = random.Random(seed)
    async with agent_node("h100", slots=4) as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        plan = plan_shares(20, gpus=8, slots=4, seed=seed)
        pods = [
            share_pod(f"share-{i}", [(gpu, f"GPU-node-a-{gpu}")], cores, memory)
            for i, (gpu, cores, memory) in enumerate(plan)
        ]
        for pod in pods:
            node.pods.put(pod)
        order = list(range(len(pods)))
        rng.shuffle(order)
        started = await asyncio.gather(*(_admit_and_start(node, pods[i], rng) for i in order))
        by_uid = {c.env["GPUPOOL_POD_UID"]: c for c in started}
        assert len(by_uid) == 20, "two containers got the same pod's grant"
        for pod, (gpu, cores, memory) in zip(pods, plan, strict=True):
            container = by_uid[pod["metadata"]["uid"]]
            assert container.env["CUDA_VISIBLE_DEVICES"] == f"GPU-node-a-{gpu}"
            assert container.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == str(cores)
            assert container.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory}M"
            assert f"/dev/nvidia{gpu}" in container.device_nodes
        tokens = {c.env["GPUPOOL_HANDOFF_TOKEN"] for c in started}
        assert len(tokens) == 20


async def test_twenty_shares_admitted_concurrently_in_shuffled_order() -> None:
    await _scenario(seed=7)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_twenty_shares_in_random_orders(seed: int) -> None:
    asyncio.run(_scenario(seed))
