"""Grant validation details and the container edits of each isolation mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.agent.fakenvml import preset_devices
from gpupool.agent.grants import ContainerGrant, GpuGrant, HandoffRefusedError, grant_for
from gpupool.agent.isolation import ContainerFile, DeviceNode, IsolationConfig, edits_for
from gpupool.kube.objects.allocation import AllocationRecord, GpuShare, encode
from gpupool.kube.objects.records import (
    Container,
    ObjectMeta,
    PodRecord,
    PodSpecRecord,
    ResourceRequirements,
)

GPUS = preset_devices("h100", "n")


def _pod(containers: list[dict[str, str]], record: AllocationRecord, node: str = "n") -> PodRecord:
    return PodRecord(
        metadata=ObjectMeta(
            name="p",
            namespace="ns",
            uid="u-1",
            annotations={"gpupool.io/allocation": encode(record)},
        ),
        spec=PodSpecRecord(
            node_name=node,
            containers=[
                Container(name=f"c{i}", resources=ResourceRequirements(limits=limits))
                for i, limits in enumerate(containers)
            ],
        ),
    )


def test_containers_split_the_records_gpus_in_spec_order() -> None:
    record = AllocationRecord(
        node="n", kind="whole", gpus=tuple(GpuShare(i, f"GPU-n-{i}") for i in (2, 5, 6))
    )
    pod = _pod([{"gpupool.io/gpu": "1"}, {"gpupool.io/gpu": "2"}], record)
    first = grant_for(pod, "c0", "gpupool.io/gpu", ("a",), "n", GPUS)
    second = grant_for(pod, "c1", "gpupool.io/gpu", ("b", "c"), "n", GPUS)
    assert [g.uuid for g in first.gpus] == ["GPU-n-2"]
    assert [g.uuid for g in second.gpus] == ["GPU-n-5", "GPU-n-6"]


def test_device_count_must_match_the_containers_request() -> None:
    record = AllocationRecord(node="n", kind="whole", gpus=(GpuShare(0, "GPU-n-0"),))
    pod = _pod([{"gpupool.io/gpu": "1"}], record)
    with pytest.raises(
        HandoffRefusedError, match=r"asks for gpupool\.io/gpu: 1 but the kubelet gave 2"
    ):
        grant_for(pod, "c0", "gpupool.io/gpu", ("a", "b"), "n", GPUS)


def test_pod_on_another_node_and_unknown_container() -> None:
    record = AllocationRecord(node="n", kind="whole", gpus=(GpuShare(0, "GPU-n-0"),))
    with pytest.raises(HandoffRefusedError, match="bound to node 'm', not 'n'"):
        grant_for(
            _pod([{"gpupool.io/gpu": "1"}], record, node="m"),
            "c0",
            "gpupool.io/gpu",
            ("a",),
            "n",
            GPUS,
        )
    with pytest.raises(HandoffRefusedError, match="no container named 'zz'"):
        grant_for(
            _pod([{"gpupool.io/gpu": "1"}], record), "zz", "gpupool.io/gpu", ("a",), "n", GPUS
        )


def test_unreadable_record() -> None:
    pod = _pod([{"gpupool.io/gpu": "1"}], AllocationRecord(node="n", kind="whole"))
    broken = PodRecord(
        metadata=ObjectMeta(name="p", namespace="ns", annotations={"gpupool.io/allocation": "{"}),
        spec=pod.spec,
    )
    with pytest.raises(HandoffRefusedError, match="not JSON"):
        grant_for(broken, "c0", "gpupool.io/gpu", ("a",), "n", GPUS)


def test_mig_grant_is_the_kubelets_instance_of_the_right_profile() -> None:
    gpus = preset_devices("a100-mig", "n")
    record = AllocationRecord(node="n", kind="mig", mig_profile="1g.10gb")
    pod = _pod([{"gpupool.io/mig-1g.10gb": "1"}], record)
    grant = grant_for(pod, "c0", "gpupool.io/mig-1g.10gb", ("MIG-n-2-3",), "n", gpus)
    assert grant.gpus == (GpuGrant("MIG-n-2-3", 2),)
    with pytest.raises(HandoffRefusedError, match=r"is not a 1g\.10gb MIG device"):
        grant_for(pod, "c0", "gpupool.io/mig-1g.10gb", ("GPU-n-5::0",), "n", gpus)


SHARE = ContainerGrant("u", "ns", "p", "c", (GpuGrant("GPU-a", 3, 250, 8192, exclusive=False),))


def test_mps_edits() -> None:
    edits = edits_for(SHARE, IsolationConfig("mps"))
    assert edits.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
    assert edits.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert DeviceNode("/dev/nvidia3", "/dev/nvidia3") in edits.device_nodes
    assert [m.container_path for m in edits.mounts] == ["/var/run/gpupool/mps/pipe", "/dev/shm"]
    assert edits.files == (
        ContainerFile(
            "/etc/gpupool/limits",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M\nCUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n",
        ),
    )


def test_visible_mode_and_exclusive_grants_have_no_caps() -> None:
    for edits in (
        edits_for(SHARE, IsolationConfig("visible")),
        edits_for(
            ContainerGrant("u", "ns", "p", "c", (GpuGrant("GPU-a", 0),)), IsolationConfig("mps")
        ),
    ):
        assert set(edits.env) == {
            "NVIDIA_VISIBLE_DEVICES",
            "CUDA_VISIBLE_DEVICES",
            "GPUPOOL_POD_UID",
        }
        assert not edits.mounts
        assert not edits.files


def test_unknown_isolation_mode() -> None:
    with pytest.raises(ValueError, match="isolation mode must be one of mps, hami, visible"):
        IsolationConfig("magic")


def test_hami_is_preloaded_by_a_read_only_file_not_the_environment() -> None:
    edits = edits_for(SHARE, IsolationConfig("hami", hami_library=Path("/opt/hami/libvgpu.so")))
    assert "LD_PRELOAD" not in edits.env  # `unset LD_PRELOAD` must not unload HAMi-core
    assert edits.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"
    assert edits.env["CUDA_DEVICE_SM_LIMIT"] == "25"
    files = {file.container_path: file.content for file in edits.files}
    assert files == {
        "/etc/ld.so.preload": "/usr/local/gpupool/libvgpu.so\n",
        "/etc/gpupool/limits": "CUDA_DEVICE_MEMORY_LIMIT_0=8192m\nCUDA_DEVICE_SM_LIMIT=25\n",
    }
    (library,) = edits.mounts
    assert (library.host_path, library.read_only) == ("/opt/hami/libvgpu.so", True)
    # nothing shared with other containers outside MPS: no /dev/shm, no MPS pipe
    assert not any(
        m.container_path.startswith(("/dev/shm", "/var/run/gpupool")) for m in edits.mounts
    )


def test_device_nodes_come_from_the_device_root() -> None:
    edits = edits_for(SHARE, IsolationConfig("visible", device_root=Path("/var/lib/fake-dev")))
    assert edits.device_nodes == (
        DeviceNode("/dev/nvidiactl", "/var/lib/fake-dev/nvidiactl"),
        DeviceNode("/dev/nvidia-uvm", "/var/lib/fake-dev/nvidia-uvm"),
        DeviceNode("/dev/nvidia-uvm-tools", "/var/lib/fake-dev/nvidia-uvm-tools"),
        DeviceNode("/dev/nvidia3", "/var/lib/fake-dev/nvidia3"),
    )
