"""The claims phase's check catches a claim pod bound away from its claim, or without one."""

from __future__ import annotations

from typing import Any

from benchlib.live_claims import BENCH_DRIVER, claim_manifest, claims_summary, node_slice
from benchlib.live_setup import pod_manifest

from gpupool.devcluster.fakenodes import FakeGpuNode

Json = dict[str, Any]
LABEL = ("bench", "claims")


def _bound(name: str, node: str) -> Json:
    pod = pod_manifest(name, "gpupool-claims", {"bench": "claims"}, claim=name)
    pod["metadata"]["namespace"] = "bench-claims"
    pod["spec"]["nodeName"] = node
    return pod


def _allocated(name: str, node: str, device: str = "gpu-0") -> Json:
    claim = claim_manifest(name)
    claim["metadata"]["namespace"] = "bench-claims"
    result = {"request": "gpu", "driver": "gpu.gpupool.io", "pool": node, "device": device}
    claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    return claim


def _slices() -> list[Json]:
    return [node_slice(FakeGpuNode(n, gpus=2), f"uid-{n}", LABEL) for n in ("n0", "n1")]


def test_the_claim_pod_asks_by_claim_only_and_the_slice_lists_every_gpu() -> None:
    pod = _bound("p-1", "n0")
    (container,) = pod["spec"]["containers"]
    assert container["resources"] == {"claims": [{"name": "gpu"}]}
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "p-1"}]
    assert pod["spec"]["schedulerName"] == "gpupool"
    (first, *_) = _slices()
    assert first["metadata"]["labels"]["bench"] == "claims"
    assert len(first["spec"]["devices"]) == 2


def test_pods_on_their_claims_nodes_pass() -> None:
    pods = [_bound("a", "n0"), _bound("b", "n1")]
    summary = claims_summary(pods, [_allocated("a", "n0"), _allocated("b", "n1")], _slices())
    assert summary["ok"], summary
    assert summary["claims_allocated_on_their_pods_node"] == 2


def test_a_pod_bound_away_from_its_claim_or_without_one_fails() -> None:
    pods = [_bound("a", "n1"), _bound("b", "n1")]
    unallocated = claim_manifest("b")
    unallocated["metadata"]["namespace"] = "bench-claims"
    claims = [_allocated("a", "n0"), unallocated]
    summary = claims_summary(pods, claims, _slices())
    assert not summary["ok"]
    assert summary["problems"] == [
        "a: bound to n1, its claim allocated elsewhere",
        "b: bound to n1 with its claim unallocated",
    ]


def test_one_gpu_given_to_two_claims_fails() -> None:
    pods = [_bound("a", "n0"), _bound("b", "n0")]
    claims = [_allocated("a", "n0"), _allocated("b", "n0")]
    summary = claims_summary(pods, claims, _slices())
    assert not summary["ok"]
    assert "given whole and to others" in summary["problems"][0]


def test_kube_scheduler_claims_are_checked_under_the_bench_driver() -> None:
    pod = pod_manifest("k", "kube-scheduler-claims", {"bench": "kclaims"}, claim="k")
    assert "schedulerName" not in pod["spec"]  # kube-scheduler's pod
    pod["spec"]["nodeName"] = "n0"
    claim = claim_manifest("k", BENCH_DRIVER)
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == BENCH_DRIVER
    slices = [node_slice(FakeGpuNode("n0", gpus=2), "uid-n0", LABEL, BENCH_DRIVER)]
    assert slices[0]["spec"]["driver"] == BENCH_DRIVER
    twin = claim_manifest("twin", BENCH_DRIVER)
    for held in (claim, twin):
        held["metadata"]["namespace"] = "bench-kclaims"
        result = {"request": "gpu", "driver": BENCH_DRIVER, "pool": "n0", "device": "gpu-0"}
        held["status"] = {"allocation": {"devices": {"results": [result]}}}

    summary = claims_summary([pod], [claim], slices, BENCH_DRIVER)
    assert summary["ok"], summary
    assert summary["claims_allocated_on_their_pods_node"] == 1
    # the same device given to a second claim is caught under that driver too
    assert not claims_summary([pod], [claim, twin], slices, BENCH_DRIVER)["ok"]
    # read as gpupool's, the kube-scheduler allocation is no allocation at all
    assert not claims_summary([pod], [claim], slices)["ok"]


def test_the_bench_drivers_gpus_are_exclusive_and_a_partial_allocation_fails() -> None:
    ours = node_slice(FakeGpuNode("n0", gpus=1), "uid-n0", LABEL)
    theirs = node_slice(FakeGpuNode("n0", gpus=1), "uid-n0", LABEL, BENCH_DRIVER)
    assert ours["spec"]["devices"][0]["allowMultipleAllocations"] is True
    assert "capacity" in ours["spec"]["devices"][0]
    assert set(theirs["spec"]["devices"][0]) == {"name", "attributes"}

    pod = _bound("a", "n0")
    claim = _allocated("a", "n0")
    # what kube-scheduler gives a capacity-less request on a shared device: none of it
    consumed = {"memory": "0", "compute": "0"}
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = consumed
    summary = claims_summary([pod], [claim], [ours])
    assert not summary["ok"]
    assert summary["problems"][0].startswith("bench-claims/a: n0/gpu-0 given in part")
