"""The Helm chart installed for real on the dev cluster's real node, upgraded and uninstalled.

What a platform team would do: ``helm install`` with the image scripts/build-images.sh built
(imported into the node's containerd; never pulled), every pod Ready by its own probes, then
``helm upgrade`` and ``helm uninstall``. The node has no pod network (loopback CNI only) and no
kube-proxy, so the chart's ``hostNetwork`` and ``apiServer`` settings are on, and the agent
runs on the fake NVML (``agent.fakeGpus``) without the MPS control daemon (no GPU).
"""

from __future__ import annotations

import json

import pytest

from gpupool.kube.client.api import KubeAPI

from .chart import CHART, NAMESPACE, RELEASE, chart_values, helm, ready_pods
from .conftest import Cluster, create_namespace, wait_for

pytestmark = pytest.mark.e2e

INSTANCE = f"app.kubernetes.io/instance={RELEASE}"
# Every kind the chart renders, where a leftover would show after uninstall.
NAMESPACED = {
    "pods": "/api/v1/pods",
    "services": "/api/v1/services",
    "serviceaccounts": "/api/v1/serviceaccounts",
    "secrets": "/api/v1/secrets",
    "configmaps": "/api/v1/configmaps",
    "deployments": "/apis/apps/v1/deployments",
    "daemonsets": "/apis/apps/v1/daemonsets",
    "replicasets": "/apis/apps/v1/replicasets",
    "poddisruptionbudgets": "/apis/policy/v1/poddisruptionbudgets",
    "roles": "/apis/rbac.authorization.k8s.io/v1/roles",
    "rolebindings": "/apis/rbac.authorization.k8s.io/v1/rolebindings",
}
CLUSTER_WIDE = {
    "clusterroles": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "clusterrolebindings": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "mutatingwebhookconfigurations": (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    ),
    "validatingwebhookconfigurations": (
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    ),
    "validatingadmissionpolicies": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    "validatingadmissionpolicybindings": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
}


async def _labelled(api: KubeAPI, collections: dict[str, str]) -> dict[str, list[str]]:
    found = {}
    for kind, path in collections.items():
        listing = await api.get(path, {"labelSelector": INSTANCE})
        names = [item["metadata"]["name"] for item in listing["items"]]
        if names:
            found[kind] = names
    return found


NAMESPACE_DEFAULTS = {("configmaps", "kube-root-ca.crt"), ("serviceaccounts", "default")}


async def _namespace_leftovers(api: KubeAPI, namespace: str) -> dict[str, list[str]]:
    """Objects in ``namespace`` beyond what every namespace has."""
    left: dict[str, list[str]] = {}
    kinds = {**NAMESPACED, "leases": "/apis/coordination.k8s.io/v1/leases"}
    for kind, path in kinds.items():
        scoped = path.replace("/v1/", f"/v1/namespaces/{namespace}/", 1)
        names = [item["metadata"]["name"] for item in (await api.get(scoped))["items"]]
        names = [name for name in names if (kind, name) not in NAMESPACE_DEFAULTS]
        if names:
            left[kind] = names
    return left


@pytest.mark.timeout(1800)  # install, upgrade and uninstall each wait for the pods
async def test_the_chart_installs_upgrades_and_uninstalls_cleanly(
    cluster: Cluster, api: KubeAPI
) -> None:
    values = chart_values(cluster)
    await create_namespace(api, NAMESPACE, exist_ok=True)
    helm(cluster, "install", RELEASE, CHART, "-n", NAMESPACE, *values, "--wait", "--timeout=8m")

    scheduler = await ready_pods(api, NAMESPACE, "gpupool-scheduler")
    webhook = await ready_pods(api, NAMESPACE, "gpupool-webhook")
    agent = await ready_pods(api, "kube-system", "gpupool-agent")
    assert (len(scheduler), len(webhook), len(agent)) == (1, 1, 1)
    assert agent[0]["spec"]["nodeName"] == cluster.node.name
    for pod in (*scheduler, *webhook, *agent):
        (status,) = pod["status"]["containerStatuses"]
        assert status["imageID"], status  # run from the imported image
        assert status["image"] == cluster.images.gpupool

    # the agent, in its pod, registered its fake GPUs with the real kubelet
    async def published() -> bool:
        node = await api.get(f"/api/v1/nodes/{cluster.node.name}")
        return node["status"].get("allocatable", {}).get("gpupool.io/gpu") == "32"

    await wait_for(published, 60, "8 fake H100 x 4 slots of gpupool.io/gpu on the real node")

    # the control plane leads: it holds the Lease under its pod's name (with hostNetwork
    # every replica on a node has the node's host name)
    lease = await api.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/gpupool-scheduler"
    )
    assert lease["spec"]["holderIdentity"] == scheduler[0]["metadata"]["name"]

    # the API server reaches the webhook through its Service, over the chart's certificate
    await create_namespace(api, "helm-tenant")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "asks-for-a-gpu"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": cluster.images.test_workload,
                    "resources": {"limits": {"gpupool.io/gpu": "1"}},
                }
            ]
        },
    }
    admitted = json.loads(
        await api.request(
            "POST",
            "/api/v1/namespaces/helm-tenant/pods",
            body=pod,
            params={"dryRun": "All"},
        )
    )
    assert admitted["spec"]["schedulerName"] == "gpupool"  # the webhook's mutation

    # an upgrade rolls the control plane with the new setting, Ready again
    helm(
        cluster,
        "upgrade",
        RELEASE,
        CHART,
        "-n",
        NAMESPACE,
        *values,
        "--set",
        "controlPlane.logLevel=debug",
        "--wait",
        "--timeout=8m",
    )

    async def rolled() -> bool:
        pods = await ready_pods(api, NAMESPACE, "gpupool-scheduler")
        args = [pod["spec"]["containers"][0]["args"] for pod in pods]
        return len(pods) == 1 and "--log-level=debug" in args[0]

    await wait_for(rolled, 120, "the upgraded control plane Ready")

    # uninstall: nothing the chart made is left, the CRDs excepted (kept on purpose)
    helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=5m")

    async def gone() -> bool:
        left = await _labelled(api, NAMESPACED | CLUSTER_WIDE)
        return not left

    try:
        await wait_for(gone, 120, "every object of the release gone")
    except AssertionError:
        left = await _labelled(api, NAMESPACED | CLUSTER_WIDE)
        raise AssertionError(f"left behind: {left}") from None
    for crd in ("gpupools.gpupool.io", "gpuqueues.gpupool.io"):
        kept = await api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
        assert kept["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # nor anything gpupool made at run time in the release's namespace
    assert await _namespace_leftovers(api, NAMESPACE) == {}
