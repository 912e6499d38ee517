"""The device plugin driven over its real gRPC sockets the way the kubelet drives it."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from gpupool.agent.cdi import CDI_KIND
from gpupool.agent.protos.deviceplugin.v1beta1 import api_pb2 as dp
from gpupool.kube.objects.allocation import AllocationRecord, encode
from gpupool.kube.objects.vocabulary import RESOURCE_GPU

from .kubelet import AdmissionError
from .node import agent_node, share_pod, signed


async def test_registers_and_advertises_max_pods_per_gpu_devices_per_gpu() -> None:
    async with agent_node("h100", slots=4) as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        plugin = node.kubelet.plugins[RESOURCE_GPU]
        assert plugin.options.pre_start_required
        assert plugin.options.get_preferred_allocation_available
        assert node.kubelet.allocatable(RESOURCE_GPU) == 32
        assert {device.split("::")[0] for device in plugin.devices} == {
            f"GPU-node-a-{i}" for i in range(8)
        }


async def test_mig_slices_are_their_own_resource() -> None:
    async with agent_node("a100-mig", slots=4) as node:
        await node.kubelet.wait_devices("gpupool.io/mig-1g.10gb", 28)
        await node.kubelet.wait_devices(RESOURCE_GPU, 16)  # 4 non-MIG GPUs x 4 slots


async def test_an_xid_marks_exactly_that_gpus_devices_unhealthy_on_the_stream() -> None:
    async with agent_node("h100", slots=4) as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        node.nvml.inject_xid("GPU-node-a-3", 79)  # fallen off the bus
        assert node.nvml.wait_xid(1000) == ("GPU-node-a-3", 79)
        await node.refresh()
        plugin = node.kubelet.plugins[RESOURCE_GPU]
        for _ in range(200):
            if node.kubelet.allocatable(RESOURCE_GPU) == 28:
                break
            await asyncio.sleep(0.02)
        unhealthy = {d for d, health in plugin.devices.items() if health == "Unhealthy"}
        assert unhealthy == {f"GPU-node-a-3::{slot}" for slot in range(4)}


async def test_an_application_xid_does_not() -> None:
    async with agent_node("h100") as node:
        node.nvml.inject_xid("GPU-node-a-1", 31)  # MMU fault: the application's bug
        assert node.nvml.wait_xid(1000) is None
        assert all(gpu.healthy for gpu in node.nvml.devices())


async def test_allocate_answers_only_a_token_and_prestart_gives_the_pods_own_gpu_and_caps() -> None:
    async with agent_node("h100", slots=4) as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        pod = share_pod("p1", [(5, "GPU-node-a-5")], cores=30, memory_mib=10240)
        node.pods.put(pod)
        await node.kubelet.admit(pod)
        uid = pod["metadata"]["uid"]
        _ids, answer_bytes = node.kubelet.assigned[(uid, "main")][RESOURCE_GPU]
        answer = dp.ContainerAllocateResponse.FromString(answer_bytes)
        # no GPU and no caps are decided in Allocate: only the token
        assert not answer.mounts
        assert not answer.devices
        assert set(answer.envs) == {"GPUPOOL_HANDOFF_TOKEN"}
        assert [d.name for d in answer.cdi_devices] == [
            f"{CDI_KIND}={answer.envs['GPUPOOL_HANDOFF_TOKEN']}"
        ]
        started = await node.kubelet.start_container(uid, "main")
        assert started.env["CUDA_VISIBLE_DEVICES"] == "GPU-node-a-5"
        assert started.env["NVIDIA_VISIBLE_DEVICES"] == "GPU-node-a-5"
        assert started.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"
        assert started.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
        assert started.env["GPUPOOL_POD_UID"] == uid
        assert "/dev/nvidia5" in started.device_nodes
        assert not any(
            n.startswith("/dev/nvidia") and n[11:].isdigit() and n != "/dev/nvidia5"
            for n in started.device_nodes
        )
        assert (str(node.root / "mps" / "pipe"), "/var/run/gpupool/mps/pipe") in started.mounts
        # the daemon's limits were written for this share before its container could start
        limits = (node.root / "mps" / "control" / "limits").read_text().splitlines()
        assert limits == [
            "set_default_active_thread_percentage 30",
            "set_default_device_pinned_mem_limit 5 10240M",
        ]


async def test_whole_gpus_get_visibility_and_no_caps() -> None:
    async with agent_node("h200", slots=4) as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        pod = share_pod("w", [(1, "GPU-node-a-1"), (6, "GPU-node-a-6")], cores=0, memory_mib=0)
        started = await node.run(pod)
        assert started.env["CUDA_VISIBLE_DEVICES"] == "GPU-node-a-1,GPU-node-a-6"
        assert not any(key.startswith("CUDA_MPS_") for key in started.env)
        assert {"/dev/nvidia1", "/dev/nvidia6"} <= set(started.device_nodes)


async def test_hami_mode_sets_hami_core_variables() -> None:
    async with agent_node("t4", slots=4, isolation="hami") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 16)
        pod = share_pod("h", [(2, "GPU-node-a-2")], cores=25, memory_mib=4096)
        started = await node.run(pod)
        assert started.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
        assert started.env["CUDA_DEVICE_SM_LIMIT"] == "25"
        # HAMi-core comes from a read-only /etc/ld.so.preload of its own, not the environment
        assert "LD_PRELOAD" not in started.env
        assert "/etc/ld.so.preload" in dict((c, h) for h, c in started.mounts)


async def test_the_kubelet_refuses_the_33rd_share_on_a_4_slot_8_gpu_node() -> None:
    async with agent_node("h100", slots=4) as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        for i in range(32):
            pod = share_pod(f"s{i}", [(i % 8, f"GPU-node-a-{i % 8}")], cores=10, memory_mib=1024)
            await node.kubelet.admit(pod)
        with pytest.raises(AdmissionError, match="Requested: 1, Available: 0"):
            await node.kubelet.admit(share_pod("s32", [(0, "GPU-node-a-0")], 10, 1024))


async def test_unknown_device_ids_are_refused_by_allocate() -> None:
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        stub = node.kubelet.plugins[RESOURCE_GPU].stub
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.Allocate(
                dp.AllocateRequest(
                    container_requests=[dp.ContainerAllocateRequest(devices_ids=["GPU-x::0"])]
                )
            )
        assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "GPU-x::0" in (error.value.details() or "")


async def test_cdi_spec_is_valid_json_with_one_device() -> None:
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        pod = share_pod("c", [(0, "GPU-node-a-0")], cores=50, memory_mib=0)
        node.pods.put(pod)
        await node.kubelet.admit(pod)
        await node.kubelet.start_container(pod["metadata"]["uid"], "main")
        (spec_file,) = node.kubelet.cdi_dir.glob("*.json")
        spec = json.loads(spec_file.read_text())
        assert spec["cdiVersion"] == "0.6.0"
        assert spec["kind"] == CDI_KIND
        assert len(spec["devices"]) == 1
        env = spec["devices"][0]["containerEdits"]["env"]
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in env
        assert not any(e.startswith("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") for e in env)


async def test_prestart_for_devices_never_allocated_is_refused() -> None:
    async with agent_node("h100") as node:
        await node.kubelet.wait_devices(RESOURCE_GPU, 32)
        stub = node.kubelet.plugins[RESOURCE_GPU].stub
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.PreStartContainer(
                dp.PreStartContainerRequest(devices_ids=["GPU-node-a-0::0"])
            )
        assert error.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "no Allocate answer" in (error.value.details() or "")


async def test_a_mig_slice_is_the_instance_the_kubelet_chose() -> None:
    async with agent_node("a100-mig") as node:
        resource = "gpupool.io/mig-1g.10gb"
        await node.kubelet.wait_devices(resource, 28)
        pod = share_pod("m", [], cores=0, memory_mib=0)
        pod["spec"]["containers"][0]["resources"]["limits"] = {resource: "1"}
        record = AllocationRecord(node="node-a", kind="mig", mig_profile="1g.10gb")
        pod["metadata"]["annotations"]["gpupool.io/allocation"] = encode(record)
        started = await node.run(signed(pod))
        (held,) = node.kubelet.assigned[(pod["metadata"]["uid"], "main")][resource][0]
        assert started.env["CUDA_VISIBLE_DEVICES"] == held
        assert held.startswith("MIG-node-a-")
        assert not any(key.startswith("CUDA_MPS_") for key in started.env)
