"""``gpupool control-plane`` allocates DRA claims on a real API server, with exactly its RBAC role.

The scheduler runs as a user bound to the shipped ClusterRole, under the admission policies that
let only it allocate gpupool's devices. One kwok node publishes (through this test, as the agent
would) a ResourceSlice of four A100s and a fifth GPU in MIG mode with seven 1g.10gb instances;
gpupool's DeviceClasses are installed from the package. What is checked is read back from the API
server: the claims' allocations and reservations, the pods' Bindings, the pending reasons.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from benchlib.claim_check import claim_problems, claim_results

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.scheduler.dra.claim_writes import DELETE_PROTECTION

from .dra_helpers import claims_by_name, create_claim_pod, node_with_slice, start_claims_scheduler
from .live_helpers import (
    SchedulerProcesses,
    create_priority_class,
    grant_role,
    list_pods,
    pending_reason,
    wait_for,
)

pytestmark = pytest.mark.integration

RESOURCE = "/apis/resource.k8s.io/v1"
Json = dict[str, Any]


async def _settled(api: KubeAPI, namespace: str, count: int) -> bool:
    pods = await list_pods(api, namespace)
    done = [p for p in pods if p["spec"].get("nodeName") or pending_reason(p)]
    return len(done) == count


SHARE = {
    "deviceClassName": "gpu-share.gpupool.io",
    "capacity": {"requests": {"memory": "20Gi", "compute": "300m"}},
}
MIG = {"deviceClassName": "mig-1g.10gb.gpupool.io"}
BAD = {
    "unknown-class": ({"deviceClassName": "nope.gpupool.io"}, "exactly.deviceClassName"),
    # the API server refuses a selector that does not compile (422, naming the field); one that
    # compiles but fails on every device reaches gpupool, which names it in the reason
    "failing-selector": (
        {
            "deviceClassName": "gpu.gpupool.io",
            "selectors": [
                {"cel": {"expression": 'device.attributes["gpu.gpupool.io"].nosuch == 1'}}
            ],
        },
        "exactly.selectors",
    ),
    "too-much-memory": (
        {"deviceClassName": "gpu-share.gpupool.io", "capacity": {"requests": {"memory": "200Gi"}}},
        "exactly.capacity.requests[memory]",
    ),
    "too-many": ({"deviceClassName": "gpu.gpupool.io", "count": 9}, "exactly.count"),
}


async def test_claims_for_a_share_a_mig_slice_and_two_gpus_are_allocated_and_released(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, schedulers: SchedulerProcesses
) -> None:
    slices = await node_with_slice(api, f"{namespace}-n0")
    requests = {
        "share": SHARE,
        "mig": MIG,
        "two": {"deviceClassName": "gpu.gpupool.io", "count": 2},
    }
    for name, request in requests.items():
        await create_claim_pod(api, namespace, name, request)
    for name, (request, _) in BAD.items():
        await create_claim_pod(api, namespace, name, request)
    await start_claims_scheduler(api, control_plane, namespace, schedulers)
    total = len(requests) + len(BAD)
    await wait_for(lambda: _settled(api, namespace, total), 60, "claim pods to settle")

    pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
    claims = await claims_by_name(api, namespace)
    for name in requests:
        assert pods[name]["spec"]["nodeName"] == f"{namespace}-n0", name
        reserved = claims[name]["status"]["reservedFor"]
        assert [r["uid"] for r in reserved] == [pods[name]["metadata"]["uid"]]
        (entry,) = claims[name]["status"]["devices"]  # the signed record, in the same write
        assert "gpupool.io/claim-allocation" in entry["data"]
    (share,) = claim_results(claims["share"])
    assert share["consumedCapacity"] == {"memory": "20Gi", "compute": "300m"}
    (mig,) = claim_results(claims["mig"])
    assert mig["device"].startswith("mig-4-")
    assert len({r["device"] for r in claim_results(claims["two"])}) == 2
    for name, (_, field) in BAD.items():
        assert not pods[name]["spec"].get("nodeName"), name
        assert f"ResourceClaim {namespace}/{name} spec.devices.requests[0].{field}" in (
            pending_reason(pods[name])
        ), pending_reason(pods[name])
    assert claim_problems(claims.values(), slices) == []

    await api.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/two", body={"gracePeriodSeconds": 0}
    )

    async def released() -> bool:
        return not claim_results((await claims_by_name(api, namespace))["two"])

    await wait_for(released, 30, "the deleted pod's claim to be released")


async def test_twenty_claim_pods_in_shuffled_order_share_one_node_without_overlap(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, schedulers: SchedulerProcesses
) -> None:
    slices = await node_with_slice(api, f"{namespace}-n0")
    rng = random.Random(18)
    names = [f"p{i:02d}" for i in range(20)]
    rng.shuffle(names)
    for name in names:
        kind = rng.choice(["share", "share", "mig", "whole"])
        if kind == "share":
            memory, compute = rng.choice([4, 10, 20, 40]), rng.choice([100, 250, 500])
            request = {
                "deviceClassName": "gpu-share.gpupool.io",
                "capacity": {"requests": {"memory": f"{memory}Gi", "compute": f"{compute}m"}},
            }
        elif kind == "mig":
            request = MIG
        else:
            request = {"deviceClassName": "gpu.gpupool.io", "count": rng.choice([1, 2])}
        await create_claim_pod(api, namespace, name, request)
    await start_claims_scheduler(api, control_plane, namespace, schedulers)
    await wait_for(lambda: _settled(api, namespace, len(names)), 60, "claim pods to settle")

    pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
    claims = await claims_by_name(api, namespace)
    bound = {n for n, p in pods.items() if p["spec"].get("nodeName")}
    assert bound
    assert {n for n, c in claims.items() if claim_results(c)} == bound
    assert claim_problems(claims.values(), slices) == []


async def test_a_claim_pod_is_preempted_for_a_higher_priority_claim_pod(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """Four whole GPUs held by a claim of priority 10; a claim pod of priority 1000 wants two."""
    slices = await node_with_slice(api, f"{namespace}-n0")
    await create_priority_class(api, f"{namespace}-low", 10)
    await create_priority_class(api, f"{namespace}-high", 1000)
    four = {"deviceClassName": "gpu.gpupool.io", "count": 4}
    await create_claim_pod(api, namespace, "low", four, priority_class=f"{namespace}-low")
    await start_claims_scheduler(api, control_plane, namespace, schedulers)
    await wait_for(lambda: _settled(api, namespace, 1), 60, "the low-priority claim pod")
    held = {r["device"] for r in claim_results((await claims_by_name(api, namespace))["low"])}
    assert len(held) == 4

    two = {"deviceClassName": "gpu.gpupool.io", "count": 2}
    await create_claim_pod(api, namespace, "urgent", two, priority_class=f"{namespace}-high")

    async def preempted() -> bool:
        pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
        return "low" not in pods and bool(pods["urgent"]["spec"].get("nodeName"))

    await wait_for(preempted, 90, "low evicted and urgent bound")
    claims = await claims_by_name(api, namespace)
    assert not claim_results(claims["low"])  # released with its pod
    urgent = {r["device"] for r in claim_results(claims["urgent"])}
    assert len(urgent) == 2
    assert urgent <= held
    assert claim_problems(claims.values(), slices) == []


TENANT_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims"],
        "verbs": ["create", "get", "list", "delete", "update", "patch"],
    },
]


async def test_a_claim_a_tenant_deletes_under_a_running_pod_keeps_its_gpus_until_the_pod_ends(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """gpupool sets kube-scheduler's delete protection on a claim it allocates.

    Without it, a tenant deleting the claim of a running pod made it vanish at once, and the
    scheduler gave the pod's GPUs to the next pod while the first still held them.
    """
    await node_with_slice(api, f"{namespace}-n0")
    user = f"tenant-{namespace}"
    await grant_role(api, namespace, user, TENANT_RULES)
    tenant = KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(user))
    claim_path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/all"
    try:
        await create_claim_pod(
            tenant, namespace, "all", {"deviceClassName": "gpu.gpupool.io", "count": 4}
        )
        await start_claims_scheduler(api, control_plane, namespace, schedulers)
        await wait_for(lambda: _settled(api, namespace, 1), 60, "the four-GPU claim pod")
        claim = await tenant.get(claim_path)
        assert len(claim_results(claim)) == 4
        assert DELETE_PROTECTION in claim["metadata"]["finalizers"]
        with pytest.raises(ApiError) as refused:  # the admission policy keeps the protection
            await tenant.patch(claim_path, {"metadata": {"finalizers": None}})
        assert "metadata.finalizers: resource.kubernetes.io/delete-protection" in (
            refused.value.message
        )

        await tenant.delete(claim_path)
        claim = await tenant.get(claim_path)  # Terminating, still allocated and reserved
        assert claim["metadata"]["deletionTimestamp"]
        assert len(claim_results(claim)) == 4
        await create_claim_pod(tenant, namespace, "next", {"deviceClassName": "gpu.gpupool.io"})

        async def next_waits() -> bool:
            pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
            return "next" in pods and bool(pending_reason(pods["next"]))

        await wait_for(next_waits, 60, "the next pod pending: the four GPUs are still charged")
        pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
        assert not pods["next"]["spec"].get("nodeName")
        assert pods["all"]["spec"]["nodeName"]

        pod_path = f"/api/v1/namespaces/{namespace}/pods/all"
        await tenant.request("DELETE", pod_path, body={"gracePeriodSeconds": 0})

        async def claim_gone() -> bool:
            return "all" not in await claims_by_name(api, namespace)

        await wait_for(claim_gone, 60, "the deleted claim gone once its pod ended")

        async def next_bound() -> bool:
            pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
            return bool(pods["next"]["spec"].get("nodeName"))

        await wait_for(next_bound, 60, "the next pod bound on a freed GPU")
    finally:
        await tenant.close()
