"""A forged or missing allocation: the agent refuses to start the container, with a clear
message, and leaves nothing a runtime could start it with.

A record the scheduler did not sign (or signed for another pod, or signed with the retired HMAC
scheme) is refused even when every field agrees with the pod, and reported on the pod.
"""

from __future__ import annotations

import msgspec
import pytest

from gpupool.core.model import RequestKind
from gpupool.kube.objects.allocation import AllocationRecord, GpuShare, decode, encode
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION, RESOURCE_GPU

from .kubelet import ContainerStartError
from .node import SCHEDULER, agent_node, share_pod, signed


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


def _resigned(pod: dict[str, object], how: str) -> None:
    """Replace the pod's valid signature as a forger would (``how``)."""
    metadata = pod["metadata"]
    assert isinstance(metadata, dict)
    record = decode(metadata["annotations"][ANNOTATION_ALLOCATION])
    sig = {
        "unsigned": "",
        "hmac": "ab" * 32,  # what the scheduler wrote before the Ed25519 scheme
        "another pod's": SCHEDULER.sign(record, "11111111-1111-4111-8111-111111111111").sig,
        "edited": record.sig,
    }[how]
    if how == "edited":  # a field changed after signing: the signature no longer matches
        record = msgspec.structs.replace(record, scheduler="someone-else")
    metadata["annotations"][ANNOTATION_ALLOCATION] = encode(
        msgspec.structs.replace(record, sig=sig)
    )


@pytest.mark.parametrize("how", ["unsigned", "hmac", "another pod's", "edited"])
async def test_a_record_the_scheduler_did_not_sign_for_this_pod_is_refused(how: str) -> None:
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        pod = share_pod("forged", [(1, "GPU-node-a-1")], cores=20, memory_mib=4096)
        _resigned(pod, how)
        node.pods.put(pod)
        await node.kubelet.admit(pod)
        with pytest.raises(ContainerStartError) as refused:
            await node.kubelet.start_container(pod["metadata"]["uid"], "main")
        text = str(refused.value)
        assert "pod team-a/forged container 'main': gpupool.io/allocation.sig: not signed" in text
        assert ("retired HMAC scheme" in text) is (how == "hmac")
        assert not list(node.kubelet.cdi_dir.glob("*.json")), "a spec exists for a refused pod"
        ((reported, message),) = node.events
        assert reported == "team-a/forged"
        assert "not signed by this cluster's gpupool scheduler" in message
        # the same pod, signed by the scheduler, starts
        node.pods.put(signed(pod))
        started = await node.kubelet.start_container(pod["metadata"]["uid"], "main")
        assert started.env["CUDA_VISIBLE_DEVICES"] == "GPU-node-a-1"


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


async def test_shares_start_up_to_the_pools_overcommit_and_no_further() -> None:
    """The capacity the scheduler packs a Shared pool's GPU to is what the node lets start."""
    async with agent_node("h100", overcommit=(2.0, 1.5)) as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        sizes = [(70, 40960), (50, 40960), (60, 40000)]  # 180% of compute, 149% of memory
        for i, (cores, mib) in enumerate(sizes):
            await node.run(share_pod(f"s{i}", [(4, "GPU-node-a-4")], cores=cores, memory_mib=mib))
        over = share_pod("over", [(4, "GPU-node-a-4")], cores=30, memory_mib=1024)
        with pytest.raises(ContainerStartError, match=r"oversubscribed \(compute 2100/2000"):
            await node.run(over)


async def test_a_node_refusal_is_remembered_by_kind_and_a_pods_fault_is_not() -> None:
    """What the agent will tell the scheduler: the node's refusals, never a tenant's bad pod."""
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        assert node.handoff is not None
        forged = share_pod("forged", [(1, "GPU-node-a-1")], cores=20, memory_mib=4096)
        forged["metadata"]["annotations"][ANNOTATION_ALLOCATION] = encode(
            _forged([GpuShare(1, "GPU-node-a-1", 200, 40960)])
        )
        with pytest.raises(ContainerStartError):
            await node.run(forged)
        assert node.handoff.refusals.current() == {}
        await node.run(share_pod("big", [(4, "GPU-node-a-4")], cores=70, memory_mib=40960))
        with pytest.raises(ContainerStartError, match="oversubscribed"):
            await node.run(share_pod("more", [(4, "GPU-node-a-4")], cores=50, memory_mib=1024))
        assert set(node.handoff.refusals.current()) == {RequestKind.SHARE}
        await node.run(share_pod("fits", [(5, "GPU-node-a-5")], cores=50, memory_mib=1024))
        assert node.handoff.refusals.current() == {}  # a share started: the node takes shares


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
        node.pods.put(signed(new))
        with pytest.raises(ContainerStartError, match="deleted and re-created"):
            await node.kubelet.start_container(old["metadata"]["uid"], "main")  # a restart


async def test_a_share_is_refused_while_the_mps_daemon_is_missing() -> None:
    """No MPS daemon (its shm folder absent): the pod is told why, instead of the runtime
    failing every start of its container on the mount."""
    async with agent_node("h100", isolation="mps") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        shm = node.isolation.mps_root / "shm"
        shm.rmdir()
        pod = share_pod("early", [(0, "GPU-node-a-0")], cores=20, memory_mib=4096)
        node.pods.put(pod)
        await node.kubelet.admit(pod)
        with pytest.raises(ContainerStartError, match=f"{shm} missing on the node: the MPS"):
            await node.kubelet.start_container(pod["metadata"]["uid"], "main")
        shm.mkdir()  # the daemon is up: the same pod starts
        started = await node.kubelet.start_container(pod["metadata"]["uid"], "main")
        assert started.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"
