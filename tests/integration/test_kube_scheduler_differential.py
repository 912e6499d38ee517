"""gpupool's placements checked by the real kube-scheduler 1.37.2, pod by pod, on the same state.

Generated pods (:mod:`.kube_rules_corpus`: whole GPUs with CPU, sidecars, another vendor's
device, host ports, zone selectors, taints, pod affinity and anti-affinity, topology spread,
bound local volumes) go
one at a time to gpupool in world A. Each one's twin then goes to kube-scheduler in world B, the
same nodes under other names, where every earlier pod stands exactly where gpupool put it:

* bound by gpupool to node ``n``: the twin is pinned to ``n``'s twin (it asks an extended
  resource only that node offers: a pin by node affinity would change what its spread
  constraints count), so kube-scheduler binds it only if every one of its filters accepts that
  node; otherwise the test fails with kube-scheduler's own message;
* left pending by gpupool: the twin goes unpinned; if kube-scheduler places it, gpupool's
  reason must name a rule of gpupool's own (a pool, a queue, a GPU), and the twin is removed
  again, as the pod is from world A, so the worlds stay alike.

Preemption cannot blur this: every pod has the same priority.
"""

from __future__ import annotations

import os
import random

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.fakenodes import create_nodes
from gpupool.kube.client.api import ApiError, KubeAPI

from .kube_rules_corpus import (
    STORAGE_CLASS,
    Json,
    generated_pod,
    in_world,
    node_status_extras,
    node_taints,
    world_nodes,
    world_volumes,
)
from .live_helpers import SchedulerProcesses, delete_all_pods, pending_reason, wait_for

PODS = 150
SEEDS = tuple(int(s) for s in os.environ.get("GPUPOOL_DIFFERENTIAL_SEEDS", "7,8").split(","))
CHURN = 0.4
"""After each pod bound, the chance that a running pod (chosen at random) ends."""
GPUPOOL_RULES = ("gpupool", "GPUPool", "GPUQueue", "queue")
"""Words a pending reason of gpupool's own rules contains (pools, queues, GPU fit)."""


async def _world(api: KubeAPI, namespace: str, world: str, pins: bool) -> None:
    """The world's namespace and its six nodes, with their NICs and taint (and pins)."""
    await api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    nodes = world_nodes(world)
    await create_nodes(api, nodes)
    for index, node in enumerate(nodes):
        extras = node_status_extras(index, pins)
        if extras:
            status = (await api.get(f"/api/v1/nodes/{node.name}"))["status"]
            await api.patch(
                f"/api/v1/nodes/{node.name}/status",
                {
                    "status": {
                        "capacity": {**status["capacity"], **extras},
                        "allocatable": {**status["allocatable"], **extras},
                    }
                },
            )
        taints = node_taints(index)
        if taints:
            await api.patch(f"/api/v1/nodes/{node.name}", {"spec": {"taints": taints}})

    async def ready() -> bool:
        listing = await api.get("/api/v1/nodes", {"labelSelector": f"test={world}"})
        return len(listing["items"]) == len(nodes) and all(
            any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n["status"].get("conditions", [])
            )
            for n in listing["items"]
        )

    await wait_for(ready, 60, f"{world}'s nodes Ready")
    for volume, claim in world_volumes(world):
        await api.create("/api/v1/persistentvolumes", volume)
        await api.create(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim)
        bound = {"phase": "Bound", "accessModes": ["ReadWriteOnce"]}
        await api.patch(
            f"/api/v1/persistentvolumes/{volume['metadata']['name']}/status",
            {"status": {"phase": "Bound"}},
        )
        await api.patch(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/"
            f"{claim['metadata']['name']}/status",
            {"status": bound | {"capacity": {"storage": "10Gi"}}},
        )


async def _storage_class(api: KubeAPI) -> None:
    """The local volumes' class (no provisioner), made once per cluster."""
    try:
        await api.create(
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": STORAGE_CLASS},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )
    except ApiError as error:
        if error.status != 409:
            raise


async def _decided(api: KubeAPI, namespace: str, name: str) -> Json:
    """The pod once bound, or once its scheduler said why it waits."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    found: Json = {}

    async def settled() -> bool:
        nonlocal found
        found = await api.get(path)
        reason = pending_reason(found)
        return bool(found["spec"].get("nodeName")) or bool(
            reason and not reason.startswith("waiting behind ")
        )

    await wait_for(settled, 60, f"{namespace}/{name} bound or told why", interval=0.05)
    return found


async def _remove(api: KubeAPI, namespaces: list[str], name: str) -> None:
    """Delete the pod in each world and wait until it is gone from both.

    Each scheduler then sees the deletion before the next pod: both read one pod watch, whose
    events come in order.
    """
    for namespace in namespaces:
        await api.request(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body={"gracePeriodSeconds": 0}
        )

    async def gone() -> bool:
        for namespace in namespaces:
            try:
                await api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            except ApiError as error:
                if error.status == 404:
                    continue
                raise
            return False
        return True

    await wait_for(gone, 30, f"{name} deleted", interval=0.05)


async def test_every_node_gpupool_chooses_is_one_kube_schedulers_filters_accept(
    api: KubeAPI,
    namespace: str,
    schedulers: SchedulerProcesses,
    control_plane: LocalControlPlane,
) -> None:
    tally = {"bound": 0, "bound by its volume": 0, "pending": 0, "pending for gpupool's rules": 0}
    worlds = {seed: (f"{namespace}-s{seed}-a", f"{namespace}-s{seed}-b") for seed in SEEDS}
    await _storage_class(api)
    for ours, theirs in worlds.values():  # every node Ready before either scheduler starts
        await _world(api, ours, ours, pins=False)
        await _world(api, theirs, theirs, pins=True)
    control_plane.start_kube_scheduler()
    schedulers.start("solo")
    try:
        for seed, (ours, theirs) in worlds.items():
            rng = random.Random(seed)
            running: list[str] = []
            for index in range(PODS):
                pod = generated_pod(rng, index)
                name = pod["metadata"]["name"]
                await api.create(f"/api/v1/namespaces/{ours}/pods", in_world(pod, ours, "gpupool"))
                decided = await _decided(api, ours, name)
                node = decided["spec"].get("nodeName")
                twin_node = node.replace(ours, theirs, 1) if node else None
                index = int(node.rpartition("-n")[2]) if node else None
                await api.create(
                    f"/api/v1/namespaces/{theirs}/pods",
                    in_world(pod, theirs, "default-scheduler", index),
                )
                judged = await _decided(api, theirs, name)
                where = f"seed {seed}, {name}: {pod['spec']}"
                if node:
                    tally["bound"] += 1
                    assert judged["spec"].get("nodeName") == twin_node, (
                        f"{where}: gpupool chose {node}; kube-scheduler refuses its twin: "
                        f"{pending_reason(judged)}"
                    )
                    running.append(name)
                    tally["bound by its volume"] += "volumes" in pod["spec"]
                    if rng.random() < CHURN:  # a pod ends, in both worlds
                        ended = running.pop(rng.randrange(len(running)))
                        await _remove(api, [ours, theirs], ended)
                    continue
                tally["pending"] += 1
                reason = pending_reason(decided)
                if judged["spec"].get("nodeName"):
                    assert any(word in reason for word in GPUPOOL_RULES), (
                        f"{where}: kube-scheduler places it on {judged['spec']['nodeName']}, "
                        f"gpupool leaves it pending saying: {reason}"
                    )
                    tally["pending for gpupool's rules"] += 1
                await _remove(api, [ours, theirs], name)
    finally:
        control_plane.stop_process("kube-scheduler")
        await delete_all_pods(api, *(world for pair in worlds.values() for world in pair))
        for world in (world for pair in worlds.values() for world in pair):
            for volume, _ in world_volumes(world):
                await api.delete(f"/api/v1/persistentvolumes/{volume['metadata']['name']}")
    print(f"differential over seeds {SEEDS}: {tally}")  # shown with -s
    # the corpus exercises both outcomes, or it shows nothing
    assert tally["bound"] >= PODS * len(SEEDS) // 5, tally
    assert tally["pending"] >= 1, tally
    assert tally["bound by its volume"] >= 1, tally
