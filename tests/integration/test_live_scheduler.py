"""The live scheduler against a real API server: binds, reasons, frees, crashes and failover."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.controlplane.serving_label import SERVING_LABEL

from .live_helpers import (
    Json,
    SchedulerProcesses,
    assert_no_gpu_given_twice,
    create_pods,
    delete_all_pods,
    gpu_pod,
    list_pods,
    make_nodes,
    pending_reason,
    pod_allocation,
    wait_for,
    wait_for_events,
)


async def _settled(api: KubeAPI, namespace: str, expected: int) -> bool:
    """Every pod is bound, or pending with a verdict of its own the scheduler wrote.

    Not only "waiting behind" another: a pod past a cycle's backfill depth is told that at
    once and decided in a later cycle.
    """
    pods = await list_pods(api, namespace)
    return len(pods) == expected and all(
        p["spec"].get("nodeName")
        or (pending_reason(p) and not pending_reason(p).startswith("waiting behind "))
        for p in pods
    )


async def test_whole_shared_and_model_constrained_pods_get_correct_allocations(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    sel = {"test": namespace}
    await make_nodes(api, namespace, 2, gpus=8, gpu_model="H100")
    await make_nodes(api, f"{namespace}-a", 1, gpus=4, gpu_model="A100", gpu_memory_mib=40960)
    await api.patch(f"/api/v1/nodes/{namespace}-a-n000", {"metadata": {"labels": sel}})
    pods = [
        gpu_pod("whole", gpus=2, selector=sel),
        gpu_pod("share", memory_mib=20000, cores=30, selector=sel),
        gpu_pod("a100", gpus=1, models="A100", selector=sel),
        gpu_pod("too-big", gpus=16, selector=sel),
        gpu_pod("no-such-model", gpus=1, models="B200", selector=sel),
    ]
    await create_pods(api, namespace, pods)
    schedulers.start("solo")
    await wait_for(lambda: _settled(api, namespace, len(pods)), 30, "pods to settle")
    by_name = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}

    whole = pod_allocation(by_name["whole"])
    assert whole is not None
    assert whole["kind"] == "whole"
    assert len(whole["gpus"]) == 2
    node = await api.get(f"/api/v1/nodes/{whole['node']}")
    uuids = node["metadata"]["annotations"]["gpupool.io/gpu-uuids"].split(",")
    assert [g["uuid"] for g in whole["gpus"]] == [uuids[g["index"]] for g in whole["gpus"]]

    share = pod_allocation(by_name["share"])
    assert share is not None
    assert share["kind"] == "share"
    assert share["gpus"][0]["milli"] == 300
    assert share["gpus"][0]["memoryMib"] == 20000

    a100 = pod_allocation(by_name["a100"])
    assert a100 is not None
    assert a100["node"] == f"{namespace}-a-n000"

    for name, reason in (
        ("too-big", "Insufficient gpupool.io/gpu"),
        ("no-such-model", "allowed model"),
    ):
        assert not by_name[name]["spec"].get("nodeName")
        assert reason in pending_reason(by_name[name]), pending_reason(by_name[name])
    events = await wait_for_events(
        api,
        namespace,
        "too-big's FailedScheduling Event",
        regarding="too-big",
        reason="FailedScheduling",
    )
    assert "nodes are available" in events[0]["note"]
    await assert_no_gpu_given_twice(api, by_name.values())


RDMA = {"example.com/rdma": "1"}
PORTS_REASON = "node(s) didn't have free ports for the requested pod ports"


async def _rdma_and_port_pods(api: KubeAPI, namespace: str, label: str, scheduler: str) -> str:
    """Two nodes labelled ``label``, the second offering one ``example.com/rdma``; two one-GPU
    pods asking one each, and two pods asking host port 8080 pinned to the first node. Returns
    the rdma node's name."""
    await make_nodes(api, label, 2, gpus=8, gpu_model="H100")
    rdma_node = f"{label}-n001"
    status = (await api.get(f"/api/v1/nodes/{rdma_node}"))["status"]
    await api.patch(
        f"/api/v1/nodes/{rdma_node}/status",
        {
            "status": {
                "capacity": {**status["capacity"], **RDMA},
                "allocatable": {**status["allocatable"], **RDMA},
            }
        },
    )
    sel = {"test": label}
    rdma_pods = [gpu_pod(f"rdma-{i}", gpus=1, selector=sel, scheduler=scheduler) for i in range(2)]
    for pod in rdma_pods:
        pod["spec"]["containers"][0]["resources"]["limits"].update(RDMA)
    pinned = {**sel, "kubernetes.io/hostname": f"{label}-n000"}
    port_pods = [
        gpu_pod(f"port-{i}", gpus=0, selector=pinned, scheduler=scheduler) for i in range(2)
    ]
    for pod in port_pods:
        pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    await create_pods(api, namespace, rdma_pods + port_pods)
    return rdma_node


async def _one_bound_one_waiting(api: KubeAPI, namespace: str, rdma_node: str) -> None:
    await wait_for(lambda: _settled(api, namespace, 4), 60, "pods to settle")
    by_name = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
    for group, reason in (
        (("rdma-0", "rdma-1"), "Insufficient example.com/rdma"),
        (("port-0", "port-1"), PORTS_REASON),
    ):
        bound = [by_name[name] for name in group if by_name[name]["spec"].get("nodeName")]
        waiting = [by_name[name] for name in group if not by_name[name]["spec"].get("nodeName")]
        assert (len(bound), len(waiting)) == (1, 1), group
        assert reason in pending_reason(waiting[0]), pending_reason(waiting[0])
        if group[0].startswith("rdma"):
            assert bound[0]["spec"]["nodeName"] == rdma_node


async def test_extended_resources_and_host_ports_are_honoured_like_kube_scheduler(
    api: KubeAPI,
    namespace: str,
    schedulers: SchedulerProcesses,
    control_plane: LocalControlPlane,
) -> None:
    """Two one-GPU pods asking ``example.com/rdma: 1`` where only one node offers one: one
    binds there, the other waits naming the resource; two pods asking one host port on one
    node: one binds, the other waits with NodePorts' reason. The real kube-scheduler, given
    the same nodes and pods, decides the same."""
    rdma_node = await _rdma_and_port_pods(api, namespace, namespace, "gpupool")
    schedulers.start("solo")
    await _one_bound_one_waiting(api, namespace, rdma_node)
    await assert_no_gpu_given_twice(api, await list_pods(api, namespace))

    kube = f"{namespace}-kube"
    await api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kube}}
    )
    control_plane.start_kube_scheduler()
    try:
        kube_rdma_node = await _rdma_and_port_pods(api, kube, kube, "default-scheduler")
        await _one_bound_one_waiting(api, kube, kube_rdma_node)
    finally:
        control_plane.stop_process("kube-scheduler")
    await delete_all_pods(api, namespace, kube)


async def test_deleted_or_finished_pods_free_their_gpus_for_the_next_pod(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=1)
    schedulers.start("solo")
    await create_pods(api, namespace, [gpu_pod("first", selector=sel)])

    async def bound(name: str) -> bool:
        pod = await api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return bool(pod["spec"].get("nodeName"))

    await wait_for(lambda: bound("first"), 20, "first pod bound")
    await create_pods(api, namespace, [gpu_pod("second", selector=sel, finish=True)])

    async def second_waiting() -> bool:
        pod = await api.get(f"/api/v1/namespaces/{namespace}/pods/second")
        return "Insufficient gpupool.io/gpu" in pending_reason(pod)

    await wait_for(second_waiting, 20, "second pod pending for want of a GPU")
    await api.delete(f"/api/v1/namespaces/{namespace}/pods/first")
    await wait_for(lambda: bound("second"), 10, "second pod bound after first deleted")

    # second finishes (kwok's pod-finish stage): its GPU goes to a third pod
    await create_pods(api, namespace, [gpu_pod("third", selector=sel)])

    async def second_done() -> bool:
        pod = await api.get(f"/api/v1/namespaces/{namespace}/pods/second")
        return pod["status"].get("phase") == "Succeeded"

    await wait_for(second_done, 20, "second pod finished")
    await wait_for(lambda: bound("third"), 10, "third pod bound after second finished")


def _with_pod_rules(
    pod: Json, app: str, affinity: Json | None = None, spread: Json | None = None
) -> Json:
    """``pod`` labelled ``app=<app>``, with pod affinity and/or topology spread added."""
    pod["metadata"]["labels"] = {"app": app}
    if affinity is not None:
        pod["spec"]["affinity"] = affinity
    if spread is not None:
        pod["spec"]["topologySpreadConstraints"] = [spread]
    return pod


async def test_anti_affinity_and_topology_spread_place_replicas_as_kube_scheduler_does(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """3 anti-affine replicas on 2 nodes: 1+1 and one pending; 4 spread replicas: 2+2."""
    sel = {"test": namespace}
    await make_nodes(api, namespace, 2, gpus=8)
    hostname = "kubernetes.io/hostname"
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": hostname}
            ]
        }
    }
    spread = {
        "maxSkew": 1,
        "topologyKey": hostname,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }
    pods = [
        *(
            _with_pod_rules(gpu_pod(f"anti-{i}", selector=sel), "anti", affinity=anti)
            for i in range(3)
        ),
        *(
            _with_pod_rules(gpu_pod(f"spread-{i}", selector=sel), "spread", spread=spread)
            for i in range(4)
        ),
    ]
    await create_pods(api, namespace, pods)
    schedulers.start("solo")
    await wait_for(lambda: _settled(api, namespace, len(pods)), 30, "pods to settle")
    placed: dict[str, list[str]] = {"anti": [], "spread": []}
    pending = []
    for pod in await list_pods(api, namespace):
        group = pod["metadata"]["labels"]["app"]
        if pod["spec"].get("nodeName"):
            placed[group].append(pod["spec"]["nodeName"])
        else:
            pending.append((group, pending_reason(pod)))
    assert sorted(placed["anti"]) == [f"{namespace}-n000", f"{namespace}-n001"]
    assert len(pending) == 1
    assert pending[0][0] == "anti"
    assert "2 node(s) didn't match pod anti-affinity rules" in pending[0][1], pending[0][1]
    assert sorted(placed["spread"]) == [f"{namespace}-n000"] * 2 + [f"{namespace}-n001"] * 2
    await delete_all_pods(api, namespace)


async def test_a_services_replica_goes_where_the_default_spread_says_when_the_gpu_score_ties(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """kube-scheduler's System default spread on the real API server: a Service selects three
    web replicas on the first node (the other holds as many db pods; all ask nothing, so the
    GPU score ties); the fourth replica goes to the second node. A pod no Service selects takes
    the tie's first node, so the rule is what moved the replica."""
    sel = {"test": namespace}
    first, second = (node.name for node in await make_nodes(api, namespace, 2, gpus=8))
    await api.create(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        },
    )
    standing = []
    for index in range(3):
        for app, node in (("web", first), ("db", second)):
            pod = _with_pod_rules(gpu_pod(f"{app}-{index}", gpus=0, selector=sel), app)
            pod["spec"]["nodeName"] = node
            pod["spec"]["containers"][0]["resources"] = {}
            standing.append(pod)
    await create_pods(api, namespace, standing)
    schedulers.start("solo")
    replica = _with_pod_rules(gpu_pod("web-3", selector=sel), "web")
    unselected = _with_pod_rules(gpu_pod("api-0", selector=sel), "api")
    for pod, expected in ((replica, second), (unselected, first)):
        await create_pods(api, namespace, [pod])
        name = pod["metadata"]["name"]
        await wait_for(lambda: _settled(api, namespace, len(standing) + 1), 30, f"{name} to settle")
        bound = await api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        assert bound["spec"].get("nodeName") == expected, (name, pending_reason(bound))
        await api.request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            body={"gracePeriodSeconds": 0},
        )

        async def gone() -> bool:
            return len(await list_pods(api, namespace)) == len(standing)

        await wait_for(gone, 30, f"{name} to be deleted")
    await delete_all_pods(api, namespace)


async def test_sigkill_in_a_burst_loses_nothing_and_gives_no_share_twice(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    sel = {"test": namespace}
    await make_nodes(api, namespace, 40, gpus=8)
    # 40 nodes x 8 GPUs: room for 1280 quarter-GPU shares, or fewer with whole GPUs mixed in
    pods = [
        gpu_pod(f"p{i:04d}", gpus=1, selector=sel)
        if i % 5 == 0
        else gpu_pod(f"p{i:04d}", memory_mib=16000, cores=25, selector=sel)
        for i in range(2000)
    ]
    creating = asyncio.create_task(create_pods(api, namespace, pods))
    schedulers.start("first")

    async def some_bound() -> bool:
        bound = [p for p in await list_pods(api, namespace) if p["spec"].get("nodeName")]
        return len(bound) >= 300

    await wait_for(some_bound, 60, "300 pods bound", interval=0.1)
    schedulers.kill("first")
    await creating
    before = await list_pods(api, namespace)
    await assert_no_gpu_given_twice(api, before)
    schedulers.start("second")
    await wait_for(lambda: _settled(api, namespace, 2000), 240, "all 2000 pods settled", 1.0)
    after = await list_pods(api, namespace)
    used = await assert_no_gpu_given_twice(api, after)
    bound = [p for p in after if p["spec"].get("nodeName")]
    assert used == 320, "every GPU should be in use: there are more pods than room"
    assert 320 <= len(bound) < 2000
    for pod in after:
        if not pod["spec"].get("nodeName"):
            assert "nodes are available" in pending_reason(pod)
    # nothing bound before the kill moved or lost its allocation
    earlier = {p["metadata"]["uid"]: pod_allocation(p) for p in before if p["spec"].get("nodeName")}
    later = {p["metadata"]["uid"]: pod_allocation(p) for p in after}
    assert all(later[uid] == record for uid, record in earlier.items())
    assert "allocation conflict" not in schedulers.log("second")


async def _replica_pods(api: KubeAPI, namespace: str, names: list[str]) -> str:
    """Pods standing for the replicas' own (``--serving-pod``), in a namespace of their own."""
    own = f"{namespace}-replicas"
    await api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": own}}
    )
    await create_pods(api, own, [gpu_pod(name, gpus=0, scheduler="nobody") for name in names])
    return own


async def _serving(api: KubeAPI, namespace: str) -> list[str]:
    """The pods the API Service would select: those labelled as serving."""
    listing = await api.get(
        f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": f"{SERVING_LABEL}=true"}
    )
    return sorted(pod["metadata"]["name"] for pod in listing["items"])


async def test_two_replicas_only_the_leader_binds_and_serves_and_the_standby_takes_over(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    sel = {"test": namespace}
    await make_nodes(api, namespace, 4, gpus=8)
    own = await _replica_pods(api, namespace, ["alpha", "beta"])
    # a label the beta pod's earlier, crashed process left: the leader takes it off
    await api.patch(
        f"/api/v1/namespaces/{own}/pods/beta", {"metadata": {"labels": {SERVING_LABEL: "true"}}}
    )
    schedulers.start("alpha", args=("--serving-pod", f"{own}/alpha"))
    lease = f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{schedulers.lease_name}"

    async def alpha_leads() -> bool:  # a fixed sleep lost the race on a loaded machine
        try:
            held = await api.get(lease)
        except ApiError:
            return False
        return bool(held["spec"].get("holderIdentity") == "alpha")

    await wait_for(alpha_leads, 60, "alpha to take the Lease")
    await wait_for(
        lambda: _is(_serving(api, own), ["alpha"]), 30, "alpha's pod alone labelled as serving"
    )
    schedulers.start("beta", args=("--serving-pod", f"{own}/beta"))
    await create_pods(api, namespace, [gpu_pod(f"a{i}", selector=sel) for i in range(12)])
    await wait_for(lambda: _settled(api, namespace, 12), 60, "first batch bound")
    first = await list_pods(api, namespace)
    assert {pod_allocation(p)["scheduler"] for p in first} == {"alpha"}  # type: ignore[index]

    schedulers.kill("alpha")
    await create_pods(api, namespace, [gpu_pod(f"b{i}", selector=sel) for i in range(12)])
    await wait_for(lambda: _settled(api, namespace, 24), 40, "second batch bound by beta")
    pods = await list_pods(api, namespace)
    later = [p for p in pods if p["metadata"]["name"].startswith("b")]
    assert {pod_allocation(p)["scheduler"] for p in later} == {"beta"}  # type: ignore[index]
    assert await assert_no_gpu_given_twice(api, pods) == 24
    # SIGKILLed, alpha could not take its label off: beta did when it began to lead
    await wait_for(
        lambda: _is(_serving(api, own), ["beta"]), 30, "beta's pod alone labelled as serving"
    )


async def _is(found: Awaitable[list[str]], expected: list[str]) -> bool:
    return await found == expected
