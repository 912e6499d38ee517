"""Agent restart and kubelet restart: running pods keep their allocations, nothing leaks."""

from __future__ import annotations

import asyncio

from gpupool.agent.cdi import spec_tokens
from gpupool.kube.objects.vocabulary import RESOURCE_GPU

from .kubelet import TestKubelet
from .node import AgentNode, agent_node, share_pod


async def _run_five(node: AgentNode) -> dict[str, dict[str, str]]:
    await node.kubelet.wait_devices(RESOURCE_GPU, 32)
    envs = {}
    for i in range(5):
        pod = share_pod(
            f"run-{i}", [(i, f"GPU-node-a-{i}")], cores=20 + i, memory_mib=2048 * (i + 1)
        )
        started = await node.run(pod)
        envs[pod["metadata"]["uid"]] = started.env
    return envs


async def test_agent_restart_keeps_running_pods_and_collects_ended_ones() -> None:
    async with agent_node("h100") as node:
        before = await _run_five(node)
        await node.stop_agent()
        node.kubelet.registered.clear()
        await node.start_agent()  # same state folder, fresh process state
        await asyncio.wait_for(node.kubelet.registered.wait(), 20)
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        for uid, env in before.items():  # a container restarts: PreStart again
            again = await node.kubelet.start_container(uid, "main")
            assert again.env == env
        ended = next(iter(before))
        await node.kubelet.remove_pod(ended)
        assert node.handoff is not None
        assert await node.handoff.reconcile() == []  # unheld, but not for long enough yet
        node.now[0] += 61
        dead = await node.handoff.reconcile()
        assert len(dead) == 1
        tokens = spec_tokens(node.kubelet.cdi_dir)
        assert len(tokens) == 4
        assert set(node.handoff.tokens) == tokens
        assert before[ended]["GPUPOOL_HANDOFF_TOKEN"] not in tokens


async def test_kubelet_restart_reregisters_and_recovers_allocations() -> None:
    async with agent_node("h100") as node:
        before = await _run_five(node)
        registrations = node.host.registrations if node.host else 0
        await node.kubelet.stop()
        node.kubelet = TestKubelet(node.root)  # a new kubelet process, same checkpoint
        await node.kubelet.start()
        await asyncio.wait_for(node.kubelet.registered.wait(), 20)
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        assert node.host is not None
        assert node.host.registrations == registrations + 1
        assert node.handoff is not None
        # the restarted kubelet lists no pod until it read them again: nothing is collected
        assert await node.handoff.reconcile() == []
        node.now[0] += 30
        assert await node.handoff.reconcile() == []
        for uid in before:
            node.kubelet.readd(node.pods.by_uid(uid))
        node.now[0] += 60
        assert await node.handoff.reconcile() == []
        for uid, env in before.items():
            again = await node.kubelet.start_container(uid, "main")
            assert again.env == env
        # a new pod does not get devices the running pods hold
        newcomer = share_pod("new", [(7, "GPU-node-a-7")], cores=10, memory_mib=1024)
        started = await node.run(newcomer)
        assert started.env["CUDA_VISIBLE_DEVICES"] == "GPU-node-a-7"
        for uid in [*before, newcomer["metadata"]["uid"]]:
            await node.kubelet.remove_pod(uid)
        await node.handoff.reconcile()
        node.now[0] += 61
        await node.handoff.reconcile()
        assert spec_tokens(node.kubelet.cdi_dir) == set()
        assert node.handoff.tokens == {}


async def test_an_ended_pod_does_not_block_its_successor_before_collection() -> None:
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        first = share_pod("first", [(3, "GPU-node-a-3")], cores=80, memory_mib=70000)
        node.pods.put(first)
        await node.kubelet.admit(first)
        await node.kubelet.start_container(first["metadata"]["uid"], "main")
        await node.kubelet.remove_pod(first["metadata"]["uid"])  # its token is not collected yet
        second = share_pod("second", [(3, "GPU-node-a-3")], cores=60, memory_mib=40000)
        started = await node.run(second)
        assert started.env["CUDA_VISIBLE_DEVICES"] == "GPU-node-a-3"


async def test_an_agent_started_while_its_predecessor_still_serves_takes_over() -> None:
    """A new agent pod may start while the old one still terminates (a DaemonSet replaced by
    the next install, a rolling update with surge): it must register, not be refused as the
    old plugin's socket path, and its GPUs must be the ones the kubelet hands out."""
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        old = node.kubelet.plugins[RESOURCE_GPU]
        predecessor = node.watcher
        assert predecessor is not None
        await node.start_agent()  # the successor, with the predecessor still serving

        async def taken_over() -> bool:
            while node.kubelet.plugins[RESOURCE_GPU] is old:
                await asyncio.sleep(0.02)
            return True

        await asyncio.wait_for(taken_over(), 10)
        assert not old.orphaned
        predecessor.cancel()  # the old pod's agent ends at last
        await asyncio.gather(predecessor, return_exceptions=True)
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        started = await node.run(share_pod("next", [(3, "GPU-node-a-3")], 10, 1024))
        assert started.env["CUDA_VISIBLE_DEVICES"] == "GPU-node-a-3"
