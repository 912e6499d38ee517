"""What the end-to-end tests run on the real node as tenants: namespaces, users, pods, logs.

Tenants are users with their own client certificates and the built-in ``edit`` role in their
namespace, never administrators; what a container saw is read from its log, as a tenant would
with ``kubectl logs``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from gpupool.agent.fakenvml import preset_devices
from gpupool.devcluster.nodens import session_path
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.allocation import decode
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_ALLOCATION,
    RESOURCE_GPU,
    RESOURCE_GPU_CORES,
)
from gpupool.policy.spec import DEFAULT_MAX_PODS_PER_GPU

from .chart import FAKE_GPUS
from .conftest import Cluster, create_namespace, wait_for

DONE = "echo done=1; exec sleep 3600"
GPUS = len(preset_devices(FAKE_GPUS, "any"))
"""The node's fake GPUs (the chart's ``agent.fakeGpus``)."""
CAPACITY = GPUS * DEFAULT_MAX_PODS_PER_GPU
"""One-share pods the node's fake GPUs hold: the default pool's pods per GPU on each."""
CONTROL_NODES = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
INSPECT = """
for d in /dev/nvidia*; do [ -e "$d" ] && echo "dev:$d=$(stat -c '%F %t:%T' "$d")"; done
env | grep -E '^(CUDA_|NVIDIA_|GPUPOOL_|LD_)' | sed 's/^/env:/'
[ -f /etc/ld.so.preload ] && echo "preload=$(cat /etc/ld.so.preload)"
[ -f /etc/gpupool/limits ] && sed 's/^/limit:/' /etc/gpupool/limits
awk '$5 == "/etc/ld.so.preload" || $5 == "/etc/gpupool/limits" {print "mount:" $5 "=" $6}' \
    /proc/self/mountinfo
"""
"""What a container sees of its GPUs and caps, as ``key=value`` lines: its device nodes
(``dev:``), its environment (``env:``), HAMi's preload and limits files and their mounts."""


async def tenant_namespace(cluster: Cluster, admin: KubeAPI, user: str) -> tuple[str, KubeAPI]:
    """A namespace where ``user`` has the built-in ``edit`` role; the user's own client."""
    namespace = f"team-{user}"
    await create_namespace(admin, namespace)
    await admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{user}-edit"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    return namespace, KubeAPI.from_kubeconfig(cluster.plane.user_kubeconfig(user))


async def remove_namespace(admin: KubeAPI, namespace: str) -> None:
    """Delete the namespace and wait until its pods are gone (their GPUs free again)."""
    await admin.delete(f"/api/v1/namespaces/{namespace}")

    async def gone() -> bool:
        try:
            await admin.get(f"/api/v1/namespaces/{namespace}")
        except ApiError as error:
            return error.status == 404
        return False

    await wait_for(gone, 600, f"namespace {namespace} and its pods gone")


def workload_pod(name: str, image: str, script: str, limits: dict[str, str], mark: str = "") -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script],
                    "env": [{"name": "MARK", "value": mark or name}],
                    "resources": {"limits": limits},
                }
            ],
        },
    }


SHARE = {RESOURCE_GPU: "1", RESOURCE_GPU_CORES: "10"}
WHOLE = {RESOURCE_GPU: "1"}


async def list_pods(api: KubeAPI, namespace: str) -> list[dict[str, Any]]:
    return list((await api.get(f"/api/v1/namespaces/{namespace}/pods"))["items"])


async def pod_log(api: KubeAPI, namespace: str, name: str) -> dict[str, str]:
    """The pod's ``key=value`` lines, once it printed ``done=1``."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    seen: dict[str, str] = {}

    async def printed() -> bool:
        nonlocal seen
        try:
            text = (await api.request("GET", f"{path}/log")).decode()
        except ApiError:  # not started yet
            return False
        seen = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        return seen.get("done") == "1"

    await wait_for(printed, 600, f"{namespace}/{name} to report")
    return seen


def failed_admission(pods: list[dict[str, Any]]) -> list[str]:
    return [
        f"{pod['metadata']['name']}: {pod['status'].get('reason')} {pod['status'].get('message')}"
        for pod in pods
        if pod.get("status", {}).get("phase") == "Failed"
    ]


async def published(api: KubeAPI, node: str, count: int) -> None:
    async def ready() -> bool:
        allocatable = (await api.get(f"/api/v1/nodes/{node}"))["status"].get("allocatable", {})
        return allocatable.get(RESOURCE_GPU) == str(count)

    await wait_for(ready, 300, f"{count} {RESOURCE_GPU} devices on {node}")


def devices_in(seen: dict[str, str]) -> dict[str, str]:
    """The device nodes an INSPECT report lists, with what ``stat`` said of each."""
    return {
        key.removeprefix("dev:"): value for key, value in seen.items() if key.startswith("dev:")
    }


def env_in(seen: dict[str, str]) -> dict[str, str]:
    """The environment an INSPECT report lists."""
    return {
        key.removeprefix("env:"): value for key, value in seen.items() if key.startswith("env:")
    }


def host_device(cluster: Cluster, name: str) -> str:
    """What ``stat -c '%F %t:%T'`` prints for the fake tree's ``name`` on the node."""
    tree = session_path(cluster.node.session, "/var/lib/gpupool") / "agent" / "fake-dev"
    rdev = os.stat(tree / name).st_rdev
    return f"character special file {os.major(rdev):x}:{os.minor(rdev):x}"


async def expected_gpus(api: KubeAPI, namespace: str, name: str) -> set[str]:
    """The device nodes of the GPUs the scheduler's allocation record gave the pod."""
    pod = await api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    record = decode(pod["metadata"]["annotations"][ANNOTATION_ALLOCATION])
    return {f"/dev/nvidia{gpu.index}" for gpu in record.gpus}


async def pending_reason(api: KubeAPI, namespace: str, name: str) -> dict[str, str]:
    """The PodScheduled=False condition of a pending pod, once the scheduler said why."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"

    async def told_why() -> bool:
        conditions = (await api.get(path)).get("status", {}).get("conditions", [])
        return any(
            c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message")
            for c in conditions
        )

    await wait_for(told_why, 300, f"{namespace}/{name}'s PodScheduled=False reason")
    conditions = (await api.get(path))["status"]["conditions"]
    (condition,) = [c for c in conditions if c["type"] == "PodScheduled"]
    return dict(condition)


@contextlib.asynccontextmanager
async def tenants(
    cluster: Cluster, admin: KubeAPI, *users: str
) -> AsyncIterator[list[tuple[str, KubeAPI]]]:
    """Each user's namespace and client (:func:`tenant_namespace`); closed and removed after."""
    made: list[tuple[str, KubeAPI]] = []
    try:
        for user in users:
            made.append(await tenant_namespace(cluster, admin, user))
        yield made
    finally:
        for namespace, client in made:
            await client.close()
            await remove_namespace(admin, namespace)
