"""Gangs on the real API server with Kubernetes 1.37's PodGroup API (gate GenericWorkload on).

The issue's cases, each in its own namespace on nodes of its own: a gang of 4 one-GPU pods beside
3 free GPUs binds none until the fourth frees, then all 4; of two gangs of 3 on 4 free GPUs one
runs whole and the other holds nothing; a gang above its queue's ceiling pends with that reason;
an indexed Job, whose PodGroup kube-controller-manager makes (gate WorkloadWithJob), starts whole.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.install.crds import install_crds

from .live_helpers import (
    SchedulerProcesses,
    create_pods,
    delete_all_pods,
    gpu_pod,
    list_pods,
    make_nodes,
    pending_reason,
    wait_for,
)

pytestmark = pytest.mark.integration
CONTROLLERS = True  # kube-controller-manager's Job controller makes a Job's PodGroup

Json = dict[str, Any]
GROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{}/podgroups"


async def _gang(api: KubeAPI, namespace: str, name: str, size: int, min_count: int) -> list[Json]:
    """A PodGroup of ``min_count`` and ``size`` one-GPU pods naming it, on the test's nodes."""
    await api.create(
        GROUPS.format(namespace),
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        },
    )
    pods = []
    for index in range(size):
        pod = gpu_pod(f"{name}-{index}", selector={"test": namespace})
        pod["spec"]["schedulingGroup"] = {"podGroupName": name}
        pods.append(pod)
    return pods


async def _by_name(api: KubeAPI, namespace: str) -> dict[str, Json]:
    return {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}


async def _all_told(api: KubeAPI, namespace: str, names: list[str]) -> bool:
    """Every one of ``names`` is bound or has its reason."""
    pods = await _by_name(api, namespace)
    return all(
        name in pods and (pods[name]["spec"].get("nodeName") or pending_reason(pods[name]))
        for name in names
    )


async def _three_of_four_free(api: KubeAPI, namespace: str, schedulers: SchedulerProcesses) -> None:
    """A 4-GPU node, the scheduler, and a one-GPU ``holder`` bound on it before any gang comes
    (else the gang may take all four GPUs first)."""
    await make_nodes(api, namespace, 1, gpus=4)
    schedulers.start("solo")
    await create_pods(api, namespace, [gpu_pod("holder", selector={"test": namespace})])

    async def held() -> bool:
        return bool((await _by_name(api, namespace))["holder"]["spec"].get("nodeName"))

    await wait_for(held, 30, "the holder bound")


async def test_a_gang_of_four_beside_three_free_gpus_binds_none_until_the_fourth_frees(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    await _three_of_four_free(api, namespace, schedulers)
    gang = await _gang(api, namespace, "train", 4, 4)
    await create_pods(api, namespace, gang)
    names = [p["metadata"]["name"] for p in gang]
    await wait_for(lambda: _all_told(api, namespace, names), 30, "the gang told why it waits")
    pods = await _by_name(api, namespace)

    async def condition() -> Json | None:
        group = await api.get(f"{GROUPS.format(namespace)}/train")
        found = group.get("status", {}).get("conditions", [])
        return next((c for c in found if c["type"] == "PodGroupInitiallyScheduled"), None)

    async def marked(status: str) -> bool:
        found = await condition()
        return found is not None and found["status"] == status

    await wait_for(lambda: marked("False"), 30, "the PodGroup told why it waits")
    waiting = await condition()
    assert waiting is not None
    assert waiting["reason"] == "Unschedulable"
    assert waiting["message"].startswith(f"gang {namespace}/train: 3 of the 4 pods")
    for name in names:
        assert not pods[name]["spec"].get("nodeName"), name
        assert pending_reason(pods[name]).startswith(
            f"gang {namespace}/train: 3 of the 4 pods it needs at once fit"
        ), pending_reason(pods[name])
    await api.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/holder", body={"gracePeriodSeconds": 0}
    )

    async def all_bound() -> bool:
        pods = await _by_name(api, namespace)
        return all(name in pods and pods[name]["spec"].get("nodeName") for name in names)

    await wait_for(all_bound, 30, "the whole gang bound")
    await wait_for(lambda: marked("True"), 30, "the PodGroup marked scheduled")
    scheduled = await condition()
    assert scheduled is not None
    assert scheduled["reason"] == "Scheduled"
    await delete_all_pods(api, namespace)


async def test_of_two_gangs_of_three_on_four_gpus_one_runs_whole_the_other_holds_nothing(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    await make_nodes(api, namespace, 1, gpus=4)
    pods = [
        *await _gang(api, namespace, "a", 3, 3),
        *await _gang(api, namespace, "b", 3, 3),
    ]
    await create_pods(api, namespace, pods)
    schedulers.start("solo")
    names = [p["metadata"]["name"] for p in pods]
    await wait_for(lambda: _all_told(api, namespace, names), 30, "both gangs decided")
    found = await _by_name(api, namespace)
    bound = {name for name in names if found[name]["spec"].get("nodeName")}
    assert bound in ({"a-0", "a-1", "a-2"}, {"b-0", "b-1", "b-2"}), bound
    for name in set(names) - bound:
        assert "1 of the 3 pods it needs at once fit" in pending_reason(found[name])
    await delete_all_pods(api, namespace)


async def test_a_gang_above_its_queues_ceiling_pends_with_that_reason(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    await install_crds(api)
    await make_nodes(api, namespace, 1, gpus=8)
    await api.create(
        "/apis/gpupool.io/v1alpha1/gpuqueues",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GPUQueue",
            "metadata": {"name": f"{namespace}-q"},
            "spec": {
                "namespaces": [namespace],
                "quotas": [{"pool": "default", "ceiling": 2}],
            },
        },
    )
    try:
        pods = await _gang(api, namespace, "big", 3, 3)
        await create_pods(api, namespace, pods)
        schedulers.start("solo")
        names = [p["metadata"]["name"] for p in pods]
        await wait_for(lambda: _all_told(api, namespace, names), 30, "the gang told why")
        found = await _by_name(api, namespace)
        for name in names:
            assert not found[name]["spec"].get("nodeName")
            assert pending_reason(found[name]) == (
                f"gang {namespace}/big of 3 pods: queue {namespace}-q: ceiling 2 GPU units "
                "reached in pool default"
            ), pending_reason(found[name])
    finally:
        await api.delete(f"/apis/gpupool.io/v1alpha1/gpuqueues/{namespace}-q")
        await delete_all_pods(api, namespace)


async def test_an_indexed_jobs_pod_group_made_by_its_controller_is_gang_scheduled(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    await _three_of_four_free(api, namespace, schedulers)
    template = gpu_pod("worker", selector={"test": namespace})
    template["spec"]["restartPolicy"] = "Never"
    await api.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {
                "completionMode": "Indexed",
                "completions": 4,
                "parallelism": 4,
                # a gang of all its pods (minCount defaults to parallelism); without it the
                # Job controller makes a basic PodGroup, whose pods go one by one
                "scheduling": {"schedulingPolicy": {"gang": {}}},
                "template": {"metadata": {"labels": {"job": "train"}}, "spec": template["spec"]},
            },
        },
    )

    async def workers() -> list[Json]:
        return [p for p in await list_pods(api, namespace) if p["metadata"]["name"] != "holder"]

    async def four_told() -> bool:
        found = await workers()
        return len(found) == 4 and all(pending_reason(p) for p in found)

    try:
        await wait_for(four_told, 60, "the Job's four pods told why they wait")
    except AssertionError as error:  # say what there was
        seen = [
            (p["metadata"]["name"], p["spec"].get("schedulingGroup"), p["spec"].get("nodeName"),
             p["spec"].get("schedulingGates"), pending_reason(p))
            for p in await workers()
        ]  # fmt: skip
        raise AssertionError(f"{error}: {seen}") from None
    found = await workers()
    assert all(p["spec"].get("schedulingGroup") for p in found), found[0]["spec"]
    assert not any(p["spec"].get("nodeName") for p in found)
    assert all("3 of the 4 pods it needs at once fit" in pending_reason(p) for p in found)
    await api.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/holder", body={"gracePeriodSeconds": 0}
    )

    async def all_bound() -> bool:
        found = await workers()
        return len(found) == 4 and all(p["spec"].get("nodeName") for p in found)

    await wait_for(all_bound, 60, "the Job's gang bound whole")
    await api.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/train",
        body={"propagationPolicy": "Background"},
    )
    await delete_all_pods(api, namespace)
