"""Pools, queues and preemption on a real API server: the GPUPool and GPUQueue CRDs made true.

Each test makes its own nodes, pools and queues (cluster-scoped objects carry the test's
namespace in their names and selectors, so tests sharing a control plane do not meet) and runs
``gpupool control-plane``. With kwok there is no kubelet: an evicted pod gets a
``deletionTimestamp`` and kwok's pod-delete stage removes it, as a kubelet would once its
containers stopped. Without kube-controller-manager no PodDisruptionBudget has its status
computed, so the Eviction API refuses (429) every eviction a budget covers: that is how these
tests show a budget is honoured.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.install.crds import install_crds
from gpupool.kube.objects.timestamps import now_rfc3339

from .live_helpers import (
    SchedulerProcesses,
    assert_no_gpu_given_twice,
    create_mig_node,
    create_pods,
    create_priority_class,
    events_about,
    gpu_pod,
    grant_role,
    list_pods,
    make_nodes,
    pending_reason,
    pod_allocation,
    printer_columns,
    wait_for,
    wait_for_events,
)
from .pod_corpus import Ask, corpus_nodes, fuzz_pods

pytestmark = pytest.mark.integration

GROUP = "/apis/gpupool.io/v1alpha1"
Json = dict[str, Any]


async def _apply(api: KubeAPI, kind: str, name: str, spec: Json) -> None:
    plural = {"GPUPool": "gpupools", "GPUQueue": "gpuqueues"}[kind]
    await api.create(
        f"{GROUP}/{plural}",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        },
    )


async def _namespace(api: KubeAPI, name: str) -> str:
    await api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def _pod(name: str, selector: dict[str, str], **kwargs: Any) -> Json:
    """``gpu_pod`` with a class label, a priority class or a MIG slice when asked."""
    workload_class = kwargs.pop("workload_class", "")
    priority_class = kwargs.pop("priority_class", "")
    mig = kwargs.pop("mig", "")
    labels = kwargs.pop("labels", {})
    pod = gpu_pod(name, selector=selector, **kwargs)
    pod["metadata"]["labels"] = {**labels}
    if workload_class:
        pod["metadata"]["labels"]["gpupool.io/class"] = workload_class
    if priority_class:
        pod["spec"]["priorityClassName"] = priority_class
    if mig:
        pod["spec"]["containers"][0]["resources"]["limits"] = {f"gpupool.io/mig-{mig}": "1"}
    return pod


async def _by_name(api: KubeAPI, namespace: str) -> dict[str, Json]:
    return {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}


async def _bound(api: KubeAPI, namespace: str, names: set[str]) -> bool:
    pods = await _by_name(api, namespace)
    return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names)


async def _reason(api: KubeAPI, namespace: str, name: str) -> str:
    pods = await _by_name(api, namespace)
    return pending_reason(pods[name]) if name in pods else ""


async def test_routing_ceiling_concurrency_and_status(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    await install_crds(api)
    ns = namespace
    sel = {"test": ns}
    await make_nodes(api, f"{ns}-s", 1, gpus=4, gpu_model="A100", gpu_memory_mib=40960)
    await make_nodes(api, f"{ns}-x", 1, gpus=4, gpu_model="A100", gpu_memory_mib=40960)
    for node, role in ((f"{ns}-s-n000", "shared"), (f"{ns}-x-n000", "exclusive")):
        await api.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {**sel, "role": role}}})
    shared, exclusive, queue = f"{ns}-shared", f"{ns}-excl", f"{ns}-research"
    await _apply(
        api, "GPUPool", shared, {"mode": "Shared", "nodeSelector": {"role": "shared", **sel}}
    )
    await _apply(
        api,
        "GPUPool",
        exclusive,
        {"mode": "Exclusive", "nodeSelector": {"role": "exclusive", **sel}},
    )
    await _apply(
        api, "GPUQueue", queue, {"namespaces": [ns], "quotas": [{"pool": exclusive, "ceiling": 2}]}
    )
    limited = await _namespace(api, f"{ns}-lim")
    await _apply(api, "GPUQueue", f"{ns}-small", {"namespaces": [limited], "maxConcurrentPods": 2})
    pods = [
        _pod("share", sel, gpus=1, memory_mib=10000, cores=20),
        _pod("whole", sel, gpus=1),
        _pod("train", sel, gpus=1, workload_class="training"),
        _pod("cpu-training", sel, gpus=0, workload_class="training"),
        _pod("cpu-dev", sel, gpus=0, workload_class="dev"),
    ]
    await create_pods(api, ns, pods)
    schedulers.start("solo")
    await wait_for(lambda: _bound(api, ns, {p["metadata"]["name"] for p in pods}), 60, "binds")
    by_name = await _by_name(api, ns)
    node_of = {name: p["spec"]["nodeName"] for name, p in by_name.items()}
    assert node_of["share"] == f"{ns}-s-n000"
    assert node_of["whole"] == node_of["train"] == node_of["cpu-training"] == f"{ns}-x-n000"
    assert node_of["cpu-dev"] == f"{ns}-s-n000"
    record = pod_allocation(by_name["whole"])
    assert record is not None
    assert (record["pool"], record["queue"]) == (exclusive, queue)

    # the ceiling: 2 GPU units of the exclusive pool are held; a third whole GPU waits
    await create_pods(api, ns, [_pod("held", sel, gpus=1)])
    expected = f"queue {queue}: ceiling 2 GPU units reached in pool {exclusive}"

    async def held() -> bool:
        return await _reason(api, ns, "held") == expected

    await wait_for(held, 30, "the ceiling reason")
    await wait_for_events(
        api,
        ns,
        "held's FailedScheduling Event naming the ceiling",
        regarding="held",
        reason="FailedScheduling",
        until=lambda events: any(e["note"] == expected for e in events),
    )

    # maxConcurrentPods: two run, the third waits naming the limit
    await create_pods(api, limited, [_pod(f"p{i}", sel, gpus=0) for i in range(3)])

    async def limited_settled() -> bool:
        pods = await list_pods(api, limited)
        bound = [p for p in pods if p["spec"].get("nodeName")]
        waiting = [pending_reason(p) for p in pods if not p["spec"].get("nodeName")]
        return len(bound) == 2 and waiting == [f"queue {ns}-small: maxConcurrentPods 2 reached"]

    await wait_for(limited_settled, 30, "two pods bound and one held by maxConcurrentPods")

    # status, as `kubectl get gpool` / `kubectl get gq` print it
    async def status_true() -> bool:
        pools = await printer_columns(api, f"{GROUP}/gpupools")
        queues = await printer_columns(api, f"{GROUP}/gpuqueues")
        return (
            pools.get(exclusive, {}).get("GPUs") == 4
            and pools[exclusive].get("Allocated") == 2
            and pools.get(shared, {}).get("Allocated") == 0.245  # 10000 of 40960 MiB
            and queues.get(queue, {}).get("Running") == 5
            and queues[queue].get("Pending") == 1
        )

    await wait_for(status_true, 30, "pool and queue status")
    pool = await api.get(f"{GROUP}/gpupools/{exclusive}")
    assert pool["status"]["nodes"] == 1
    assert pool["status"]["pods"] == 3
    assert pool["status"]["observedGeneration"] == pool["metadata"]["generation"]
    conditions = {c["type"]: c["status"] for c in pool["status"]["conditions"]}
    assert conditions == {"NodeConflict": "False", "Valid": "True"}


async def test_preemption_waits_for_a_budget_then_evicts_and_binds_the_preemptor(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    await install_crds(api)
    ns = namespace
    sel = {"test": ns}
    await make_nodes(api, ns, 1, gpus=2)
    await _apply(api, "GPUQueue", f"{ns}-q", {"namespaces": [ns]})
    await create_priority_class(api, f"{ns}-low", 10)
    await create_priority_class(api, f"{ns}-high", 1000)
    low = [
        _pod(f"low{i}", sel, gpus=1, priority_class=f"{ns}-low", labels={"app": "victim"})
        for i in range(2)
    ]
    await create_pods(api, ns, low)
    await api.create(
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-one"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "victim"}}},
        },
    )
    schedulers.start("solo")
    await wait_for(lambda: _bound(api, ns, {"low0", "low1"}), 60, "the low-priority pods")
    await create_pods(api, ns, [_pod("urgent", sel, gpus=2, priority_class=f"{ns}-high")])

    async def blocked() -> bool:  # the reason and the nomination are separate writes
        urgent = (await _by_name(api, ns))["urgent"]
        return "PodDisruptionBudget" in pending_reason(urgent) and bool(
            urgent["status"].get("nominatedNodeName")
        )

    await wait_for(blocked, 60, "the preemptor nominated and waiting for the budget")
    by_name = await _by_name(api, ns)
    assert all(by_name[f"low{i}"]["metadata"].get("deletionTimestamp") is None for i in range(2))
    assert by_name["urgent"]["status"].get("nominatedNodeName") == f"{ns}-n000"
    assert not by_name["urgent"]["spec"].get("nodeName")

    await api.delete(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/keep-one")

    async def preempted() -> bool:
        pods = await _by_name(api, ns)
        return (
            "low0" not in pods
            and "low1" not in pods
            and bool(pods["urgent"]["spec"].get("nodeName"))
        )

    await wait_for(preempted, 90, "the victims evicted and the preemptor bound")
    urgent = (await _by_name(api, ns))["urgent"]
    assert urgent["spec"]["nodeName"] == f"{ns}-n000"
    for victim in ("low0", "low1"):
        [preempted, *_] = await wait_for_events(
            api, ns, f"the Preempted Event on {victim}", regarding=victim, reason="Preempted"
        )
        assert f"{ns}/urgent" in preempted["note"]
        assert "rule priority" in preempted["note"]
    [preempting, *_] = await wait_for_events(
        api, ns, "the Preempting Event on urgent", regarding="urgent", reason="Preempting"
    )
    assert "rule priority" in preempting["note"]


TENANT_POD_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]}]
"""What a tenant may do in its namespace here: create and read pods, nothing cluster-wide."""


@pytest.mark.parametrize("borrower_priority", [0, 1_000_000], ids=["plain", "high-priority"])
async def test_a_queue_under_its_guarantee_reclaims_borrowed_gpus(
    api: KubeAPI,
    namespace: str,
    schedulers: SchedulerProcesses,
    control_plane: LocalControlPlane,
    borrower_priority: int,
) -> None:
    """Both tenants create their pods with their own client certificates and pod rights only.

    With ``high-priority`` the borrower's pods carry a PriorityClass far above the owner's pod:
    pod priority orders pods inside a queue, so it cannot shield capacity borrowed from a
    guarantee (before, reclaim took only pods of equal or lower priority and the owner waited).
    """
    await install_crds(api)
    ns = namespace
    sel = {"test": ns}
    await make_nodes(api, ns, 1, gpus=4)
    pool = f"{ns}-pool"
    await _apply(api, "GPUPool", pool, {"mode": "Exclusive", "nodeSelector": sel})
    owner = await _namespace(api, f"{ns}-owner")
    await _apply(
        api,
        "GPUQueue",
        f"{ns}-owner",
        {"namespaces": [owner], "quotas": [{"pool": pool, "guaranteed": 2}]},
    )
    await _apply(api, "GPUQueue", f"{ns}-borrower", {"namespaces": [ns]})
    extra: Json = {}
    if borrower_priority:
        await create_priority_class(api, f"{ns}-high", borrower_priority)
        extra = {"priority_class": f"{ns}-high"}
    tenants = {}
    for user, space in ((f"{ns}-borrower", ns), (f"{ns}-owner", owner)):
        await grant_role(api, space, user, TENANT_POD_RULES)
        tenants[space] = KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(user))
    try:
        with pytest.raises(ApiError) as refused:  # a tenant, not an administrator
            await tenants[ns].get("/api/v1/nodes")
        assert refused.value.status == 403
        await create_pods(tenants[ns], ns, [_pod(f"b{i}", sel, gpus=1, **extra) for i in range(4)])
        schedulers.start("solo")
        await wait_for(lambda: _bound(api, ns, {f"b{i}" for i in range(4)}), 60, "the borrower")
        await create_pods(tenants[owner], owner, [_pod("mine", sel, gpus=2)])
        await wait_for(lambda: _bound(api, owner, {"mine"}), 90, "the owner's pod after reclaim")
    finally:
        for tenant in tenants.values():
            await tenant.close()
    left = await list_pods(api, ns)
    assert len(left) == 2  # two borrowed GPUs taken back, no more
    assert all(p["spec"].get("priority", 0) == borrower_priority for p in left)
    record = pod_allocation((await _by_name(api, owner))["mine"])
    assert record is not None
    assert record["queue"] == f"{ns}-owner"
    events = await wait_for_events(
        api,
        ns,
        "a Preempted Event on each reclaimed pod",
        reason="Preempted",
        until=lambda events: len(events) >= 2,
    )
    notes = [e["note"] for e in events]
    assert len(notes) == 2
    assert all(f"{owner}/mine" in note and "rule reclaim" in note for note in notes)


async def test_mig_slices_are_placed_in_a_mig_pool(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    await install_crds(api)
    ns = namespace
    sel = {"test": ns}
    await create_mig_node(api, f"{ns}-mig", sel, {"1g.10gb": 7})
    await _apply(api, "GPUPool", f"{ns}-mig", {"mode": "MIG", "nodeSelector": sel})
    pods = [_pod(f"m{i}", sel, gpus=0, mig="1g.10gb") for i in range(8)]
    await create_pods(api, ns, pods)
    schedulers.start("solo")

    async def settled() -> bool:
        pods = await list_pods(api, ns)
        return sum(bool(p["spec"].get("nodeName")) for p in pods) == 7 and any(
            pending_reason(p) for p in pods
        )

    await wait_for(settled, 60, "seven slices placed, the eighth pending")
    for pod in await list_pods(api, ns):
        if pod["spec"].get("nodeName"):
            record = pod_allocation(pod)
            assert record is not None
            assert (record["kind"], record["migProfile"]) == ("mig", "1g.10gb")
            assert record["pool"] == f"{ns}-mig"


async def test_a_pool_avoiding_contention_uses_the_calm_gpu_until_the_agent_goes_silent(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    await install_crds(api)
    ns = namespace
    sel = {"test": ns}
    (node,) = await make_nodes(api, ns, 1, gpus=2)
    pool = {"mode": "Shared", "nodeSelector": sel, "contention": {"avoidAbove": 0.5}}
    await _apply(api, "GPUPool", f"{ns}-calm", pool)

    async def agent_reports(gpus: Json, period: float = 60.0) -> None:  # as its agent would
        value = {"sampledAt": now_rfc3339(), "periodSeconds": period, "gpus": gpus}
        annotations = {"gpupool.io/gpu-contention": json.dumps(value)}
        await api.patch(f"/api/v1/nodes/{node.name}", {"metadata": {"annotations": annotations}})

    contended = {"0": {"level": "high", "score": 0.8, "reasons": ["SM saturated"]}}
    await agent_reports(contended)
    await create_pods(api, ns, [_pod("first", sel, cores=60, memory_mib=1000)])
    schedulers.start("solo")
    await wait_for(lambda: _bound(api, ns, {"first"}), 60, "the first share bound")
    first = pod_allocation((await _by_name(api, ns))["first"])
    assert first is not None
    assert [gpu["index"] for gpu in first["gpus"]] == [1]  # GPU 0 is free but contended

    await create_pods(api, ns, [_pod("second", sel, cores=60, memory_mib=1000)])

    async def told() -> bool:  # its node counted under the contention, not as full
        return "1 node(s) had room only on GPUs under contention" in await _reason(
            api, ns, "second"
        )

    await wait_for(told, 60, "the second share to wait on the contention")
    # the agent publishes the same scores once more, then falls silent: three of its periods
    # later they are stale, and with no event at all the waiting share takes GPU 0
    await agent_reports(contended, period=2.0)
    await wait_for(lambda: _bound(api, ns, {"second"}), 60, "the second share bound")
    second = pod_allocation((await _by_name(api, ns))["second"])
    assert second is not None
    assert [gpu["index"] for gpu in second["gpus"]] == [0]


DEDICATED = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}


@pytest.mark.parametrize("steer", ["node-selector", "untolerated-taint"])
async def test_a_constrained_pod_preempts_on_the_node_it_can_use(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses, steer: str
) -> None:
    """The cheapest victim is on n001, which the preemptor may not use: it preempts on n000.

    ``old`` runs on n000 and ``young`` (started later, so evicting it loses less) on n001. The
    urgent pod may use only n000: its node selector names n000's zone, or n001 carries a taint
    it does not tolerate. The engine's victim search sees that (it is part of the pod's
    request), so ``old`` is evicted and the urgent pod binds on n000; ``young`` is untouched.
    When the search could not see it, it chose n001, the preemption was refused afterwards and
    the pod waited.
    """
    await install_crds(api)
    ns = namespace
    sel = {"test": ns}
    await make_nodes(api, ns, 2, gpus=1)
    n0, n1 = f"{ns}-n000", f"{ns}-n001"
    await api.patch(f"/api/v1/nodes/{n0}", {"metadata": {"labels": {"zone": "a"}}})
    n1_patch: Json = {"metadata": {"labels": {"zone": "b"}}}
    if steer == "untolerated-taint":
        n1_patch["spec"] = {"taints": [DEDICATED]}
    await api.patch(f"/api/v1/nodes/{n1}", n1_patch)
    await _apply(api, "GPUQueue", f"{ns}-q", {"namespaces": [ns]})
    await create_priority_class(api, f"{ns}-low", 10)
    await create_priority_class(api, f"{ns}-high", 1000)
    schedulers.start("solo")
    for name, zone in (("old", "a"), ("young", "b")):
        pod = _pod(name, {**sel, "zone": zone}, gpus=1, priority_class=f"{ns}-low")
        pod["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
        await create_pods(api, ns, [pod])
        await wait_for(lambda name=name: _bound(api, ns, {name}), 60, f"{name} bound")
        await asyncio.sleep(2.0)  # young starts later: evicting it would lose less GPU time
    urgent_selector = {**sel, "zone": "a"} if steer == "node-selector" else sel
    await create_pods(
        api, ns, [_pod("urgent", urgent_selector, gpus=1, priority_class=f"{ns}-high")]
    )

    async def preempted() -> bool:
        pods = await _by_name(api, ns)
        return "old" not in pods and bool(pods["urgent"]["spec"].get("nodeName"))

    await wait_for(preempted, 90, "old evicted and the urgent pod bound")
    pods = await _by_name(api, ns)
    assert pods["urgent"]["spec"]["nodeName"] == n0
    assert pods["young"]["spec"]["nodeName"] == n1
    assert pods["young"]["metadata"].get("deletionTimestamp") is None
    preempting = await wait_for_events(
        api, ns, "the Preempting Event on urgent", regarding="urgent", reason="Preempting"
    )
    assert len(preempting) == 1
    assert f"{ns}/old on node {n0}" in preempting[0]["note"]
    assert all(e["reason"] != "Preempted" for e in await events_about(api, ns, "young"))


def _room_for(ask: Ask, node: FakeGpuNode, bound: list[Ask]) -> bool:
    """Whether ``node`` has CPU, memory and a pod slot left for ``ask`` beside ``bound``."""
    return (
        ask.fits_alone(node)
        and len(bound) < node.max_pods
        and sum(b.cpu_milli for b in bound) + ask.cpu_milli <= node.cpu * 1000
        and sum(b.memory_mib for b in bound) + ask.memory_mib <= node.memory_gib * 1024
    )


def _holder_needs_it(
    reason: str, ns: str, asks: dict[str, Ask], ask: Ask, node: FakeGpuNode, bound: list[Ask]
) -> bool:
    """Whether ``reason`` keeps ``ask`` off ``node`` for a holder that could not fit beside it.

    A backfill reservation keeps a CPU pod off its node only where, at the reserved start, the
    holder would not fit beside it; what runs there now leaves at least as little, so the
    holder not fitting now beside the pod is what such a reason must rest on.
    """
    delay = rf"backfill: would delay {re.escape(ns)}/(p\d+), reserved on node (\S+) "
    found = re.match(delay, reason)
    if found is None or found[2] != node.name:
        return False
    return not _room_for(asks[found[1]], node, [*bound, ask])


async def test_a_fuzz_corpus_leaves_no_pod_without_a_reason_and_binds_the_cpu_pods_that_fit(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """300 random pods on four nodes: each is bound or says why, within a minute.

    The corpus (:mod:`.pod_corpus`, seeded) mixes CPU-only pods, whole GPUs, shares, MIG
    slices, GPU models, zones, priority classes, workload classes and queues; about one pod in
    eight can never fit (more CPU than any node beside three GPUs, a selector no node matches)
    and a few ask what gpupool cannot read. What the test expects is computed from the node
    shapes, not from the scheduler: a pod no node could hold says so and is named in no other
    pod's reason (it holds no reservation and keeps no one waiting), and every CPU-only pod
    that fits a node is bound unless the pods bound there left it no room.
    """
    await install_crds(api)
    ns = namespace
    sel = {"test": ns}
    nodes = corpus_nodes(ns, sel)
    await create_nodes(api, nodes)
    queues = [f"{ns}-train", f"{ns}-serve"]
    for queue in queues:
        await _apply(api, "GPUQueue", queue, {"namespaces": [ns]})
    classes = [f"{ns}-low", f"{ns}-high"]
    for value, name in enumerate(classes):
        await create_priority_class(api, name, 10 + 10 * value)
    corpus = fuzz_pods(30, 300, sel, priority_classes=classes, queues=queues)
    asks = {manifest["metadata"]["name"]: ask for manifest, ask in corpus}
    never = {name for name, ask in asks.items() if ask.readable and not ask.fits_somewhere(nodes)}
    assert len(never) >= 20  # the corpus exercises what it is for
    await create_pods(api, ns, [manifest for manifest, _ in corpus])
    process = schedulers.start("solo")
    shapes = {node.name: node for node in nodes}
    problems: list[str] = []

    async def settled() -> bool:
        pods = await _by_name(api, ns)
        on_node: dict[str, list[Ask]] = {name: [] for name in shapes}
        for name, pod in pods.items():
            if pod["spec"].get("nodeName"):
                on_node[pod["spec"]["nodeName"]].append(asks[name])
        problems.clear()
        for name, pod in pods.items():
            ask, reason = asks[name], pending_reason(pod)
            if pod["spec"].get("nodeName"):
                if name in never:
                    problems.append(f"{name} bound though no node could ever hold it")
                continue
            if not reason:
                problems.append(f"{name} pending without a reason")
            elif name in never and "no node could ever hold it" not in reason:
                problems.append(f"{name}: {reason!r} does not say it can never fit")
            elif not ask.readable and "invalid request" not in reason:
                problems.append(f"{name}: {reason!r} does not say the request is invalid")
            elif any(f"{ns}/{other}" in reason for other in never):  # names are p000..p299
                problems.append(f"{name} waits on a pod that can never fit: {reason!r}")
            elif ask.cpu_only and any(
                _room_for(ask, shapes[node], bound)
                and not _holder_needs_it(reason, ns, asks, ask, shapes[node], bound)
                for node, bound in on_node.items()
            ):
                problems.append(f"{name} (CPU only) pending beside room: {reason!r}")
        return not problems

    try:
        await wait_for(settled, 60, "every pod bound or told why", interval=1.0)
    except AssertionError as error:
        raise AssertionError(f"{error}: {problems[:10]}") from None
    assert process.poll() is None, "the scheduler stayed up"
    pods = await _by_name(api, ns)
    cpu_bound = [n for n, p in pods.items() if asks[n].cpu_only and p["spec"].get("nodeName")]
    assert len(cpu_bound) >= 50  # it had CPU pods to place, not only ones to refuse
    await assert_no_gpu_given_twice(api, pods.values())
