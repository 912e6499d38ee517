"""The scheduler runs with only the permissions of deploy/scheduler-rbac.yaml."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.api import ApiError, KubeAPI
from gpupool.kube.rbac import grant_scheduler_role

from .live_helpers import (
    SchedulerProcesses,
    create_pods,
    gpu_pod,
    list_pods,
    make_nodes,
    pending_reason,
    pod_allocation,
    wait_for,
)

USER = "gpupool-scheduler"


async def test_scheduler_works_with_exactly_its_role(
    control_plane: LocalControlPlane, api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = control_plane.user_kubeconfig(USER)
    as_user = KubeAPI.from_kubeconfig(kubeconfig)
    try:
        with pytest.raises(ApiError) as refused:  # RBAC is real: nothing before the role
            await as_user.get("/api/v1/pods")
        assert refused.value.status == 403
    finally:
        await as_user.close()

    await grant_scheduler_role(api, USER)
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=2)
    # "fits" is older by more than the API's one-second timestamps, so it is served first
    # (pods of equal priority and age are served in an order of their uids)
    await create_pods(api, namespace, [gpu_pod("fits", gpus=2, selector=sel)])
    await asyncio.sleep(1.1)
    await create_pods(api, namespace, [gpu_pod("waits", selector=sel)])
    schedulers = SchedulerProcesses(kubeconfig, f"lease-{namespace}", tmp_path)
    try:
        schedulers.start("restricted")

        async def settled() -> bool:
            pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
            return bool(pods["fits"]["spec"].get("nodeName")) and bool(
                pending_reason(pods["waits"])
            )

        await wait_for(settled, 30, "a bind and a pending reason written as the restricted user")
        pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
        record = pod_allocation(pods["fits"])
        assert record is not None
        assert record["scheduler"] == "restricted"
        assert "Insufficient gpupool.io/gpu" in pending_reason(pods["waits"])
        events = await api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        reasons = {(e["regarding"]["name"], e["reason"]) for e in events["items"]}
        assert {("fits", "Scheduled"), ("waits", "FailedScheduling")} <= reasons
        log = schedulers.log("restricted")
        assert "403" not in log
        assert "Forbidden" not in log
    finally:
        schedulers.stop_all()
