"""A GPU pod's volumes decide its node, on the real API server with kube-controller-manager.

gpupool's scheduler places every GPU pod, so it must do what kube-scheduler's VolumeBinding does:
a pod whose claim is bound to a local volume goes to that volume's node; a WaitForFirstConsumer
claim gets a volume reserved on the chosen node (the PV controller then binds the pair) or the
``volume.kubernetes.io/selected-node`` annotation its provisioner acts on, and the pod is bound
only once its claim is. The scheduler runs as its own user with exactly its role, so the rights
these writes need are tested with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.install.rbac import grant_scheduler_role

from .live_helpers import (
    SchedulerProcesses,
    create_pods,
    gpu_pod,
    list_pods,
    make_nodes,
    pending_reason,
    wait_for,
)

pytestmark = pytest.mark.integration

Json = dict[str, Any]
CONTROLLERS = True  # kube-controller-manager's PV controller binds claims to volumes
USER = "gpupool-scheduler"
HOSTNAME = "kubernetes.io/hostname"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


def _class(name: str, mode: str, provisioner: str = "kubernetes.io/no-provisioner") -> Json:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }


def _volume(name: str, node: str, storage_class: str, claim_ref: Json | None = None) -> Json:
    expression = {"key": HOSTNAME, "operator": "In", "values": [node]}
    spec: Json = {
        "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "persistentVolumeReclaimPolicy": "Retain",
        "local": {"path": f"/mnt/{name}"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}},
    }
    if claim_ref is not None:
        spec["claimRef"] = claim_ref
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
    }


def _claim(name: str, storage_class: str, volume: str = "") -> Json:
    spec: Json = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": storage_class,
    }
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def _pod_with(name: str, claim: str, selector: dict[str, str]) -> Json:
    pod = gpu_pod(name, selector=selector)
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return pod


async def _setup(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> tuple[SchedulerProcesses, list[str]]:
    """Two one-GPU-free nodes (the first wins ties) and a scheduler as its own user."""
    nodes = [node.name for node in await make_nodes(api, namespace, 2, gpus=1)]
    await grant_scheduler_role(api, USER)
    processes = SchedulerProcesses(
        control_plane.user_kubeconfig(USER), f"lease-{namespace}", tmp_path
    )
    processes.start("volumes")
    return processes, nodes


async def _pod(api: KubeAPI, namespace: str, name: str) -> Json:
    return await api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


async def _claim_of(api: KubeAPI, namespace: str, name: str) -> Json:
    return await api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")


async def test_a_pod_goes_to_the_node_of_its_bound_local_volume_and_a_missing_claim_waits(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> None:
    cls = f"manual-{namespace}"
    await api.create("/apis/storage.k8s.io/v1/storageclasses", _class(cls, "Immediate"))
    processes, (_, second) = await _setup(api, control_plane, namespace, tmp_path)
    try:
        await api.create("/api/v1/persistentvolumes", _volume(f"{namespace}-pv", second, cls))
        claims = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
        await api.create(claims, _claim("data", cls, volume=f"{namespace}-pv"))

        async def claim_bound() -> bool:  # the PV controller binds the pre-bound pair
            return (await _claim_of(api, namespace, "data"))["status"].get("phase") == "Bound"

        await wait_for(claim_bound, 60, "the PV controller binding the claim")
        selector = {"test": namespace}
        await create_pods(
            api,
            namespace,
            [_pod_with("local", "data", selector), _pod_with("orphan", "nope", selector)],
        )

        async def settled() -> bool:
            pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
            return bool(pods["local"]["spec"].get("nodeName")) and bool(
                pending_reason(pods["orphan"])
            )

        await wait_for(settled, 60, "the volume pod bound and the orphan told why it waits")
        assert (await _pod(api, namespace, "local"))["spec"]["nodeName"] == second  # not the first
        orphan = pending_reason(await _pod(api, namespace, "orphan"))
        assert orphan == '0/2 nodes are available: persistentvolumeclaim "nope" not found.'
        assert "Forbidden" not in processes.log("volumes")  # "403" matches timestamps too
    finally:
        processes.stop_all()


async def test_a_wait_for_first_consumer_claim_gets_the_static_volume_on_its_node(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> None:
    cls = f"local-{namespace}"
    await api.create("/apis/storage.k8s.io/v1/storageclasses", _class(cls, "WaitForFirstConsumer"))
    processes, (_, second) = await _setup(api, control_plane, namespace, tmp_path)
    try:
        volume = f"{namespace}-local"
        await api.create("/api/v1/persistentvolumes", _volume(volume, second, cls))
        await api.create(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", _claim("data", cls)
        )
        await create_pods(api, namespace, [_pod_with("wffc", "data", {"test": namespace})])

        async def bound() -> bool:
            return bool((await _pod(api, namespace, "wffc"))["spec"].get("nodeName"))

        await wait_for(bound, 90, "the claim bound and then the pod")
        assert (await _pod(api, namespace, "wffc"))["spec"]["nodeName"] == second
        claim = await _claim_of(api, namespace, "data")
        assert claim["spec"]["volumeName"] == volume
        assert claim["status"]["phase"] == "Bound"
    finally:
        processes.stop_all()


async def test_a_dynamic_claim_is_given_the_chosen_node_and_the_pod_waits_until_provisioned(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> None:
    cls = f"dynamic-{namespace}"
    await api.create(
        "/apis/storage.k8s.io/v1/storageclasses",
        _class(cls, "WaitForFirstConsumer", provisioner="example.com/nobody"),
    )
    processes, nodes = await _setup(api, control_plane, namespace, tmp_path)
    try:
        await api.create(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", _claim("data", cls)
        )
        await create_pods(api, namespace, [_pod_with("dyn", "data", {"test": namespace})])

        async def selected() -> bool:
            claim = await _claim_of(api, namespace, "data")
            waiting = pending_reason(await _pod(api, namespace, "dyn"))
            return SELECTED_NODE in claim["metadata"].get("annotations", {}) and bool(waiting)

        await wait_for(selected, 60, "the selected-node annotation and a waiting reason")
        claim = await _claim_of(api, namespace, "data")
        node = claim["metadata"]["annotations"][SELECTED_NODE]
        assert node in nodes
        pod = await _pod(api, namespace, "dyn")
        assert not pod["spec"].get("nodeName")  # no volume yet: not bound
        assert 'persistentvolumeclaim(s) "data"' in pending_reason(pod)

        # the provisioner's part, played by the test: a volume on that node, made for the claim
        ref = {"kind": "PersistentVolumeClaim", "namespace": namespace, "name": "data"}
        ref["uid"] = claim["metadata"]["uid"]
        await api.create("/api/v1/persistentvolumes", _volume(f"{namespace}-made", node, cls, ref))

        async def bound() -> bool:
            return bool((await _pod(api, namespace, "dyn"))["spec"].get("nodeName"))

        await wait_for(bound, 90, "the provisioned claim bound and then the pod")
        assert (await _pod(api, namespace, "dyn"))["spec"]["nodeName"] == node
    finally:
        processes.stop_all()


async def test_an_ephemeral_volumes_claim_is_found_by_its_generated_name_and_bound_on_its_node(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> None:
    cls = f"scratch-{namespace}"
    await api.create("/apis/storage.k8s.io/v1/storageclasses", _class(cls, "WaitForFirstConsumer"))
    processes, (_, second) = await _setup(api, control_plane, namespace, tmp_path)
    try:
        await api.create("/api/v1/persistentvolumes", _volume(f"{namespace}-eph", second, cls))
        pod = gpu_pod("eph", selector={"test": namespace})
        template = {"spec": _claim("unused", cls)["spec"]}
        pod["spec"]["volumes"] = [
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}}
        ]
        await create_pods(api, namespace, [pod])  # kube-controller-manager makes "eph-scratch"

        async def bound() -> bool:
            return bool((await _pod(api, namespace, "eph"))["spec"].get("nodeName"))

        await wait_for(bound, 90, "the generated claim bound and then the pod")
        assert (await _pod(api, namespace, "eph"))["spec"]["nodeName"] == second
        claim = await _claim_of(api, namespace, "eph-scratch")
        assert claim["spec"]["volumeName"] == f"{namespace}-eph"
    finally:
        processes.stop_all()
