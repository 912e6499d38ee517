"""Governance on the real node, fed by the agent's own telemetry path, and a GPU that breaks.

The fake NVML reports GPU processes with the host PIDs of the tenants' real containers; the
agent (in its pod) maps them through their real cgroups to pod UIDs and writes the idle signal
on the Node; the in-cluster control plane reclaims the idle pod and audits it in PostgreSQL. A
stopped agent leaves its last sample behind, which must never make a pod look idle. An XID on a
GPU (scripted as the driver raises it) keeps new pods off it and tells the pod on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2
import pytest
import pytest_asyncio
from selenium.webdriver.remote.webdriver import WebDriver

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.allocation import decode
from gpupool.kube.objects.timestamps import parse_time
from gpupool.kube.objects.usage_signal import decode_usage
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_GOVERNANCE_WARNED,
    ANNOTATION_GPU_UNHEALTHY,
    ANNOTATION_GPU_USAGE,
)

from .conftest import wait_for
from .dashboard_view import read_dashboard, sign_in
from .governed import (
    IDLE_GRACE_S,
    RECLAIM_GRACE_S,
    USAGE_PERIOD_S,
    Governed,
    governed,
    pod_events,
    postgres,
)
from .node_gpus import pids_of_pod
from .workloads import DONE, SHARE, remove_namespace, tenant_namespace, workload_pod

# one event loop for the module: its fixtures hold API clients across the tests
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800), pytest.mark.asyncio(loop_scope="module")]
__all__ = ["governed", "postgres"]  # module fixtures, used by name

AGENT = "/apis/apps/v1/namespaces/kube-system/daemonsets/gpupool-agent"
NODE = "/api/v1/nodes/e2e-node"


@dataclass
class Story:
    """Two tenant shares on the node: one will sit idle, one stays busy."""

    governed: Governed
    admin: KubeAPI
    tenant: KubeAPI
    namespace: str
    uids: dict[str, str]
    gpus: dict[str, str]

    def path(self, name: str) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{name}"

    async def pod(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.tenant.get(self.path(name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise


async def _running(tenant: KubeAPI, namespace: str, name: str) -> dict[str, Any]:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"

    async def running() -> bool:
        return bool((await tenant.get(path)).get("status", {}).get("phase") == "Running")

    await wait_for(running, 600, f"{namespace}/{name} Running")
    return await tenant.get(path)


def _gpu_of(pod: dict[str, Any]) -> str:
    record = decode(pod["metadata"]["annotations"][ANNOTATION_ALLOCATION])
    return record.gpus[0].uuid


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def story(governed: Governed) -> AsyncIterator[Story]:
    cluster = governed.cluster
    admin = KubeAPI.from_kubeconfig(cluster.plane.kubeconfig)
    namespace, tenant = await tenant_namespace(cluster, admin, "gov")
    image = cluster.images.test_workload
    try:
        for name in ("idle", "busy"):
            await tenant.create(
                f"/api/v1/namespaces/{namespace}/pods", workload_pod(name, image, DONE, SHARE)
            )
        pods = {name: await _running(tenant, namespace, name) for name in ("idle", "busy")}
        uids = {name: str(pod["metadata"]["uid"]) for name, pod in pods.items()}
        gpus = {name: _gpu_of(pod) for name, pod in pods.items()}
        # each container's process, found on the host by its cgroup; scripted onto its GPU
        for name, sm in (("idle", 0), ("busy", 70)):
            [pid, *_] = pids_of_pod(uids[name])
            governed.gpus.run(gpus[name], pid, sm_percent=sm)
        yield Story(governed, admin, tenant, namespace, uids, gpus)
    finally:
        await tenant.close()
        await remove_namespace(admin, namespace)
        await admin.close()


async def _usage(admin: KubeAPI) -> dict[str, float]:
    """SM % per pod UID in the agent's idle signal on the Node."""
    annotations = (await admin.get(NODE))["metadata"].get("annotations", {})
    if ANNOTATION_GPU_USAGE not in annotations:
        return {}
    signal = decode_usage(annotations[ANNOTATION_GPU_USAGE])
    return {uid: entry.sm_percent for uid, entry in signal.pods.items()}


def _metrics(port: int) -> str:
    return httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text


async def test_the_idle_pod_is_reclaimed_from_the_agents_own_telemetry(story: Story) -> None:
    s = story
    idle, busy = s.uids["idle"], s.uids["busy"]

    async def signalled() -> bool:
        usage = await _usage(s.admin)
        return usage.get(idle) == 0 and usage.get(busy) == 70

    await wait_for(signalled, 120, "the agent's idle signal to carry both pods")
    metrics = _metrics(s.governed.agent_metrics_port)
    assert f'namespace="{s.namespace}",pod="busy"' in metrics
    assert any(
        line.startswith("gpupool_pod_gpu_sm_utilization_percent") and 'pod="busy"' in line
        and line.endswith(" 70.0")
        for line in metrics.splitlines()
    ), metrics  # fmt: skip

    await wait_for(lambda: _gone(s, "idle"), 180, "the idle pod's reclaim")
    ours = ("GovernanceWarning", "Reclaimed")  # the kubelet's Events carry no eventTime
    told: dict[str, float] = {}

    async def both_told() -> bool:  # Events are written asynchronously, after the eviction
        nonlocal told
        events = await pod_events(s.tenant, s.namespace, "idle")
        told = {e["reason"]: _time(e) for e in events if e["reason"] in ours}
        return set(told) == set(ours)

    await wait_for(both_told, 60, "the idle pod's GovernanceWarning and Reclaimed Events")
    assert told["Reclaimed"] - told["GovernanceWarning"] >= RECLAIM_GRACE_S - 1  # warned first
    busy_pod = await s.pod("busy")
    assert busy_pod is not None
    assert busy_pod["status"]["phase"] == "Running"
    assert ANNOTATION_GOVERNANCE_WARNED not in busy_pod["metadata"].get("annotations", {})
    # the audit trail, read from the store as an operator would; the control plane's writer
    # buffers and retries (gpupool.store.writer), so the eviction's row may land a moment after
    # the pod is gone: read until it has, for at most 60 s
    env = {**os.environ, "GPUPOOL_DB_URL": s.governed.store_url}
    steps: list[tuple[str, str | None, str | None]] = []
    for _ in range(30):
        done = subprocess.run(
            [sys.executable, "-m", "gpupool", "audit", "--pod", f"{s.namespace}/idle", "--json"],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        steps = [
            (e["action"], e["values"].get("step"), e["values"].get("rule"))
            for e in json.loads(done.stdout)
        ]
        if ("reclaim", "evicted", "idle") in steps:
            break
        await asyncio.sleep(2)
    assert ("reclaim", "warned", "idle") in steps, steps
    assert ("reclaim", "evicted", "idle") in steps, steps


def _time(event: dict[str, Any]) -> float:
    stamp = parse_time(event["eventTime"])
    assert stamp is not None, event
    return stamp


async def _node_events(admin: KubeAPI, reason: str, since: float) -> list[dict[str, Any]]:
    """The node's Events of ``reason`` since ``since`` (earlier tests' agents restarted too)."""
    events = await admin.list_items("/apis/events.k8s.io/v1/namespaces/default/events")
    return [
        e for e in events
        if e["regarding"].get("name") == "e2e-node" and e["reason"] == reason and _time(e) >= since
    ]  # fmt: skip


async def _agent_pods(admin: KubeAPI) -> list[dict[str, Any]]:
    listing = await admin.get(
        "/api/v1/namespaces/kube-system/pods",
        {"labelSelector": "app.kubernetes.io/name=gpupool-agent"},
    )
    return list(listing["items"])


async def test_a_stopped_agent_never_makes_a_pod_look_idle(story: Story) -> None:
    s = story
    busy = s.uids["busy"]

    async def active() -> bool:
        return (await _usage(s.admin)).get(busy) == 70

    await wait_for(active, 120, "the busy pod's signal")
    stop = {"spec": {"template": {"spec": {"nodeSelector": {"gpupool.io/agent-stopped": "true"}}}}}
    await s.admin.patch(AGENT, stop)

    async def stopped() -> bool:
        return not await _agent_pods(s.admin)

    await wait_for(stopped, 120, "the agent's pod to stop")
    stopped_at = time.monotonic()
    since = time.time() - 1
    try:

        async def told() -> bool:
            return bool(await _node_events(s.admin, "GPUUsageStale", since))

        await wait_for(told, 120, "the Node Event saying the agent is silent")
        # its last sample said busy; it ages past idleGrace and reclaimGrace, twice over
        quiet = 2 * (IDLE_GRACE_S + RECLAIM_GRACE_S) + 3 * USAGE_PERIOD_S
        await asyncio.sleep(max(0.0, quiet - (time.monotonic() - stopped_at)))
        pod = await s.pod("busy")
        assert pod is not None, "reclaimed on a dead agent's last sample"
        assert ANNOTATION_GOVERNANCE_WARNED not in pod["metadata"].get("annotations", {})
        [stale] = await _node_events(s.admin, "GPUUsageStale", since)
        assert "neither idle nor active" in str(stale["note"])
    finally:
        restart = {
            "spec": {"template": {"spec": {"nodeSelector": {"gpupool.io/agent-stopped": None}}}}
        }
        await s.admin.patch(AGENT, restart)

    async def back() -> bool:
        return bool(await _node_events(s.admin, "GPUUsageFresh", since)) and await active()

    await wait_for(back, 300, "the agent back and its signal fresh")


async def _gone(s: Story, name: str) -> bool:
    return await s.pod(name) is None


async def _reader_token(admin: KubeAPI, namespace: str) -> str:
    """A token of a reader account that may list pods everywhere, for the API's audience."""
    await admin.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}},
    )
    await admin.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{namespace}-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    review = await admin.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/reader/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"audiences": ["gpupool.io/api"], "expirationSeconds": 3600}},
    )  # fmt: skip
    return str(review["status"]["token"])


async def test_the_dashboard_in_the_cluster_shows_the_map_a_reason_the_reclaim_and_gpu_hours(
    story: Story, browser: WebDriver
) -> None:
    s = story
    image = s.governed.cluster.images.test_workload
    too_big = {"gpupool.io/gpu": "8"}  # whole GPUs, which the node's Shared pool does not take
    await s.tenant.create(
        f"/api/v1/namespaces/{s.namespace}/pods", workload_pod("too-big", image, DONE, too_big)
    )
    await wait_for(lambda: _gone(s, "idle"), 180, "the idle pod's reclaim")
    token = await _reader_token(s.admin, s.namespace)
    try:
        base = f"https://127.0.0.1:{s.governed.control_plane_port}"
        await asyncio.to_thread(sign_in, browser, base, token)
        seen = await asyncio.to_thread(read_dashboard, browser, base, f"{s.namespace}/too-big")
    finally:
        await s.admin.delete(
            f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{s.namespace}-reader"
        )
    assert seen.gpus == 8
    # the reason the scheduler wrote on the pod (a Shared pool admits no whole GPUs)
    conditions = (await s.tenant.get(s.path("too-big")))["status"]["conditions"]
    [scheduled] = [c for c in conditions if c["type"] == "PodScheduled"]
    assert seen.reason == scheduled["message"], (seen.reason, scheduled)
    assert any(f"{s.namespace}/idle" in row and "idle" in row for row in seen.actions), seen.actions
    assert "default" in seen.series, seen.series  # GPU-hours of its queue, from the store
    env = {**os.environ, "GPUPOOL_DB_URL": s.governed.store_url, "COLUMNS": "200"}
    since = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    done = subprocess.run(
        [sys.executable, "-m", "gpupool", "report", "cost", "--by", "namespace", "--from", since],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert s.namespace in done.stdout, done.stdout


async def test_no_new_pod_goes_to_a_gpu_that_raised_an_xid(story: Story) -> None:
    s = story
    broken = s.gpus["busy"]  # half used: a new share would pack onto it
    s.governed.gpus.break_gpu(broken)

    async def told() -> bool:
        events = await pod_events(s.tenant, s.namespace, "busy")
        return any(e["reason"] == "GPUUnhealthy" for e in events)

    await wait_for(told, 120, "the GPUUnhealthy Event on the busy pod")
    node = await s.admin.get(NODE)
    assert broken in node["metadata"]["annotations"][ANNOTATION_GPU_UNHEALTHY]

    async def withdrawn() -> bool:  # the kubelet took its 2 devices out of allocatable
        allocatable = (await s.admin.get(NODE))["status"]["allocatable"]
        return bool(allocatable["gpupool.io/gpu"] == "14")

    await wait_for(withdrawn, 120, "the broken GPU's devices to leave allocatable")
    image = s.governed.cluster.images.test_workload
    await s.tenant.create(
        f"/api/v1/namespaces/{s.namespace}/pods", workload_pod("after", image, DONE, SHARE)
    )
    assert _gpu_of(await _running(s.tenant, s.namespace, "after")) != broken
    busy = await s.pod("busy")
    assert busy is not None
    assert busy["status"]["phase"] == "Running"  # its pod keeps running there
