"""DRA objects the live tests need: a kwok node with gpupool's ResourceSlice, and claim pods.

The slice is the one the agent publishes (:func:`gpupool.agent.dra.slice.slice_object`), for
four A100s and a fifth GPU in MIG mode with seven 1g.10gb instances; the test writes it, as the
agent would, because kwok runs no agent.
"""

from __future__ import annotations

from typing import Any

from gpupool.agent.dra.slice import slice_devices, slice_object
from gpupool.agent.nvml import GpuDevice, MigDevice
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.install.crds import apply_object, install_crds
from gpupool.kube.install.device_classes import device_class_manifests
from gpupool.kube.install.rbac import grant_scheduler_role
from gpupool.kube.objects.dra.records import CLASSES_PATH, SLICES_PATH

from .live_helpers import SchedulerProcesses

RESOURCE = "/apis/resource.k8s.io/v1"
Json = dict[str, Any]


async def node_with_slice(api: KubeAPI, name: str, label: str | None = None) -> list[Json]:
    """A kwok node labelled ``test=<label>`` (default: its name) and its slice, as created."""
    await create_nodes(
        api,
        [
            FakeGpuNode(
                name,
                gpus=4,
                gpu_model="A100",
                gpu_memory_mib=81920,
                mig=(("1g.10gb", 7),),
                labels=(("test", label or name),),
            )
        ],
    )
    node = await api.get(f"/api/v1/nodes/{name}")
    gpus = [GpuDevice(i, f"GPU-{name}-{i}", "A100", 81920, i) for i in range(4)]
    migs = tuple(MigDevice(f"MIG-{name}-{s}", "1g.10gb", 9856) for s in range(7))
    gpus.append(GpuDevice(4, f"GPU-{name}-4", "A100", 81920, 4, True, migs, mig_capable=True))
    body = slice_object(name, node["metadata"]["uid"], slice_devices(tuple(gpus)), 1)
    created = await api.create(SLICES_PATH, body)
    return [created]


async def create_claim_pod(
    api: KubeAPI,
    namespace: str,
    name: str,
    request: Json,
    *,
    node_label: str | None = None,
    scheduler: str = "gpupool",
    joins: str | None = None,
    priority_class: str = "",
    image: str = "busybox",
    grace_seconds: int | None = None,
) -> Json:
    """A claim of one request, and a pod using it on the nodes labelled ``test=<node_label>``
    (default: the namespace's first node, ``<namespace>-n0``); returns the pod as created.

    ``joins``: no new claim; the pod uses this existing claim (``request`` is ignored).
    ``priority_class``: the pod's PriorityClass (none: the cluster's default priority).
    ``image``, ``grace_seconds``: for a real kubelet (its runtime knows one image; a pod
    deleted with no grace is gone at once).
    """
    claim_spec = {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}
    container = {
        "name": "main",
        "image": image,
        "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]},
    }
    pod_spec = {
        "schedulerName": scheduler,
        "nodeSelector": {"test": node_label or f"{namespace}-n0"},
        "resourceClaims": [{"name": "gpu", "resourceClaimName": joins or name}],
        "containers": [container],
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    if grace_seconds is not None:
        pod_spec["terminationGracePeriodSeconds"] = grace_seconds
    if joins is None:
        await api.create(
            f"{RESOURCE}/namespaces/{namespace}/resourceclaims",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": claim_spec,
            },
        )
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec}
    created: Json = await api.create(f"/api/v1/namespaces/{namespace}/pods", body)
    return created


async def start_claims_scheduler(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, schedulers: SchedulerProcesses
) -> None:
    """``gpupool control-plane --claims`` as a user bound to exactly the shipped role, with
    the CRDs, the claim admission policy and gpupool's DeviceClasses installed."""
    user = f"gpupool-scheduler-{namespace}"
    await install_crds(api, scheduler_identities=(user,))
    await grant_scheduler_role(api, user)
    for manifest in device_class_manifests():
        await apply_object(api, CLASSES_PATH, manifest)
    schedulers.kubeconfig = control_plane.user_kubeconfig(user)
    schedulers.extra_args = ("--claims",)
    schedulers.start("claims")


async def claims_by_name(api: KubeAPI, namespace: str) -> dict[str, Json]:
    """The namespace's ResourceClaims by name."""
    items = await api.list_items(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")
    return {c["metadata"]["name"]: c for c in items}
