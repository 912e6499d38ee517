"""The local control plane is a real one: it stores, validates and runs kwok's lifecycle."""

from __future__ import annotations

import asyncio

import pytest

from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.kube.client.api import ApiError, KubeAPI


async def _wait_for(api: KubeAPI, path: str, check: object, timeout: float = 20.0) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        obj = await api.get(path)
        if check(obj):  # type: ignore[operator]
            return obj
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{path} never reached the expected state: {obj.get('status')}")
        await asyncio.sleep(0.2)


async def test_fake_gpu_node_becomes_ready_and_keeps_its_gpus(api: KubeAPI) -> None:
    await create_nodes(api, [FakeGpuNode("cp-node-a", gpus=4, gpu_model="A100")])
    node = await _wait_for(
        api,
        "/api/v1/nodes/cp-node-a",
        lambda n: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in n["status"].get("conditions", [])
        ),
    )
    assert node["status"]["allocatable"]["gpupool.io/gpu"] == "4"
    assert node["metadata"]["labels"]["gpupool.io/gpu-model"] == "A100"
    assert node["metadata"]["annotations"]["gpupool.io/gpu-uuids"].count(",") == 3
    assert "taints" not in node["spec"]


async def test_api_server_validates_and_names_the_field(api: KubeAPI, namespace: str) -> None:
    bad_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bad"},
        "spec": {"containers": [{"name": "c"}]},
    }
    with pytest.raises(ApiError) as caught:
        await api.create(f"/api/v1/namespaces/{namespace}/pods", bad_pod)
    assert caught.value.status == 422
    assert "spec.containers[0].image" in caught.value.message
