"""A Deployment whose pods ask by a ResourceClaimTemplate: kube-controller-manager makes the
claims, gpupool places them, and the replicas share nothing.

The control plane here runs kube-controller-manager (the Deployment and ReplicaSet controllers
make the pods, the resourceclaim controller makes one claim per pod from the template and
deletes it with its pod), so this is the path a user's Deployment takes; only the node is kwok,
with the slice the agent would publish.
"""

from __future__ import annotations

from typing import Any

import pytest
from benchlib.claim_check import claim_problems, claim_results

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import KubeAPI

from .dra_helpers import RESOURCE, claims_by_name, node_with_slice, start_claims_scheduler
from .live_helpers import SchedulerProcesses, grant_role, list_pods, wait_for

pytestmark = pytest.mark.integration

Json = dict[str, Any]
REPLICAS = 3
CONTROLLERS = True  # the conftest's control plane runs kube-controller-manager too
TENANT_RULES = [
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaimtemplates"],
        "verbs": ["create", "get", "list"],
    },
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create", "get", "patch"]},
]


def _deployment(node_label: str, replicas: int) -> Json:
    container = {
        "name": "main",
        "image": "busybox",
        "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]},
    }
    template = {
        "metadata": {"labels": {"app": "trainer"}},
        "spec": {
            "schedulerName": "gpupool",
            "nodeSelector": {"test": node_label},
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "containers": [container],
            "terminationGracePeriodSeconds": 0,
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": template,
        },
    }


async def _claim_template(api: KubeAPI, namespace: str) -> None:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.gpupool.io"}}
    await api.create(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu"},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        },
    )


async def test_a_deployments_replicas_get_a_claim_each_and_share_no_gpu(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, schedulers: SchedulerProcesses
) -> None:
    node = f"{namespace}-n0"
    slices = await node_with_slice(api, node)
    tenant = f"tenant-{namespace}"
    await grant_role(api, namespace, tenant, TENANT_RULES)
    tenant_api = KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(tenant))
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    try:  # the tenant, with rights in its namespace only, writes the template and Deployment
        await _claim_template(tenant_api, namespace)
        await start_claims_scheduler(api, control_plane, namespace, schedulers)
        await tenant_api.create(deployments, _deployment(node, REPLICAS))
    finally:
        await tenant_api.close()

    async def bound() -> bool:
        pods = await list_pods(api, namespace)
        return len(pods) == REPLICAS and all(p["spec"].get("nodeName") == node for p in pods)

    await wait_for(bound, 120, "three replicas bound")
    pods = await list_pods(api, namespace)
    claims = await claims_by_name(api, namespace)
    assert len(claims) == REPLICAS  # one per pod, made from the template by the controller
    devices = set()
    for pod in pods:
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim = claims[status["resourceClaimName"]]
        (owner,) = claim["metadata"]["ownerReferences"]
        assert owner["uid"] == pod["metadata"]["uid"]
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
        (result,) = claim_results(claim)
        assert result["pool"] == node
        devices.add(result["device"])
    assert len(devices) == REPLICAS  # sharing nothing
    assert claim_problems(claims.values(), slices) == []

    await api.patch(f"{deployments}/trainer", {"spec": {"replicas": 1}})  # the tenant could too

    async def scaled_down() -> bool:
        left = await claims_by_name(api, namespace)
        return len(await list_pods(api, namespace)) == 1 and len(left) == 1

    await wait_for(scaled_down, 120, "two replicas and their claims gone")
    (kept,) = (await claims_by_name(api, namespace)).values()
    assert claim_results(kept)  # the remaining replica keeps its GPU
