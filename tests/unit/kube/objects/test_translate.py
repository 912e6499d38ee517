from __future__ import annotations

from typing import Any

import pytest

from gpupool.core.model import NodeSpec, PodSpec, RequestKind
from gpupool.kube.objects.translate import InvalidObjectError, gpu_uuids, node_spec, pod_spec

from ..builders import Json, decode_node, decode_pod, node, node_dict, pod, pod_dict

LIMIT = "spec.containers[0].resources.limits"
REQUEST = "spec.containers[0].resources.requests"


def with_containers(
    *resources: dict[str, dict[str, str]],
    inits: tuple[dict[str, dict[str, str]], ...] = (),
    overhead: dict[str, str] | None = None,
    **meta: Any,
) -> Json:
    obj = pod_dict("p", cpu="", memory="", **meta)
    obj["spec"]["containers"] = [
        {"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(resources)
    ]
    if inits:
        obj["spec"]["initContainers"] = [
            {"name": f"i{i}", "image": "x", "resources": r} for i, r in enumerate(inits)
        ]
    if overhead:
        obj["spec"]["overhead"] = overhead
    return obj


# -- pod_spec: accepted shapes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"gpus": 1},
            {"gpu_count": 1, "gpu_milli": 1000, "gpu_memory_mib": 0, "kind": RequestKind.WHOLE},
            id="one-whole-gpu",
        ),
        pytest.param(
            {"gpus": 4},
            {"gpu_count": 4, "gpu_milli": 1000, "gpu_memory_mib": 0, "kind": RequestKind.WHOLE},
            id="four-whole-gpus",
        ),
        pytest.param(
            {"gpus": 1, "gpu_memory": 20000},
            {"gpu_count": 1, "gpu_milli": 0, "gpu_memory_mib": 20000, "kind": RequestKind.SHARE},
            id="memory-share",
        ),
        pytest.param(
            {"gpus": 1, "cores": 30},
            {"gpu_count": 1, "gpu_milli": 300, "gpu_memory_mib": 0, "kind": RequestKind.SHARE},
            id="cores-share",
        ),
        pytest.param(
            {"gpus": 2, "cores": 50, "gpu_memory": 8192},
            {"gpu_count": 2, "gpu_milli": 500, "gpu_memory_mib": 8192, "kind": RequestKind.SHARE},
            id="cores-and-memory-share",
        ),
        pytest.param(
            {"gpus": 1, "cores": 100},
            {"gpu_count": 1, "gpu_milli": 1000, "gpu_memory_mib": 0, "kind": RequestKind.WHOLE},
            id="cores-100-is-whole",
        ),
        pytest.param(
            {"gpus": 1, "cores": 1},
            {"gpu_count": 1, "gpu_milli": 10, "kind": RequestKind.SHARE},
            id="cores-1",
        ),
        pytest.param(
            {"mig": "1g.18gb"},
            {"gpu_count": 0, "gpu_milli": 0, "mig_profile": "1g.18gb", "kind": RequestKind.MIG},
            id="mig-slice",
        ),
        pytest.param(
            {},
            {"gpu_count": 0, "gpu_milli": 0, "gpu_memory_mib": 0, "kind": RequestKind.NONE},
            id="cpu-only",
        ),
    ],
)
def test_pod_spec_gpu_shapes(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    spec = pod_spec(pod("p", cpu="500m", memory="2Gi", **fields))
    assert spec.name == "uid-p"
    assert spec.cpu_milli == 500
    assert spec.memory_mib == 2048
    for name, value in expected.items():
        assert getattr(spec, name) == value, name


def test_pod_spec_sums_containers() -> None:
    obj = with_containers(
        {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"gpupool.io/gpu": "1"}},
        {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"gpupool.io/gpu": "2"}},
    )
    spec = pod_spec(decode_pod(obj))
    assert spec.cpu_milli == 750
    assert spec.memory_mib == 1536
    assert spec.gpu_count == 3


@pytest.mark.parametrize(
    ("init_cpu", "init_gpus", "cpu", "gpus"),
    [
        pytest.param("4", "1", 4000, 2, id="init-cpu-larger-than-sum"),
        pytest.param("100m", "4", 1500, 4, id="init-gpus-larger-than-sum"),
        pytest.param("1", "1", 1500, 2, id="sum-larger-than-init"),
    ],
)
def test_pod_spec_init_containers_take_the_max(
    init_cpu: str, init_gpus: str, cpu: int, gpus: int
) -> None:
    obj = with_containers(
        {"requests": {"cpu": "1"}, "limits": {"gpupool.io/gpu": "1"}},
        {"requests": {"cpu": "500m"}, "limits": {"gpupool.io/gpu": "1"}},
        inits=(
            {"requests": {"cpu": "200m"}},
            {"requests": {"cpu": init_cpu}, "limits": {"gpupool.io/gpu": init_gpus}},
        ),
    )
    spec = pod_spec(decode_pod(obj))
    assert spec.cpu_milli == cpu
    assert spec.gpu_count == gpus


def test_pod_spec_adds_overhead_after_the_init_max() -> None:
    obj = with_containers(
        {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"gpupool.io/gpu": "1"}},
        inits=({"requests": {"cpu": "3", "memory": "512Mi"}},),
        overhead={"cpu": "250m", "memory": "128Mi"},
    )
    spec = pod_spec(decode_pod(obj))
    assert spec.cpu_milli == 3250
    assert spec.memory_mib == 1024 + 128


@pytest.mark.parametrize(
    ("resources", "cpu", "gpus"),
    [
        pytest.param({"limits": {"cpu": "2", "gpupool.io/gpu": "2"}}, 2000, 2, id="limits-only"),
        pytest.param({"requests": {"cpu": "2", "gpupool.io/gpu": "2"}}, 2000, 2, id="requests"),
        pytest.param(
            {"requests": {"cpu": "1"}, "limits": {"cpu": "4", "gpupool.io/gpu": "1"}},
            1000,
            1,
            id="request-wins-over-limit",
        ),
    ],
)
def test_pod_spec_limits_count_as_requests_when_alone(
    resources: dict[str, dict[str, str]], cpu: int, gpus: int
) -> None:
    spec = pod_spec(decode_pod(with_containers(resources)))
    assert spec.cpu_milli == cpu
    assert spec.gpu_count == gpus


@pytest.mark.parametrize(
    ("annotation", "models"),
    [
        ("H100|A100", {"H100", "A100"}),
        (" H100 | A100 |", {"H100", "A100"}),
        ("A100", {"A100"}),
        ("", set()),
    ],
)
def test_pod_spec_allowed_models(annotation: str, models: set[str]) -> None:
    spec = pod_spec(pod("p", gpus=1, annotations={"gpupool.io/gpu-model": annotation}))
    assert spec.gpu_models == frozenset(models)


def test_pod_spec_without_model_annotation_allows_any() -> None:
    assert pod_spec(pod("p", gpus=1)).gpu_models == frozenset()


def test_pod_spec_workload_class_from_label() -> None:
    spec = pod_spec(pod("p", gpus=1, labels={"gpupool.io/class": "inference"}))
    assert spec.workload_class == "inference"


def test_pod_spec_is_named_by_uid() -> None:
    first = pod_spec(pod("same", uid="u-1", gpus=1))
    second = pod_spec(pod("same", uid="u-2", gpus=1))
    assert first.name == "u-1"
    assert second.name == "u-2"


# -- pod_spec: refusals name the field ---------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        pytest.param(
            {"limits": {"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "150"}},
            f"{LIMIT}[gpupool.io/gpu-cores]",
            id="cores-150",
        ),
        pytest.param(
            {"limits": {"gpupool.io/gpu": "0.5"}},
            f"{LIMIT}[gpupool.io/gpu]",
            id="fractional-gpu",
        ),
        pytest.param(
            {"limits": {"gpupool.io/gpu": "500m"}},
            f"{LIMIT}[gpupool.io/gpu]",
            id="milli-gpu",
        ),
        pytest.param(
            {"limits": {"gpupool.io/gpu-memory": "8192"}},
            f"{LIMIT}[gpupool.io/gpu-memory]",
            id="memory-share-without-gpu",
        ),
        pytest.param(
            {"limits": {"gpupool.io/gpu-cores": "50"}},
            f"{LIMIT}[gpupool.io/gpu-cores]",
            id="cores-share-without-gpu",
        ),
        pytest.param(
            {"limits": {"gpupool.io/mig-1g.18gb": "1", "gpupool.io/mig-3g.40gb": "1"}},
            "spec.containers[].resources",
            id="two-mig-profiles",
        ),
        pytest.param(
            {"limits": {"gpupool.io/mig-1g.18gb": "1", "gpupool.io/gpu": "1"}},
            "spec.containers[].resources",
            id="mig-and-gpu",
        ),
        pytest.param(
            {"limits": {"gpupool.io/mig-1g.18gb": "2"}},
            f"{LIMIT}[gpupool.io/mig-1g.18gb]",
            id="two-mig-slices",
        ),
        pytest.param(
            {"requests": {"cpu": "-1"}},
            f"{REQUEST}[cpu]",
            id="negative-cpu",
        ),
        pytest.param(
            {"limits": {"gpupool.io/gpu": "-1"}},
            f"{LIMIT}[gpupool.io/gpu]",
            id="negative-gpu",
        ),
        pytest.param(
            {"limits": {"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "0"}},
            f"{LIMIT}[gpupool.io/gpu-cores]",
            id="zero-cores",
        ),
        pytest.param(
            {"requests": {"memory": "lots"}},
            f"{REQUEST}[memory]",
            id="unparsable-memory",
        ),
    ],
)
def test_pod_spec_refusals_name_the_field(resources: dict[str, dict[str, str]], field: str) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        pod_spec(decode_pod(with_containers(resources)))
    assert caught.value.field == field
    assert caught.value.owner == "pod default/p"
    assert field in str(caught.value)


def test_pod_spec_refusal_names_the_second_container() -> None:
    obj = with_containers(
        {"limits": {"gpupool.io/gpu": "1"}},
        {"limits": {"gpupool.io/gpu": "1", "gpupool.io/gpu-cores": "101"}},
    )
    with pytest.raises(InvalidObjectError) as caught:
        pod_spec(decode_pod(obj))
    assert caught.value.field == "spec.containers[1].resources.limits[gpupool.io/gpu-cores]"


def test_pod_spec_refusal_names_the_init_container() -> None:
    obj = with_containers(
        {"requests": {"cpu": "1"}}, inits=({"requests": {"cpu": "500m", "memory": "-1Mi"}},)
    )
    with pytest.raises(InvalidObjectError) as caught:
        pod_spec(decode_pod(obj))
    assert caught.value.field == "spec.initContainers[0].resources.requests[memory]"


def test_pod_spec_refusal_names_the_overhead() -> None:
    obj = with_containers({"requests": {"cpu": "1"}}, overhead={"cpu": "-100m"})
    with pytest.raises(InvalidObjectError) as caught:
        pod_spec(decode_pod(obj))
    assert caught.value.field == "spec.overhead[cpu]"


# -- node_spec ---------------------------------------------------------------------------------


def test_node_spec_gpu_node() -> None:
    spec = node_spec(node("n1", gpus=8, model="H100", gpu_memory_mib=81559, pods="256"))
    assert spec == NodeSpec(
        name="n1",
        cpu_milli=64_000,
        memory_mib=512 * 1024,
        gpu_count=8,
        gpu_model="H100",
        gpu_memory_mib=81559,
        max_pods=256,
        mig_slices=(),
        labels=(
            ("gpupool.io/gpu-memory-mib", "81559"),
            ("gpupool.io/gpu-model", "H100"),
            ("kubernetes.io/hostname", "n1"),
        ),
        extra_resources=(("ephemeral-storage", 100 * 2**30),),
    )


def test_node_spec_cpu_node() -> None:
    spec = node_spec(node("c1", gpus=0, cpu="7500m", memory="3G"))
    assert spec.gpu_count == 0
    assert spec.gpu_model == ""
    assert spec.gpu_memory_mib == 0
    assert spec.cpu_milli == 7500
    assert spec.memory_mib == 2862  # 3e9 bytes = 2861.02 MiB, rounded up


def test_node_spec_defaults_max_pods_to_110() -> None:
    obj = node_dict("n1")
    del obj["status"]["allocatable"]["pods"]
    assert node_spec(decode_node(obj)).max_pods == 110


def test_node_spec_gpus_without_model_label_are_unknown() -> None:
    obj = node_dict("n1", gpus=2)
    del obj["metadata"]["labels"]["gpupool.io/gpu-model"]
    del obj["metadata"]["labels"]["gpupool.io/gpu-memory-mib"]
    spec = node_spec(decode_node(obj))
    assert spec.gpu_model == "unknown"
    assert spec.gpu_memory_mib == 0


def test_node_spec_mig_allocatable() -> None:
    spec = node_spec(
        node("m1", gpus=0, mig={"gpupool.io/mig-3g.40gb": "2", "gpupool.io/mig-1g.18gb": "7"})
    )
    assert spec.mig_slices == (("1g.18gb", 7), ("3g.40gb", 2))


@pytest.mark.parametrize("label", ["80GiB", "-1", "", "8.5"])
def test_node_spec_bad_memory_label_names_the_label(label: str) -> None:
    with pytest.raises(InvalidObjectError) as caught:
        node_spec(node("n1", gpu_memory_mib=label))
    assert caught.value.field == "metadata.labels[gpupool.io/gpu-memory-mib]"
    assert caught.value.owner == "node n1"


@pytest.mark.parametrize(
    ("name", "amount"),
    [
        ("gpupool.io/gpu", "1.5"),
        ("gpupool.io/gpu", "-2"),
        ("cpu", "many"),
        ("memory", "-1Gi"),
        ("pods", "1.5"),
        ("gpupool.io/mig-1g.18gb", "0.5"),
    ],
)
def test_node_spec_bad_allocatable_names_the_field(name: str, amount: str) -> None:
    obj = node_dict("n1")
    obj["status"]["allocatable"][name] = amount
    with pytest.raises(InvalidObjectError) as caught:
        node_spec(decode_node(obj))
    assert caught.value.field == f"status.allocatable[{name}]"


@pytest.mark.parametrize(
    ("allocatable", "unhealthy", "gpus", "broken"),
    [
        ("3", "GPU-n1-1", 4, (1,)),  # one device per GPU: the broken one keeps its index
        ("12", "GPU-n1-0,GPU-n1-3", 4, (0, 3)),  # four slots per healthy GPU
        ("0", "GPU-n1-0,GPU-n1-1,GPU-n1-2,GPU-n1-3", 4, (0, 1, 2, 3)),
        ("0", "GPU-n1-0", 0, ()),  # not registered yet: no GPU to place on at all
        ("4", "GPU-other-0", 4, ()),  # a node cannot take another node's GPU out of service
        ("4", "", 4, ()),
    ],
)
def test_node_spec_unhealthy_gpus_from_the_agent_annotation(
    allocatable: str, unhealthy: str, gpus: int, broken: tuple[int, ...]
) -> None:
    obj = node_dict("n1", gpus=4)
    obj["status"]["allocatable"]["gpupool.io/gpu"] = allocatable
    obj["metadata"]["annotations"]["gpupool.io/gpu-unhealthy"] = unhealthy
    spec = node_spec(decode_node(obj))
    assert (spec.gpu_count, spec.unhealthy_gpus) == (gpus, broken)


# -- gpu_uuids ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "count", "expected"),
    [
        ("GPU-a,GPU-b", 2, ("GPU-a", "GPU-b")),
        ("GPU-a,GPU-b,GPU-c", 2, ("GPU-a", "GPU-b")),
        ("GPU-a", 3, ("GPU-a", "", "")),
        ("", 2, ("", "")),
        ("GPU-a,GPU-b,", 2, ("GPU-a", "GPU-b")),
        ("GPU-a", 0, ()),
        ("GPU-a,,GPU-c", 3, ("GPU-a", "", "GPU-c")),
    ],
)
def test_gpu_uuids(annotation: str, count: int, expected: tuple[str, ...]) -> None:
    obj = node_dict("n1", gpus=count)
    obj["metadata"]["annotations"]["gpupool.io/gpu-uuids"] = annotation
    assert gpu_uuids(decode_node(obj), count) == expected


def test_gpu_uuids_without_annotation() -> None:
    assert gpu_uuids(node("c1", gpus=0), 2) == ("", "")


def test_gpu_uuids_of_a_fake_node() -> None:
    assert gpu_uuids(node("n1", gpus=2), 2) == ("GPU-n1-0", "GPU-n1-1")


def test_pod_spec_equals_core_spec() -> None:
    spec = pod_spec(pod("p", gpus=2, cores=25, gpu_memory=4096, cpu="2", memory="8Gi"))
    assert spec == PodSpec(
        name="uid-p",
        cpu_milli=2000,
        memory_mib=8192,
        gpu_count=2,
        gpu_milli=250,
        gpu_memory_mib=4096,
    )


@pytest.mark.parametrize(
    "source", ["gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi", "azureDisk", "cinder"]
)
def test_an_inline_in_tree_disk_is_refused_naming_the_volume_field(source: str) -> None:
    raw = pod_dict("disk", gpus=1)
    raw["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "data", source: {"volumeID": "vol-1"}},
    ]
    with pytest.raises(InvalidObjectError) as refused:
        pod_spec(decode_pod(raw))
    assert refused.value.field == f"spec.volumes[1].{source}"


def test_claims_and_empty_dirs_are_not_inline_disks() -> None:
    raw = pod_dict("claimed", gpus=1)
    raw["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
    ]
    assert pod_spec(decode_pod(raw)).gpu_count == 1
