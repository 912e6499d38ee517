"""A forged or missing allocation: the agent refuses to start the container, with a clear
message, and leaves nothing a runtime could start it with."""

from __future__ import annotations

import pytest

from gpupool.kube.allocation import AllocationRecord, GpuShare
from gpupool.kube.vocabulary import ANNOTATION_ALLOCATION, RESOURCE_GPU

from .kubelet import ContainerStartError
from .node import agent_node, share_pod


def _forged(gpus: list[GpuShare], node: str = "node-a", kind: str = "share") -> AllocationRecord:
    return AllocationRecord(node=node, kind=kind, gpus=tuple(gpus), scheduler="someone")


CASES = {
    "missing": (None, "has no gpupool.io/allocation record"),
    "other node": (
        _forged([GpuShare(1, "GPU-node-a-1", 200, 4096)], node="node-b"),
        "gpupool.io/allocation.node is 'node-b'",
    ),
    "uuid of another gpu": (
        _forged([GpuShare(1, "GPU-node-a-3", 200, 4096)]),
        "uuid 'GPU-node-a-3' is not GPU 1 of this node",
    ),
    "no such gpu": (
        _forged([GpuShare(9, "GPU-node-a-9", 200, 4096)]),
        "index 9: this node has 8 GPUs",
    ),
    "bigger share than asked": (
        _forged([GpuShare(1, "GPU-node-a-1", 200, 40960)]),
        "gives milli=200 memoryMib=40960 but the pod asks for milli=200 memoryMib=4096",
    ),
    "whole gpu for a share": (
        _forged([GpuShare(1, "GPU-node-a-1")], kind="whole"),
        "kind is 'whole' but the pod asks for 'share'",
    ),
    "two gpus for one": (
        _forged([GpuShare(1, "GPU-node-a-1", 200, 4096), GpuShare(2, "GPU-node-a-2", 200, 4096)]),
        "gpus has 2 GPUs but the pod asks for 1",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_forged_or_missing_record_is_refused(case: str) -> None:
    record, message = CASES[case]
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        pod = share_pod("victim", [(1, "GPU-node-a-1")], cores=20, memory_mib=4096, record=record)
        if record is None:
            del pod["metadata"]["annotations"][ANNOTATION_ALLOCATION]
        node.pods.put(pod)
        await node.kubelet.admit(pod)
        with pytest.raises(ContainerStartError) as refused:
            await node.kubelet.start_container(pod["metadata"]["uid"], "main")
        assert message in str(refused.value)
        assert "pod team-a/victim container 'main'" in str(refused.value)
        assert not list(node.kubelet.cdi_dir.glob("*.json")), "a spec exists for a refused pod"


async def test_a_pod_missing_from_the_api_server_is_refused() -> None:
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        pod = share_pod("ghost", [(0, "GPU-node-a-0")], cores=20, memory_mib=4096)
        await node.kubelet.admit(pod)  # never put in node.pods
        with pytest.raises(ContainerStartError, match="team-a/ghost not found"):
            await node.kubelet.start_container(pod["metadata"]["uid"], "main")


async def test_a_record_that_oversubscribes_a_gpu_is_refused() -> None:
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        first = share_pod("first", [(4, "GPU-node-a-4")], cores=70, memory_mib=40960)
        second = share_pod("second", [(4, "GPU-node-a-4")], cores=50, memory_mib=1024)
        for pod in (first, second):
            node.pods.put(pod)
            await node.kubelet.admit(pod)
        await node.kubelet.start_container(first["metadata"]["uid"], "main")
        with pytest.raises(ContainerStartError, match=r"oversubscribed \(compute 1200/1000"):
            await node.kubelet.start_container(second["metadata"]["uid"], "main")


async def test_an_exclusive_gpu_is_not_shared() -> None:
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        whole = share_pod("whole", [(2, "GPU-node-a-2")], cores=0, memory_mib=0)
        share = share_pod("share", [(2, "GPU-node-a-2")], cores=10, memory_mib=1024)
        for pod in (whole, share):
            node.pods.put(pod)
            await node.kubelet.admit(pod)
        await node.kubelet.start_container(whole["metadata"]["uid"], "main")
        with pytest.raises(ContainerStartError, match="exclusive but already given"):
            await node.kubelet.start_container(share["metadata"]["uid"], "main")


async def test_a_replaced_pod_does_not_lend_its_gpus_to_the_old_container() -> None:
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        old = share_pod("web", [(2, "GPU-node-a-2")], cores=20, memory_mib=4096)
        await node.run(old)
        # force-deleted and re-created under the same name, with another UID and GPU
        new = share_pod("web", [(6, "GPU-node-a-6")], cores=50, memory_mib=20000)
        new["metadata"]["uid"] = "99999999-9999-4999-8999-999999999999"
        node.pods.put(new)
        with pytest.raises(ContainerStartError, match="deleted and re-created"):
            await node.kubelet.start_container(old["metadata"]["uid"], "main")  # a restart
