"""Builders of PersistentVolumeClaims, PersistentVolumes and StorageClasses as served."""

from __future__ import annotations

from typing import Any

import msgspec

from gpupool.kube.objects.volumes import (
    CSINode,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
)

Json = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"


def claim(
    name: str,
    *,
    namespace: str = "default",
    storage_class: str | None = "local",
    size: str = "10Gi",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    volume: str = "",
    bound: bool = False,
    annotations: dict[str, str] | None = None,
    owner: str = "",
    selector: Json | None = None,
    version: str = "1",
) -> PersistentVolumeClaim:
    """A claim; ``bound``: the PV controller has bound it to ``volume``."""
    notes = dict(annotations or {})
    if bound:
        notes["pv.kubernetes.io/bind-completed"] = "yes"
    spec: Json = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    if selector is not None:
        spec["selector"] = selector
    metadata: Json = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": version,
        "annotations": notes,
    }
    if owner:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": owner, "controller": True}
        ]
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Bound" if bound else "Pending"},
    }
    return msgspec.json.decode(msgspec.json.encode(body), type=PersistentVolumeClaim)


def local_volume(
    name: str,
    node: str | None,
    *,
    storage_class: str = "local",
    size: str = "10Gi",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    claim_ref: Json | None = None,
    phase: str = "Available",
    labels: dict[str, str] | None = None,
    version: str = "1",
    csi: str = "",
) -> PersistentVolume:
    """A local volume on ``node`` (None: no node affinity, reachable everywhere).

    ``csi``: a CSI driver's volume instead (its handle is the volume's name).
    """
    spec: Json = {
        "capacity": {"storage": size},
        "accessModes": list(modes),
        "storageClassName": storage_class,
    }
    if csi:
        spec["csi"] = {"driver": csi, "volumeHandle": name}
    else:
        spec["local"] = {"path": f"/mnt/{name}"}
    if node is not None:
        expression = {"key": HOSTNAME, "operator": "In", "values": [node]}
        terms = [{"matchExpressions": [expression]}]
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
    if claim_ref is not None:
        spec["claimRef"] = claim_ref
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "resourceVersion": version, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase},
    }
    return msgspec.json.decode(msgspec.json.encode(body), type=PersistentVolume)


def storage_class(
    name: str,
    *,
    provisioner: str = "kubernetes.io/no-provisioner",
    mode: str = "WaitForFirstConsumer",
    zones: list[str] | None = None,
) -> StorageClass:
    """A StorageClass; ``zones``: its allowedTopologies on the zone label."""
    body: Json = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }
    if zones is not None:
        expression = {"key": "topology.kubernetes.io/zone", "values": zones}
        body["allowedTopologies"] = [{"matchLabelExpressions": [expression]}]
    return msgspec.json.decode(msgspec.json.encode(body), type=StorageClass)


def csi_node(node: str, limits: dict[str, int]) -> CSINode:
    """A node's CSINode: each driver with its attach limit."""
    drivers = [{"name": d, "nodeID": node, "allocatable": {"count": n}} for d, n in limits.items()]
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": node},
        "spec": {"drivers": drivers},
    }
    return msgspec.json.decode(msgspec.json.encode(body), type=CSINode)
