"""Device slots, preferred allocation, node publication, pools and the fake NVML."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.agent.devices import advertised, gpu_of, preferred, slot_id
from gpupool.agent.fakenvml import FakeNvml, preset_devices
from gpupool.agent.inventory import publication
from gpupool.agent.nvml import short_model
from gpupool.agent.pools import sharing_for
from gpupool.kube.objects.records import NodeRecord, NodeStatusRecord, ObjectMeta
from gpupool.kube.objects.translate import node_spec
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_GPU_UNHEALTHY,
    ANNOTATION_GPU_UUIDS,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
    RESOURCE_GPU,
)
from gpupool.policy.membership import GpuSharing
from gpupool.policy.spec import DEFAULT_MAX_PODS_PER_GPU


def test_each_gpu_becomes_max_pods_per_gpu_unique_devices() -> None:
    devices = advertised(preset_devices("h100", "n"), 4)[RESOURCE_GPU]
    assert len(devices) == 32
    assert len({d.id for d in devices}) == 32
    assert {gpu_of(d.id) for d in devices} == {f"GPU-n-{i}" for i in range(8)}
    assert slot_id("GPU-n-0", 3) == "GPU-n-0::3"


def test_mig_gpus_are_advertised_as_their_slices_only() -> None:
    resources = advertised(preset_devices("a100-mig", "n"), 4)
    assert len(resources["gpupool.io/mig-1g.10gb"]) == 28
    assert {gpu_of(d.id) for d in resources[RESOURCE_GPU]} == {f"GPU-n-{i}" for i in (4, 5, 6, 7)}


def test_no_slots_advertises_no_gpu_device_and_negative_is_refused() -> None:
    devices = advertised(preset_devices("a100-mig", "n"), 0)  # a node two pools select
    assert devices["gpupool.io/gpu"] == ()
    assert len(devices["gpupool.io/mig-1g.10gb"]) == 28  # MIG instances are real devices
    with pytest.raises(ValueError, match="slots per GPU must be >= 0"):
        advertised(preset_devices("t4", "n"), -1)


def test_unhealthy_gpu_makes_its_slots_unhealthy() -> None:
    gpus = list(preset_devices("t4", "n"))
    gpus[1] = replace(gpus[1], healthy=False)
    devices = advertised(gpus, 2)[RESOURCE_GPU]
    assert {d.id for d in devices if not d.healthy} == {"GPU-n-1::0", "GPU-n-1::1"}


def test_preferred_keeps_required_then_spreads_over_gpus() -> None:
    available = [slot_id(f"G{g}", s) for g in range(3) for s in range(2)]
    assert preferred(available, [], 3) == ["G0::0", "G1::0", "G2::0"]
    assert preferred(available, ["G1::1"], 2) == ["G1::1", "G0::0"]
    assert preferred(available, [], 5)[3:] == ["G0::1", "G1::1"]


def test_publication_lists_schedulable_gpus_and_allocatable_slots() -> None:
    gpus = list(preset_devices("a100-mig", "n"))
    gpus[5] = replace(gpus[5], healthy=False)
    published = publication(tuple(gpus), 4)
    assert published.labels == {LABEL_GPU_MODEL: "A100", LABEL_GPU_MEMORY: "81920"}
    assert published.annotations[ANNOTATION_GPU_UUIDS] == "GPU-n-4,GPU-n-5,GPU-n-6,GPU-n-7"
    assert published.annotations[ANNOTATION_GPU_UNHEALTHY] == "GPU-n-5"
    assert published.allocatable == {RESOURCE_GPU: "12", "gpupool.io/mig-1g.10gb": "28"}


def test_the_scheduler_counts_gpus_not_slots() -> None:
    published = publication(preset_devices("h100", "n"), 4)
    node = NodeRecord(
        metadata=ObjectMeta(
            name="n",
            labels={k: v for k, v in published.labels.items() if v is not None},
            annotations={k: v for k, v in published.annotations.items() if v is not None},
        ),
        status=NodeStatusRecord(allocatable={"cpu": "8", "memory": "8Gi", **published.allocatable}),
    )
    spec = node_spec(node)
    assert published.allocatable[RESOURCE_GPU] == "32"
    assert spec.gpu_count == 8
    assert spec.gpu_model == "H100"
    assert spec.gpu_memory_mib == 81559


def test_pool_decides_slots_and_overcommit() -> None:
    pools = [
        {"metadata": {"name": "b"}, "spec": {"mode": "Shared", "nodeSelector": {"pool": "s"}}},
        {
            "metadata": {"name": "a"},
            "spec": {
                "mode": "Shared",
                "nodeSelector": {"pool": "s"},
                "shared": {"maxPodsPerGPU": 7, "computeOvercommit": 2, "memoryOvercommit": 1.5},
            },
        },
        {"metadata": {"name": "c"}, "spec": {"mode": "Exclusive", "nodeSelector": {"pool": "x"}}},
    ]
    # two pools select it: in none, no GPU pods
    assert sharing_for(pools, {"pool": "s"}).pods_per_gpu == 0
    assert sharing_for(pools[1:], {"pool": "s"}) == GpuSharing(7, 2.0, 1.5)
    assert sharing_for(pools, {"pool": "x"}).pods_per_gpu == 1
    default = sharing_for(pools, {"pool": "none"})  # the default pool
    assert default == GpuSharing(DEFAULT_MAX_PODS_PER_GPU)
    assert sharing_for(pools[:1], {"pool": "s"}).pods_per_gpu == 4  # the CRD default
    assert sharing_for([], {}).pods_per_gpu == DEFAULT_MAX_PODS_PER_GPU


def test_fake_presets_and_models() -> None:
    assert [g.memory_mib for g in preset_devices("h200", "n")][:1] == [143771]
    assert len(preset_devices("t4", "n")) == 4
    with pytest.raises(ValueError, match="unknown fake GPU preset 'v100'"):
        FakeNvml.preset("v100", "n")
    assert short_model("NVIDIA H100 80GB HBM3") == "H100"
    assert short_model("Tesla T4") == "T4"
