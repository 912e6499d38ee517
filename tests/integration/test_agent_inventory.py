"""The agent's inventory on a real API server: labels, UUIDs, allocatable, pool, health, usage."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import msgspec

from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.handoff import HandoffConfig
from gpupool.agent.service import Agent, AgentConfig, ApiPods
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.install.crds import install_crds
from gpupool.kube.objects.records import NodeRecord
from gpupool.kube.objects.translate import node_spec
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_GPU_UNHEALTHY,
    ANNOTATION_GPU_USAGE,
    ANNOTATION_GPU_UUIDS,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
    RESOURCE_GPU,
)

from .live_helpers import NoKubelet


async def _node(api: KubeAPI, name: str) -> NodeRecord:
    return msgspec.json.decode(await api.request("GET", f"/api/v1/nodes/{name}"), type=NodeRecord)


async def test_inventory_pool_health_and_usage_are_published(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    await install_crds(api)
    name = f"gpu-{namespace}"
    await api.create(
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"pool": namespace, "team": "x"}},
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
        },
    )
    pool = {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GPUPool",
        "metadata": {"name": f"shared-{namespace}"},
        "spec": {
            "mode": "Shared",
            "nodeSelector": {"pool": namespace},
            "shared": {"maxPodsPerGPU": 6},
        },
    }
    await api.create("/apis/gpupool.io/v1alpha1/gpupools", pool)
    nvml = FakeNvml.preset("a100-mig", name)
    config = AgentConfig(
        handoff=HandoffConfig(name, tmp_path / "cdi", tmp_path / "state"),
        publish_allocatable=True,
        pool_period=0,
    )
    agent = Agent(config, nvml, api, NoKubelet())

    await agent.refresh_inventory()
    node = await _node(api, name)
    assert node.metadata.labels[LABEL_GPU_MODEL] == "A100"
    assert node.metadata.labels[LABEL_GPU_MEMORY] == "81920"
    assert node.metadata.labels["team"] == "x"  # other labels untouched
    uuids = [f"GPU-{name}-{i}" for i in (4, 5, 6, 7)]  # GPUs 0-3 are in MIG mode
    assert node.metadata.annotations[ANNOTATION_GPU_UUIDS] == ",".join(uuids)
    assert node.status.allocatable[RESOURCE_GPU] == "24"  # 4 GPUs x maxPodsPerGPU 6
    assert node.status.allocatable["gpupool.io/mig-1g.10gb"] == "28"
    assert node.status.allocatable["cpu"] == "64"
    assert node_spec(node).gpu_count == 4  # the scheduler counts GPUs, not devices

    nvml.inject_xid(uuids[1], 79)
    assert nvml.wait_xid(1000) is not None
    await api.patch(
        f"/apis/gpupool.io/v1alpha1/gpupools/shared-{namespace}",
        {"spec": {"shared": {"maxPodsPerGPU": 2}}},
    )
    await agent.refresh_inventory()
    node = await _node(api, name)
    assert node.status.allocatable[RESOURCE_GPU] == "6"  # 3 healthy GPUs x 2
    assert node.metadata.annotations[ANNOTATION_GPU_UNHEALTHY] == uuids[1]

    await agent.sample()
    await agent.publish_usage()
    node = await _node(api, name)
    usage = json.loads(node.metadata.annotations[ANNOTATION_GPU_USAGE])
    assert usage["pods"] == {}
    assert usage["sampledAt"].endswith("Z")


async def test_pods_are_read_from_the_api_server(api: KubeAPI, namespace: str) -> None:
    await api.create(
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"gpupool.io/allocation": "{}"}},
            "spec": {"containers": [{"name": "main", "image": "x"}]},
        },
    )
    pods = ApiPods(api)
    pod = await pods.get(namespace, "p")
    assert pod is not None
    assert pod.metadata.annotations["gpupool.io/allocation"] == "{}"
    assert await pods.get(namespace, "missing") is None


async def test_deploy_manifests_are_accepted_by_the_api_server(api: KubeAPI) -> None:
    import yaml

    repo = Path(__file__).resolve().parents[2]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    paths = {
        "ClusterRole": f"{rbac}/clusterroles",
        "ClusterRoleBinding": f"{rbac}/clusterrolebindings",
        "ServiceAccount": "/api/v1/namespaces/kube-system/serviceaccounts",
        "DaemonSet": "/apis/apps/v1/namespaces/kube-system/daemonsets",
        # the public key's reader, in the scheduler's namespace
        "Role": f"{rbac}/namespaces/gpupool-system/roles",
        "RoleBinding": f"{rbac}/namespaces/gpupool-system/rolebindings",
    }
    with contextlib.suppress(ApiError):  # already there from another test: fine
        await api.create("/api/v1/namespaces", {"metadata": {"name": "gpupool-system"}})
    kinds = []
    for name in ("agent-rbac.yaml", "agent-daemonset.yaml"):
        for document in yaml.safe_load_all((repo / "deploy" / name).read_text()):
            await api.request(
                "POST", paths[document["kind"]], body=document, params={"dryRun": "All"}
            )
            kinds.append(document["kind"])
            if document["kind"] == "DaemonSet":
                spec = document["spec"]["template"]["spec"]
                assert spec["priorityClassName"] == "system-node-critical"
                host_paths = {v["hostPath"]["path"] for v in spec["volumes"]}
                assert {
                    "/var/lib/kubelet/device-plugins",
                    "/var/lib/kubelet/pod-resources",
                    "/var/run/cdi",
                } <= host_paths
    assert sorted(kinds) == sorted(paths)
