"""Seeded pods that mix GPU requests with the constraints kube-scheduler honours, and twin nodes.

The pods ask whole GPUs (or none) beside what kube-scheduler's own filters read: CPU with
init containers and native sidecars (the effective request), another vendor's device
(``example.com/rdma``), host ports, a zone selector, tolerations of a tainted node, required pod
affinity and anti-affinity on the hostname and the zone, and topology spread on either key
(``DoNotSchedule`` with ``maxSkew`` 1 or 2, ``minDomains``, ``nodeTaintsPolicy``,
``matchLabelKeys``; ``ScheduleAnyway`` too, which filters nothing), and a bound local
PersistentVolume on one node (:func:`world_volumes`). Preferred rules are left out: they only
score, and the differential test pins each pod to the node gpupool chose.

The nodes come twice, as two worlds with the same shapes and topology labels but their own
names and ``test`` label, so that one scheduler can decide in one world and the other be
checked in the other on exactly the same state (pods count against each other only within a
namespace, and each world is its own namespace).
"""

from __future__ import annotations

import random
from typing import Any

from gpupool.devcluster.fakenodes import FakeGpuNode

Json = dict[str, Any]

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
RDMA = "example.com/rdma"
TAINT = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}
APPS = ("web", "db", "cache")
NODES = 6
RDMA_NODES = (1, 3, 5)
TAINTED_NODE = 4
STORAGE_CLASS = "gpupool-differential-local"
"""The local volumes' class; kube-scheduler's VolumeBinding needs it to exist."""


def world_nodes(world: str) -> list[FakeGpuNode]:
    """Six 8-GPU nodes in two zones and three racks; 32 CPUs each, so CPU can run out."""
    return [
        FakeGpuNode(
            f"{world}-n{i}",
            gpus=8,
            cpu=32,
            memory_gib=256,
            labels=(("test", world), (ZONE, f"zone-{i % 2}"), (RACK, f"rack-{i % 3}")),
        )
        for i in range(NODES)
    ]


def pin_resource(index: int) -> str:
    """An extended resource only node ``index`` of the checking world offers (plenty of it).

    It pins a twin to one node without touching what spread and affinity count: a required
    node affinity would (with ``nodeAffinityPolicy: Honor``, the default, a spread constraint
    then sees one domain only).
    """
    return f"pin.example.com/n{index}"


def node_status_extras(index: int, pins: bool) -> dict[str, str]:
    """The other vendor's devices a node offers (two NICs on every other node), and its pin."""
    extras = {RDMA: "2"} if index in RDMA_NODES else {}
    return extras | ({pin_resource(index): "1000"} if pins else {})


def volume_claim(index: int) -> str:
    """The claim, in every world's namespace, bound to the local volume on node ``index``."""
    return f"data-n{index}"


def world_volumes(world: str) -> list[tuple[Json, Json]]:
    """Per node, a local PersistentVolume on it and the claim bound to it, as the PV controller
    leaves them (``pv.kubernetes.io/bind-completed``; the status is the caller's to set)."""
    pairs = []
    for index in range(NODES):
        name, claim = f"{world}-data-n{index}", volume_claim(index)
        on_node = {"key": HOSTNAME, "operator": "In", "values": [f"{world}-n{index}"]}
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": STORAGE_CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "local": {"path": f"/mnt/{name}"},
                "nodeAffinity": {
                    "required": {"nodeSelectorTerms": [{"matchExpressions": [on_node]}]}
                },
                "claimRef": {"namespace": world, "name": claim},
            },
        }
        bound = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": claim,
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "10Gi"}},
                "storageClassName": STORAGE_CLASS,
                "volumeName": name,
            },
        }
        pairs.append((volume, bound))
    return pairs


def node_taints(index: int) -> list[Json]:
    """One node is kept for tolerating pods."""
    return [TAINT] if index == TAINTED_NODE else []


def _term(app: str, key: str) -> Json:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def _spread(rng: random.Random, app: str) -> Json:
    constraint: Json = {
        "maxSkew": rng.choice((1, 1, 2)),
        "topologyKey": rng.choice((HOSTNAME, ZONE, RACK)),
        "whenUnsatisfiable": rng.choice(("DoNotSchedule", "DoNotSchedule", "ScheduleAnyway")),
        "labelSelector": {"matchLabels": {"app": app}},
    }
    if rng.random() < 0.2 and constraint["whenUnsatisfiable"] == "DoNotSchedule":
        constraint["minDomains"] = rng.choice((3, 4))
    if rng.random() < 0.3:
        constraint["nodeTaintsPolicy"] = "Honor"
    if rng.random() < 0.3:
        constraint["matchLabelKeys"] = ["generation"]
    return constraint


def _affinity(rng: random.Random, app: str) -> Json:
    affinity: Json = {}
    if rng.random() < 0.25:
        key = rng.choice((HOSTNAME, HOSTNAME, ZONE))
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term(app, key)]
        }
    if rng.random() < 0.12:
        term = _term(rng.choice(APPS), rng.choice((ZONE, RACK)))
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    return affinity


def _container(name: str, cpu: str, limits: dict[str, str] | None = None) -> Json:
    return {
        "name": name,
        "image": "registry.invalid/cuda:latest",
        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": limits or {}},
    }


def generated_pod(rng: random.Random, index: int) -> Json:
    """One pod of the corpus (scheduler and world are the caller's to set)."""
    app = rng.choice(APPS)
    limits: dict[str, str] = {}
    gpus = rng.choice((0, 1, 1, 1, 2, 4))
    if gpus:
        limits["gpupool.io/gpu"] = str(gpus)
    if rng.random() < 0.2:
        limits[RDMA] = "1"
    main = _container("main", rng.choice(("1", "2", "4", "8")), limits)
    if rng.random() < 0.15:
        main["ports"] = [{"containerPort": 80, "hostPort": rng.choice((9000, 9001))}]
    spec: Json = {"containers": [main], "terminationGracePeriodSeconds": 0}
    if rng.random() < 0.15:  # a native sidecar: added to the main containers' requests
        sidecar = _container("log-shipper", rng.choice(("1", "4")))
        spec["initContainers"] = [sidecar | {"restartPolicy": "Always"}]
    elif rng.random() < 0.1:  # a plain init container: the larger of it and the rest counts
        spec["initContainers"] = [_container("fetch", rng.choice(("8", "24")))]
    if rng.random() < 0.15:
        spec["nodeSelector"] = {ZONE: rng.choice(("zone-0", "zone-1"))}
    if rng.random() < 0.3:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    affinity = _affinity(rng, app)
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.25:
        spec["topologySpreadConstraints"] = [_spread(rng, app)]
    if rng.random() < 0.15:  # its dataset on one node's local disk: only that node will do
        claim = {"claimName": volume_claim(rng.randrange(NODES))}
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": claim}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p{index:03d}",
            "labels": {"app": app, "generation": rng.choice(("g1", "g2"))},
        },
        "spec": spec,
    }


def in_world(pod: Json, world: str, scheduler: str, node_index: int | None = None) -> Json:
    """The pod for one world: its nodes only, its scheduler, and pinned to a node if given
    (by asking that node's :func:`pin_resource`)."""
    spec = dict(pod["spec"])
    spec["schedulerName"] = scheduler
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "test": world}
    if node_index is not None:
        main, *others = spec["containers"]
        limits = {**main["resources"]["limits"], pin_resource(node_index): "1"}
        main = {**main, "resources": {**main["resources"], "limits": limits}}
        spec["containers"] = [main, *others]
    return {**pod, "spec": spec}
