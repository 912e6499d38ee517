"""Gangs on the real API server with Kubernetes 1.37's PodGroup API (gate GenericWorkload on).

The issue's cases, each in its own namespace on nodes of its own: a gang of 4 one-GPU pods beside
3 free GPUs binds none until the fourth frees, then all 4; of two gangs of 3 on 4 free GPUs one
runs whole and the other holds nothing; a gang above its queue's ceiling pends with that reason;
an indexed Job, whose PodGroup kube-controller-manager makes (gate WorkloadWithJob), starts whole;
a gang with a topology constraint starts within one rack; a coscheduling group (the
``scheduling.x-k8s.io/pod-group`` label Kubeflow's training operator and KubeRay write) starts
whole;
a high-priority gang preempts a whole lower-priority gang and nothing else; a Job's pods evicted
are made again and start before a gang that arrived after the evicted pods but before them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.install.crds import install_crds
from gpupool.kube.scheduler.queue import MAX_BACKOFF

from .live_helpers import (
    SchedulerProcesses,
    create_pods,
    create_priority_class,
    delete_all_pods,
    establish_crds,
    gpu_pod,
    list_pods,
    make_nodes,
    pending_reason,
    wait_for,
    wait_for_events,
)

pytestmark = pytest.mark.integration
CONTROLLERS = True  # kube-controller-manager's Job controller makes a Job's PodGroup

Json = dict[str, Any]
GROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{}/podgroups"


async def _gang(
    api: KubeAPI,
    namespace: str,
    name: str,
    size: int,
    min_count: int,
    disruption: str = "",
    topology: str = "",
) -> list[Json]:
    """A PodGroup of ``min_count`` and ``size`` one-GPU pods naming it, on the test's nodes
    (``disruption``: its ``disruptionMode``, the API server's default is ``single``;
    ``topology``: the node label all its pods must share a value of)."""
    spec: Json = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if disruption:
        spec["disruptionMode"] = {disruption: {}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    await api.create(
        GROUPS.format(namespace),
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
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


async def _gang_job(api: KubeAPI, namespace: str, name: str, size: int) -> None:
    """An indexed Job of ``size`` one-GPU pods on the test's nodes, scheduled as one gang."""
    template = gpu_pod("worker", selector={"test": namespace})
    template["spec"]["restartPolicy"] = "Never"
    await api.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "completionMode": "Indexed",
                "completions": size,
                "parallelism": size,
                # a gang of all its pods (minCount defaults to parallelism); without it the
                # Job controller makes a basic PodGroup, whose pods go one by one
                "scheduling": {"schedulingPolicy": {"gang": {}}},
                "template": {"metadata": {"labels": {"job": name}}, "spec": template["spec"]},
            },
        },
    )


async def test_an_indexed_jobs_pod_group_made_by_its_controller_is_gang_scheduled(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    await _three_of_four_free(api, namespace, schedulers)
    await _gang_job(api, namespace, "train", 4)

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


async def _running(api: KubeAPI, namespace: str, prefix: str) -> set[str]:
    """The pods of ``prefix`` bound and not being deleted."""
    return {
        p["metadata"]["name"]
        for p in await list_pods(api, namespace)
        if p["metadata"]["name"].startswith(prefix)
        and p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
    }


async def _high_gang(api: KubeAPI, namespace: str, priority_class: str) -> None:
    """A gang of three one-GPU pods at ``priority_class``, bound once it has preempted."""
    urgent = await _gang(api, namespace, "urgent", 3, 3)
    for pod in urgent:
        pod["spec"]["priorityClassName"] = priority_class
    await create_pods(api, namespace, urgent)

    async def bound() -> bool:
        return len(await _running(api, namespace, "urgent-")) == 3

    await wait_for(bound, 90, "the high gang bound")


async def test_a_high_priority_gang_preempts_a_whole_lower_gang_and_nothing_else(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """A 4-GPU node runs a gang of three (``disruptionMode: all``) and, started later, a
    one-GPU bystander, the cheapest pod to evict; a gang of three at a higher priority evicts
    the whole low gang, not the bystander, and each victim's Event says its work ends there."""
    await make_nodes(api, namespace, 1, gpus=4)
    high = f"{namespace}-high"
    await create_priority_class(api, high, 1000)
    schedulers.start("solo")
    try:
        low = await _gang(api, namespace, "low", 3, 3, disruption="all")
        await create_pods(api, namespace, low)

        async def low_bound() -> bool:
            return len(await _running(api, namespace, "low-")) == 3

        await wait_for(low_bound, 60, "the low gang bound")
        await create_pods(api, namespace, [gpu_pod("bystander", selector={"test": namespace})])

        async def bystander_bound() -> bool:
            return bool(await _running(api, namespace, "bystander"))

        await wait_for(bystander_bound, 30, "the bystander bound")
        await _high_gang(api, namespace, high)
        found = await _by_name(api, namespace)
        assert "bystander" in found
        assert not found["bystander"]["metadata"].get("deletionTimestamp")
        assert not {"low-0", "low-1", "low-2"} & found.keys()
        events = await wait_for_events(
            api, namespace, "the victims' Events", reason="Preempted",
            until=lambda found: len(found) >= 3,
        )  # fmt: skip
        assert {e["regarding"]["name"] for e in events} == {"low-0", "low-1", "low-2"}
        assert all(
            e["note"].endswith("no controller recreates it: its work ends here") for e in events
        )
    finally:
        await delete_all_pods(api, namespace)
        await api.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{high}")


async def test_a_jobs_pods_evicted_come_back_at_their_place_in_the_queue(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """A 4-GPU node runs a Job gang of three (the API's default ``disruptionMode: single``);
    a rival gang of three arrives after it and waits. A 3-GPU pod at a higher priority evicts
    two of the Job's pods (one GPU is free). The Job makes them again, after the rival arrived,
    but they queue at the evicted pods' place: when the 3-GPU pod leaves, the Job's two new pods
    start (its third still runs) and the rival, which would fit, waits behind them.

    With EASY backfill: under the default, a reservation the rival already holds stays with it
    (a followed reservation is kept by the pod that has it), and the pods queued ahead of it
    take their turn after it."""
    await make_nodes(api, namespace, 1, gpus=4)
    high = f"{namespace}-high"
    await create_priority_class(api, high, 1000)
    schedulers.start("solo", args=("--backfill", "easy"))
    try:
        await _gang_job(api, namespace, "low", 3)

        async def low_bound() -> bool:
            return len(await _running(api, namespace, "low-")) == 3

        await wait_for(low_bound, 60, "the Job's gang bound")
        first = await _running(api, namespace, "low-")
        await create_pods(api, namespace, await _gang(api, namespace, "rival", 3, 3))
        rivals = ["rival-0", "rival-1", "rival-2"]
        await wait_for(lambda: _all_told(api, namespace, rivals), 30, "the rival told why")
        urgent = gpu_pod("urgent", gpus=3, selector={"test": namespace})
        urgent["spec"]["priorityClassName"] = high
        await create_pods(api, namespace, [urgent])

        async def urgent_bound() -> bool:
            return bool(await _running(api, namespace, "urgent"))

        await wait_for(urgent_bound, 90, "the 3-GPU pod bound")
        evicted = first - await _running(api, namespace, "low-")
        assert len(evicted) == 2, evicted
        events = await wait_for_events(
            api, namespace, "the victims' Events", reason="Preempted",
            until=lambda found: len(found) >= 2,
        )  # fmt: skip
        assert {e["regarding"]["name"] for e in events} == evicted
        assert all("its Job low recreates it" in e["note"] for e in events), events[0]["note"]

        async def recreated() -> bool:
            names = {p["metadata"]["name"] for p in await list_pods(api, namespace)}
            return len({n for n in names if n.startswith("low-")} - first) == 2

        await wait_for(recreated, 90, "the Job made its pods again")
        # order decides among the pods tried together: let every backoff (10 s at most) end
        await asyncio.sleep(MAX_BACKOFF + 1)
        await api.request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/urgent",
            body={"gracePeriodSeconds": 0},
        )
        await wait_for(low_bound, 60, "the Job's new pods bound at their place")
        found = await _by_name(api, namespace)
        assert not any(found[name]["spec"].get("nodeName") for name in rivals)
    finally:
        await api.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{namespace}/jobs/low",
            body={"propagationPolicy": "Background"},
        )
        await delete_all_pods(api, namespace)
        await api.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{high}")


async def test_a_gang_with_a_topology_constraint_starts_within_one_rack(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """Rack a: one 2-GPU node; rack b: two. A gang of three asking for one rack starts on
    rack b's nodes; split over a and b it would have fitted the emptiest nodes too."""
    rack = "topology.kubernetes.io/rack"
    await create_nodes(
        api,
        [
            FakeGpuNode(f"{namespace}-{name}", gpus=2, labels=(("test", namespace), (rack, value)))
            for name, value in (("a0", "a"), ("b0", "b"), ("b1", "b"))
        ],
    )
    pods = await _gang(api, namespace, "ring", 3, 3, topology=rack)
    await create_pods(api, namespace, pods)
    schedulers.start("solo")
    names = [p["metadata"]["name"] for p in pods]

    async def all_bound() -> bool:
        found = await _by_name(api, namespace)
        return all(name in found and found[name]["spec"].get("nodeName") for name in names)

    await wait_for(all_bound, 30, "the gang bound")
    found = await _by_name(api, namespace)
    nodes = {found[name]["spec"]["nodeName"] for name in names}
    assert nodes <= {f"{namespace}-b0", f"{namespace}-b1"}, nodes
    await delete_all_pods(api, namespace)


COSCHEDULING_CRD: Json = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io",
        "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
                  "singular": "podgroup", "shortNames": ["pg", "pgs"]},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "minMember": {"type": "integer", "format": "int32"},
                    "minResources": {"type": "object", "additionalProperties": {
                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                        "x-kubernetes-int-or-string": True}},
                    "scheduleTimeoutSeconds": {"type": "integer", "format": "int32"},
                }},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}  # fmt: skip
"""scheduler-plugins' coscheduling PodGroup CRD, its spec's fields as v0.31 defines them (the
project's CRD, written out: its generator pulls in kube-scheduler's whole tree)."""


async def test_a_coscheduling_groups_labelled_pods_start_whole(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """The label form: four pods labelled ``scheduling.x-k8s.io/pod-group: ray`` with a
    coscheduling PodGroup of ``minMember`` 4, beside 3 free GPUs: none bound, then all four."""
    await establish_crds(api, [COSCHEDULING_CRD])  # served before the scheduler starts
    try:
        await api.create(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups",
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "ray"},
                "spec": {"minMember": 4},
            },
        )
        await _three_of_four_free(api, namespace, schedulers)
        pods = []
        for index in range(4):
            pod = gpu_pod(f"ray-{index}", selector={"test": namespace})
            pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "ray"}
            pods.append(pod)
        await create_pods(api, namespace, pods)
        names = [p["metadata"]["name"] for p in pods]
        await wait_for(lambda: _all_told(api, namespace, names), 30, "the group told why")
        found = await _by_name(api, namespace)
        assert not any(found[name]["spec"].get("nodeName") for name in names)
        assert pending_reason(found["ray-0"]).startswith(
            f"gang {namespace}/ray: 3 of the 4 pods it needs at once fit"
        ), pending_reason(found["ray-0"])
        await api.request(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods/holder", body={"gracePeriodSeconds": 0}
        )

        async def all_bound() -> bool:
            return len(await _running(api, namespace, "ray-")) == 4

        await wait_for(all_bound, 30, "the group bound whole")
    finally:
        await delete_all_pods(api, namespace)
        await api.delete(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.x-k8s.io"
        )


# Consolidation (issue 32): shares of 50% on the four GPUs of two nodes, one pod per GPU at
# first; the pool then allows two pods per GPU and a pod asking for a whole GPU's compute comes.
# Node a holds a bare pod and a running gang's pod, node b two pods of a Deployment.


def _share(name: str, namespace: str, slot: str = "", cores: int = 50) -> Json:
    selector = {"test": namespace, **({"slot": slot} if slot else {})}
    return gpu_pod(name, cores=cores, memory_mib=10000, selector=selector)


async def _fragmented_pool(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses, mode: str
) -> str:
    """The fragmented pool (above) with consolidation in ``mode``; returns the pool's name."""
    await install_crds(api)
    nodes = await make_nodes(api, namespace, 2, gpus=2, gpu_model="A100", gpu_memory_mib=40960)
    for node, slot in zip(nodes, "ab", strict=True):
        await api.patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": {"slot": slot}}})
    pool = f"{namespace}-shared"
    consolidation = {"mode": mode, "minWait": "1s", "restartCost": "10s"}
    spec = {"mode": "Shared", "nodeSelector": {"test": namespace}, "shared": {"maxPodsPerGPU": 1}}
    await api.create(
        "/apis/gpupool.io/v1alpha1/gpupools",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GPUPool",
            "metadata": {"name": pool},
            "spec": {**spec, "consolidation": consolidation},
        },
    )
    schedulers.start("solo")
    gang = (await _gang(api, namespace, "g", 1, 1))[0]
    gang["spec"]["nodeSelector"]["slot"] = "a"
    gang["spec"]["containers"][0]["resources"]["limits"].update(
        {"gpupool.io/gpu-cores": "50", "gpupool.io/gpu-memory": "10000"}
    )
    await create_pods(api, namespace, [_share("bare", namespace, "a"), gang])

    async def bound(count: int) -> bool:
        pods = await list_pods(api, namespace)
        return sum(bool(p["spec"].get("nodeName")) for p in pods) == count

    await wait_for(lambda: bound(2), 30, "the bare pod and the gang's pod bound on node a")
    template = _share("web", namespace)
    await api.create(
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]},
            },
        },
    )
    await wait_for(lambda: bound(4), 60, "two web pods bound on node b")
    await api.patch(
        f"/apis/gpupool.io/v1alpha1/gpupools/{pool}", {"spec": {"shared": {"maxPodsPerGPU": 2}}}
    )
    await create_pods(api, namespace, [_share("big", namespace, cores=100)])
    return pool


async def _nodes_of(api: KubeAPI, namespace: str) -> dict[str, tuple[str, str]]:
    """Pod name to (uid, node)."""
    return {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
        for p in await list_pods(api, namespace)
    }


async def test_consolidation_moves_one_deployment_share_and_never_a_bare_or_gang_pod(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    pool = await _fragmented_pool(api, namespace, schedulers, "Enabled")
    before = await _nodes_of(api, namespace)
    node_a, node_b = f"{namespace}-n000", f"{namespace}-n001"
    assert before["bare"][1] == before["g-0"][1] == node_a

    async def big_bound() -> bool:
        return bool((await _nodes_of(api, namespace))["big"][1])

    await wait_for(big_bound, 60, "the whole-GPU pod bound after one move")
    after = await _nodes_of(api, namespace)
    assert after["big"][1] == node_b
    assert after["bare"] == before["bare"]
    assert after["g-0"] == before["g-0"]
    web_before = {uid for name, (uid, _) in before.items() if name.startswith("web")}
    web_after = {uid: node for name, (uid, node) in after.items() if name.startswith("web")}
    assert len(web_before - set(web_after)) == 1  # the fewest moves: one share
    assert sorted(web_after.values()) == sorted([node_a, node_b])  # the moved one landed on a
    events = await wait_for_events(
        api, namespace, "the move told", regarding="big", reason="Consolidating"
    )
    assert "gains" in events[0]["note"]
    async with httpx2.AsyncClient(timeout=10) as http:
        scraped = (await http.get(f"{await schedulers.http_url('solo')}/metrics")).text
    assert f'gpupool_governance_consolidation_moves_total{{pool="{pool}"}} 1.0' in scraped
    await _delete_deployment_and_pods(api, namespace, pool)


async def test_report_only_consolidation_moves_nothing_and_says_what_it_would_do(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    pool = await _fragmented_pool(api, namespace, schedulers, "ReportOnly")
    before = await _nodes_of(api, namespace)
    events = await wait_for_events(
        api, namespace, "the plan told", regarding="big", reason="ConsolidationPlan"
    )
    assert "would move" in events[0]["note"]
    assert f"{namespace}/web-" in events[0]["note"]
    await asyncio.sleep(3)  # a few more cycles: still nothing moves
    after = await _nodes_of(api, namespace)
    assert after == before
    assert not after["big"][1]
    await _delete_deployment_and_pods(api, namespace, pool)


async def _delete_deployment_and_pods(api: KubeAPI, namespace: str, pool: str) -> None:
    """The test's pods and its pool (a pod of the next test could be routed to it)."""
    await api.delete(f"/apis/apps/v1/namespaces/{namespace}/deployments/web")
    await delete_all_pods(api, namespace)
    await api.delete(f"/apis/gpupool.io/v1alpha1/gpupools/{pool}")
