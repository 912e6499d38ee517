"""The claims phase of ``bench live``: the same pods, each asking for its GPU by a ResourceClaim.

Issue 18 asks whether DRA costs throughput: the same one-GPU pods on the same nodes, once with
``gpupool.io/gpu`` and once with a claim of gpupool's whole-GPU DeviceClass, bound by the same
``gpupool control-plane`` (with ``--claims``) in the same run, alternating ABBA. Everything a
real cluster would hold before the scheduler starts is created first: the DeviceClasses, one
ResourceSlice per node (what the agent publishes, written here because kwok runs no agent) and
one claim per pod. So each bind costs what it costs a user: the claim's record, its allocation
and ``reservedFor``, then the Binding.

The ``kube-scheduler-claims`` phase runs the same claim pods through kube-scheduler's own DRA
allocator, on the same GPUs published as exclusive devices under :data:`BENCH_DRIVER` (see
:func:`node_slice`): the reference implementation's writes (its delete-protection finalizer,
the claim's status, then the Binding), the yardstick for gpupool's claim path.

The check reads the claims and slices back and asks :mod:`benchlib.claim_check`, the checker
the claim tests use, plus one thing it cannot see: each pod's claim is allocated on the node the
pod was bound to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchlib.claim_check import claim_problems, claim_results, partial_results
from gpupool.agent.dra.slice import slice_devices, slice_object
from gpupool.agent.nvml import GpuDevice
from gpupool.devcluster.fakenodes import FakeGpuNode
from gpupool.kube.client.api import ApiError, JsonObject, KubeAPI
from gpupool.kube.install.device_classes import install_device_classes
from gpupool.kube.objects.dra.records import API_VERSION, CLASS_WHOLE, DRIVER, SLICES_PATH

RESOURCE = f"/apis/{API_VERSION}"
PROBLEMS_KEPT = 10
BENCH_DRIVER = "gpu.bench.example.com"
"""The driver of the kube-scheduler phase's devices: kube-scheduler allocates claims of any
driver but gpupool's (the allocation policy and RBAC keep it off ``gpu.gpupool.io``), so the
reference DRA path runs on the same devices under another driver's name."""


def claim_class(driver: str) -> str:
    """The DeviceClass a phase's claims ask for: gpupool's whole GPU, or the bench driver's."""
    return CLASS_WHOLE if driver == DRIVER else driver


def claim_manifest(name: str, driver: str = DRIVER) -> JsonObject:
    """A claim for one whole GPU of ``driver`` (what a ``gpupool.io/gpu: 1`` pod asks)."""
    request = {"name": "gpu", "exactly": {"deviceClassName": claim_class(driver)}}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"devices": {"requests": [request]}},
    }


def node_slice(
    node: FakeGpuNode, uid: str, label: tuple[str, str], driver: str = DRIVER
) -> JsonObject:
    """The slice the agent would publish for a fake node, labelled so the phase can delete it.

    For another driver the same GPUs are exclusive devices under that driver's name, as NVIDIA's
    DRA driver publishes whole GPUs: gpupool's devices allow shares and a request without
    capacity consumes none of them (the policy's default is 0), so kube-scheduler would stack
    every "whole GPU" claim on one device (seen: 12 claim pods on an 8-GPU node). An exclusive
    device is also kube-scheduler's cheapest path, the generous reference.
    """
    gpus = tuple(
        GpuDevice(i, f"GPU-{node.name}-{i}", node.gpu_model, node.gpu_memory_mib, i)
        for i in range(node.gpus)
    )
    body = slice_object(node.name, uid, slice_devices(gpus), 1)
    body["metadata"].setdefault("labels", {})[label[0]] = label[1]
    body["spec"]["driver"] = driver
    if driver != DRIVER:
        for device in body["spec"]["devices"]:
            device.pop("capacity", None)
            device.pop("allowMultipleAllocations", None)
    return body


async def _install_classes(api: KubeAPI, driver: str) -> None:
    if driver == DRIVER:
        if not await install_device_classes(api):
            raise RuntimeError("the API server serves no resource.k8s.io/v1: no claims phase")
        return
    selector = {"cel": {"expression": f'device.driver == "{driver}"'}}
    body = {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": claim_class(driver)},
        "spec": {"selectors": [selector]},
    }
    try:
        await api.create(f"{RESOURCE}/deviceclasses", body)
    except ApiError as error:
        if error.status != 409:
            raise


async def prepare_claims(
    api: KubeAPI,
    namespace: str,
    nodes: Sequence[FakeGpuNode],
    claims: Sequence[str],
    label: tuple[str, str],
    concurrency: int,
    driver: str = DRIVER,
) -> None:
    """The DeviceClasses, a slice per node (``label`` on each) and the named claims.

    Raises:
        RuntimeError: The API server serves no ``resource.k8s.io/v1``.
    """
    await _install_classes(api, driver)
    stored = await api.list_items(f"/api/v1/nodes?labelSelector={label[0]}%3D{label[1]}")
    uids = {item["metadata"]["name"]: item["metadata"]["uid"] for item in stored}
    slices = (node_slice(node, uids[node.name], label, driver) for node in nodes)
    await api.create_all(SLICES_PATH, slices, concurrency)
    manifests = (claim_manifest(name, driver) for name in claims)
    await api.create_all(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaims", manifests, concurrency
    )


async def check_claims(
    api: KubeAPI,
    namespace: str,
    pods: Sequence[JsonObject],
    label: tuple[str, str],
    driver: str = DRIVER,
) -> dict[str, Any]:
    """The phase's claims and slices read back, checked by :func:`claims_summary`."""
    claims = await api.list_items(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")
    slices = await api.list_items(f"{SLICES_PATH}?labelSelector={label[0]}%3D{label[1]}")
    return claims_summary(pods, claims, slices, driver)


def claims_summary(
    pods: Sequence[JsonObject],
    claims: Sequence[JsonObject],
    slices: Sequence[JsonObject],
    driver: str = DRIVER,
) -> dict[str, Any]:
    """Whether the claims hold what they should, and the first problems found.

    ``ok`` when no claim breaks :func:`claim_problems`, every claim holds its devices whole
    (each asks for one whole GPU) and every bound pod's claim is allocated on the pod's node.
    """
    problems = claim_problems(claims, slices, driver) + partial_results(claims, slices, driver)
    by_name = {claim["metadata"]["name"]: claim for claim in claims}
    allocated = 0
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        name = pod["metadata"]["name"]
        claim = by_name.get(pod["spec"]["resourceClaims"][0]["resourceClaimName"])
        results = claim_results(claim, driver) if claim is not None else []
        if not results:
            problems.append(f"{name}: bound to {node} with its claim unallocated")
        elif any(result["pool"] != node for result in results):
            problems.append(f"{name}: bound to {node}, its claim allocated elsewhere")
        else:
            allocated += 1
    return {
        "claims_checked": len(claims),
        "claims_allocated_on_their_pods_node": allocated,
        "problems": problems[:PROBLEMS_KEPT],
        "problem_count": len(problems),
        "ok": not problems,
    }
