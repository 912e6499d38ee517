"""A pod's claims become the core's request, or a refusal that names the field."""

from __future__ import annotations

import msgspec
import pytest

from gpupool.agent.fakenvml import preset_devices
from gpupool.core.model import RequestKind
from gpupool.kube.objects.dra.claim_devices import (
    ClaimTranslation,
    allocation_result,
    gpu_columns,
    translate_pod_claims,
)
from gpupool.kube.objects.dra.device_cache import DeviceCache
from gpupool.kube.objects.dra.records import DeviceClass, ResourceClaim, ResourceClaimTemplate
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import InvalidObjectError

from ...dra_builders import CLASSES, claim, claim_pod, request_json, resource_slice

SLICES = [
    resource_slice("h100-node", preset_devices("h100", "h100-node")),
    resource_slice("a100-node", preset_devices("a100-mig", "a100-node")),
]
OTHER_CLASS = msgspec.convert(
    {"metadata": {"name": "gpu.example.com"}, "spec": {"selectors": []}}, DeviceClass
)


def translate(
    pod: PodRecord,
    *claims: ResourceClaim,
    templates: tuple[ResourceClaimTemplate, ...] = (),
) -> ClaimTranslation:
    by_name = {(c.metadata.namespace, c.metadata.name): c for c in claims}
    by_template = {(t.metadata.namespace, t.metadata.name): t for t in templates}
    classes = {**CLASSES, OTHER_CLASS.metadata.name: OTHER_CLASS}
    result = translate_pod_claims(
        pod,
        lambda ns, n: by_name.get((ns, n)),
        lambda ns, n: by_template.get((ns, n)),
        classes.get,
        SLICES,
        DeviceCache(),
    )
    assert result is not None
    return result


def test_a_share_by_capacity_is_milli_and_mib_per_gpu() -> None:
    c = claim(
        "c", request_json("gpu-share.gpupool.io", capacity={"memory": "20Gi", "compute": "300m"})
    )
    result = translate(claim_pod("p", {"gpu": "c"}), c)
    assert result.spec.kind is RequestKind.SHARE
    assert (result.spec.gpu_count, result.spec.gpu_milli, result.spec.gpu_memory_mib) == (
        1,
        300,
        20480,
    )
    assert result.spec.cpu_milli == 1000
    assert len(result.eligible.by_node["h100-node"]) == 8
    assert len(result.eligible.by_node["a100-node"]) == 4  # the four GPUs not in MIG mode
    allocation = allocation_result(
        result.request, "h100-node", ["gpu-3"], {d.name: d for d in SLICES[0].spec.devices}
    )
    (device,) = allocation.devices.results
    assert device.consumed_capacity == {"memory": "20Gi", "compute": "300m"}  # canonical
    assert device.pool == "h100-node"
    assert device.share_id  # a shared device: each allocation on it has its own id


def test_whole_gpus_and_a_mig_slice() -> None:
    whole = translate(
        claim_pod("p", {"gpu": "c"}), claim("c", request_json("gpu.gpupool.io", count=2))
    )
    assert (whole.spec.kind, whole.spec.gpu_count) == (RequestKind.WHOLE, 2)
    allocation = allocation_result(
        whole.request, "h100-node", ["gpu-0"], {d.name: d for d in SLICES[0].spec.devices}
    )
    assert allocation.devices.results[0].consumed_capacity == {"memory": "81559Mi", "compute": "1"}
    mig = translate(
        claim_pod("m", {"gpu": "c"}), claim("c", request_json("mig-1g.10gb.gpupool.io"))
    )
    assert (mig.spec.kind, mig.spec.mig_profile) == (RequestKind.MIG, "1g.10gb")
    assert mig.eligible.by_node["h100-node"] == ()
    assert len(mig.eligible.by_node["a100-node"]) == 28


def test_selectors_narrow_the_gpus_and_map_onto_snapshot_columns() -> None:
    c = claim(
        "c",
        request_json(
            "gpu.gpupool.io", selectors=['device.attributes["gpu.gpupool.io"].index >= 6']
        ),
    )
    result = translate(claim_pod("p", {"gpu": "c"}), c)
    assert result.eligible.by_node["h100-node"] == ("gpu-6", "gpu-7")
    uuids = [f"GPU-a100-node-{i}" for i in range(4, 8)]  # the node's UUID list: non-MIG GPUs
    assert gpu_columns(result.eligible, "a100-node", uuids) == {2, 3}


def test_a_template_is_translated_before_its_claim_exists() -> None:
    template = msgspec.convert(
        {
            "metadata": {"name": "t", "namespace": "team"},
            "spec": {"spec": {"devices": {"requests": [request_json("gpu.gpupool.io")]}}},
        },
        ResourceClaimTemplate,
    )
    result = translate(claim_pod("p", {}, templates={"gpu": "t"}), templates=(template,))
    assert result.spec.kind is RequestKind.WHOLE
    assert result.request.source.field == "ResourceClaimTemplate team/t spec.spec"


@pytest.mark.parametrize(
    ("request_", "field", "message"),
    [
        (request_json("nope.gpupool.io"), "requests[0].exactly.deviceClassName", "not found"),
        (request_json("gpu.example.com"), "deviceClassName", "not one of gpupool's"),
        (
            request_json("gpu.gpupool.io", selectors=["true", "device.attributes["]),
            "requests[0].exactly.selectors[1].cel.expression",
            "compilation failed",
        ),
        (
            request_json("gpu-share.gpupool.io", capacity={"memory": "200Gi"}),
            "capacity.requests[memory]",
            "more memory than any device has (largest: 81920Mi)",
        ),
        (
            request_json("gpu-share.gpupool.io", capacity={"compute": "2"}),
            "capacity.requests[compute]",
            "more compute than any device has",
        ),
        (request_json("gpu.gpupool.io", count=9), "exactly.count", "must be 1..8"),
        (request_json("mig-1g.10gb.gpupool.io", count=2), "exactly.count", "one MIG slice"),
        (request_json("gpu-share.gpupool.io"), "capacity.requests", "memory and/or compute"),
        (
            request_json("gpu-share.gpupool.io", capacity={"bandwidth": "1"}),
            "capacity.requests[bandwidth]",
            "unknown capacity",
        ),
        (request_json("gpu.gpupool.io", allocationMode="All"), "allocationMode", "ExactCount"),
        ({"name": "gpu", "firstAvailable": [{}]}, "requests[0].exactly", "firstAvailable"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(
    request_: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(InvalidObjectError) as refused:
        translate(claim_pod("p", {"gpu": "c"}), claim("c", request_))
    assert "ResourceClaim team/c spec.devices." in refused.value.field
    assert field in refused.value.field
    assert message in refused.value.message


def test_a_pod_mixing_claims_and_extended_resources_is_refused() -> None:
    pod = claim_pod("p", {"gpu": "c"}, limits={"gpupool.io/gpu": "1"})
    with pytest.raises(InvalidObjectError, match="extended resources and for ResourceClaim"):
        translate(pod, claim("c", request_json("gpu.gpupool.io")))


def test_two_gpupool_requests_in_one_pod_are_refused() -> None:
    pod = claim_pod("p", {"a": "c1", "b": "c2"})
    claims = (
        claim("c1", request_json("gpu.gpupool.io")),
        claim("c2", request_json("gpu.gpupool.io")),
    )
    with pytest.raises(InvalidObjectError, match="one device request per pod"):
        translate(pod, *claims)


def test_a_missing_claim_is_a_pending_reason() -> None:
    with pytest.raises(InvalidObjectError, match=r"spec.resourceClaims\[0\].*not found"):
        translate(claim_pod("p", {"gpu": "absent"}))


def test_an_unhealthy_gpu_is_not_eligible_unless_tolerated() -> None:
    from dataclasses import replace

    gpus = preset_devices("h100", "sick")
    broken = (replace(gpus[0], healthy=False), *gpus[1:])
    sick = resource_slice("sick", broken)
    assert sick.spec.devices[0].taints[0].key == "gpu.gpupool.io/unhealthy"
    c = claim("c", request_json("gpu.gpupool.io"))
    result = translate_pod_claims(
        claim_pod("p", {"gpu": "c"}),
        lambda ns, n: c,
        lambda ns, n: None,
        CLASSES.get,
        [sick],
        DeviceCache(),
    )
    assert result is not None
    assert "gpu-0" not in result.eligible.by_node["sick"]
    tolerant = claim(
        "c",
        request_json(
            "gpu.gpupool.io",
            tolerations=[{"key": "gpu.gpupool.io/unhealthy", "operator": "Exists"}],
        ),
    )
    result = translate_pod_claims(
        claim_pod("p", {"gpu": "c"}),
        lambda ns, n: tolerant,
        lambda ns, n: None,
        CLASSES.get,
        [sick],
        DeviceCache(),
    )
    assert result is not None
    assert "gpu-0" in result.eligible.by_node["sick"]


def test_a_share_of_all_the_compute_and_no_memory_is_a_whole_gpu() -> None:
    c = claim("c", request_json("gpu-share.gpupool.io", capacity={"compute": "1"}))
    result = translate(claim_pod("p", {"gpu": "c"}), c)
    assert (result.request.kind, result.spec.kind) == ("whole", RequestKind.WHOLE)
    allocation = allocation_result(
        result.request, "h100-node", ["gpu-1"], {d.name: d for d in SLICES[0].spec.devices}
    )
    assert allocation.devices.results[0].consumed_capacity == {"memory": "81559Mi", "compute": "1"}


def test_cached_verdicts_follow_the_slices_generation() -> None:
    from dataclasses import replace

    cache = DeviceCache()
    c = claim(
        "c",
        request_json(
            "gpu.gpupool.io", selectors=['device.attributes["gpu.gpupool.io"].model == "H100"']
        ),
    )
    gpus = preset_devices("h100", "n")

    def eligible(generation: int, model: str) -> tuple[str, ...]:
        current = resource_slice("n", tuple(replace(g, model=model) for g in gpus), generation)
        result = translate_pod_claims(
            claim_pod("p", {"gpu": "c"}),
            lambda ns, n: c,
            lambda ns, n: None,
            CLASSES.get,
            [current],
            cache,
        )
        assert result is not None
        return result.eligible.by_node["n"]

    assert len(eligible(1, "H100")) == 8
    assert len(eligible(1, "H100")) == 8  # from the cache
    assert eligible(2, "A100") == ()  # the slice changed: a new generation, new verdicts
