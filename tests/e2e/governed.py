"""The chart installed with governance and a store, as a platform team runs it on the real node.

A real PostgreSQL server on loopback holds the audit store (its URL in a Secret the chart
names); the agent writes its idle signal every 5 s; the control plane runs a governance pass
every 2 s; one GPUPool, Shared, covers the node with a short idle rule so a reclaim happens
within a test. The fake GPUs are scripted through the node's ``fake-nvml.json``
(:mod:`.node_gpus`), which is removed afterwards so no later test inherits a broken GPU.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from gpupool.devcluster.postgres import PostgresServer, throwaway_postgres
from gpupool.devcluster.processes import free_port
from gpupool.kube.client.api import ApiError, KubeAPI

from .chart import CHART, NAMESPACE, RELEASE, chart_values, helm
from .conftest import Cluster, wait_for
from .node_gpus import NodeGpus

GROUP = "/apis/gpupool.io/v1alpha1"
POOL = "governed"
STORE_SECRET = "gpupool-store"
IDLE_GRACE_S, RECLAIM_GRACE_S, USAGE_PERIOD_S = 20, 10, 5
POOL_SPEC = {
    "mode": "Shared",
    "nodeSelector": {"gpupool.io/gpu-node": "true"},
    "shared": {"maxPodsPerGPU": 2},
    "governance": {
        "idleThreshold": {"gpuUtilPercent": 10},
        "idleGrace": f"{IDLE_GRACE_S}s",
        "reclaimGrace": f"{RECLAIM_GRACE_S}s",
    },
}


@dataclass(frozen=True)
class Governed:
    """The installed release: its store, its ports, the node's scripted GPUs."""

    cluster: Cluster
    store_url: str
    control_plane_port: int
    agent_metrics_port: int
    gpus: NodeGpus


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with throwaway_postgres() as server:
        yield server


async def _store_secret(api: KubeAPI, url: str) -> None:
    try:
        await api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        )
    except ApiError as error:
        if error.status != 409:
            raise
    await api.create(
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": STORE_SECRET},
            "data": {"url": base64.b64encode(url.encode()).decode()},
        },
    )


async def _pool(api: KubeAPI) -> None:
    await api.create(
        f"{GROUP}/gpupools",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GPUPool",
            "metadata": {"name": POOL},
            "spec": POOL_SPEC,
        },
    )

    async def advertised() -> bool:  # the agent read the pool: 2 devices per GPU, not the default 4
        node = await api.get("/api/v1/nodes/e2e-node")
        return node["status"].get("allocatable", {}).get("gpupool.io/gpu") == "16"

    await wait_for(advertised, 300, "the agent to advertise the pool's 2 shares per GPU")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def governed(cluster: Cluster, postgres: PostgresServer) -> AsyncIterator[Governed]:
    api = KubeAPI.from_kubeconfig(cluster.plane.kubeconfig)
    url = postgres.url(postgres.create_database())
    ports = free_port(), free_port()
    gpus = NodeGpus(cluster)
    gpus.clear()
    extra = {
        "agent.isolation": "visible",
        "agent.metricsPort": str(ports[1]),
        "agent.usagePeriodSeconds": str(USAGE_PERIOD_S),
        "controlPlane.port": str(ports[0]),
        "controlPlane.governance.intervalSeconds": "2",
        "controlPlane.store.urlSecret": STORE_SECRET,
    }
    try:
        await _store_secret(api, url)
        helm(cluster, "install", RELEASE, CHART, "-n", NAMESPACE, *chart_values(cluster, extra),
             "--wait", "--timeout=10m", timeout=900)  # fmt: skip
        try:
            await _pool(api)
            yield Governed(cluster, url, ports[0], ports[1], gpus)
        finally:
            await _delete(api, f"{GROUP}/gpupools/{POOL}")
            helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=5m")
    finally:
        gpus.clear()
        await _delete(api, f"/api/v1/namespaces/{NAMESPACE}/secrets/{STORE_SECRET}")
        await api.close()


async def _delete(api: KubeAPI, path: str) -> None:
    try:
        await api.delete(path)
    except ApiError as error:
        if error.status != 404:
            raise


async def pod_events(api: KubeAPI, namespace: str, name: str) -> list[dict[str, Any]]:
    """The ``events.k8s.io`` Events about one pod (kept after the pod is gone)."""
    events = await api.list_items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [e for e in events if e["regarding"].get("name") == name]
