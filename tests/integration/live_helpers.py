"""Helpers for live-scheduler tests: pod manifests, scheduler processes, waiting, invariants."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.kube.allocation_check import check_allocations, inventory
from gpupool.kube.api import ApiError, KubeAPI

Json = dict[str, Any]


def gpu_pod(
    name: str,
    *,
    gpus: int = 1,
    memory_mib: int = 0,
    cores: int = 0,
    models: str = "",
    selector: dict[str, str] | None = None,
    finish: bool = False,
    scheduler: str = "gpupool",
) -> Json:
    limits: dict[str, str] = {"gpupool.io/gpu": str(gpus)} if gpus else {}
    if memory_mib:
        limits["gpupool.io/gpu-memory"] = str(memory_mib)
    if cores:
        limits["gpupool.io/gpu-cores"] = str(cores)
    annotations = {"gpupool.io/gpu-model": models} if models else {}
    if finish:
        annotations["gpupool.io/finish"] = "succeeded"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": selector or {},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:latest",
                    "resources": {"limits": limits, "requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }


async def create_pods(api: KubeAPI, namespace: str, pods: Iterable[Json]) -> None:
    await api.create_all(f"/api/v1/namespaces/{namespace}/pods", pods, concurrency=32)


async def list_pods(api: KubeAPI, namespace: str) -> list[Json]:
    return await api.list_items(f"/api/v1/namespaces/{namespace}/pods")


async def wait_for(
    check: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.3
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)


async def make_nodes(api: KubeAPI, label: str, count: int, **shape: Any) -> list[FakeGpuNode]:
    nodes = [
        FakeGpuNode(f"{label}-n{i:03d}", labels=(("test", label),), **shape) for i in range(count)
    ]
    await create_nodes(api, nodes)
    return nodes


def pod_allocation(pod: Json) -> Json | None:
    text = pod["metadata"].get("annotations", {}).get("gpupool.io/allocation")
    return json.loads(text) if text else None


def pending_reason(pod: Json) -> str:
    for condition in pod["status"].get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return str(condition.get("message", ""))
    return ""


async def assert_no_gpu_given_twice(api: KubeAPI, pods: Iterable[Json]) -> int:
    """The shared checker's rules hold for these pods on the cluster's nodes; GPUs in use.

    See :mod:`gpupool.kube.allocation_check`: no GPU over 1000 milli or its memory, whole GPUs
    exclusive, every bound pod with a record naming its node.
    """
    check = check_allocations(pods, inventory(await api.list_items("/api/v1/nodes")))
    assert check.ok, check.message()
    return check.gpus_used


@dataclass
class SchedulerProcesses:
    """``gpupool control-plane`` replicas started by a test; all killed at teardown."""

    kubeconfig: Path | None  # None: in-cluster, from the variables in ``env``
    lease_name: str
    log_dir: Path
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, identity: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{identity}.log").open("ab") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpupool",
                    "control-plane",
                    *(["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []),
                    "--identity",
                    identity,
                    "--lease-name",
                    self.lease_name,
                    "--lease-duration",
                    "4",
                    "--renew-deadline",
                    "3",
                    "--retry-period",
                    "0.5",
                    "--http-address",
                    "127.0.0.1:0",  # any free port: replicas and test runs share the machine
                    *self.extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env, **(env or {})},
            )
        self.running[identity] = process
        return process

    def kill(self, identity: str) -> None:
        process = self.running.pop(identity)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.running.values():
            process.terminate()
        for process in self.running.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        self.running.clear()

    def log(self, identity: str) -> str:
        return (self.log_dir / f"{identity}.log").read_text(errors="replace")

    async def http_url(self, identity: str, timeout: float = 30) -> str:
        """Where the replica serves /healthz, /readyz and /metrics (it logs the address)."""
        marker = "/metrics on "

        async def logged() -> bool:
            return marker in self.log(identity)

        await wait_for(logged, timeout, f"{identity} to log its HTTP address")
        return self.log(identity).split(marker, 1)[1].split()[0]


async def grant_cluster_role(api: KubeAPI, manifest: Path, user: str) -> None:
    """Create the ClusterRole of ``manifest`` (named ``user``) and bind it to the user ``user``."""
    role = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "ClusterRole")
    await api.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    await api.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{user}-test"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": user,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def thirdparty_crds() -> list[dict[str, Any]]:
    """cert-manager's and the Prometheus operator's CRDs (scripts/thirdparty-crds.sh)."""
    configured = os.environ.get("GPUPOOL_THIRDPARTY_CRDS", "")
    found = sorted((Path.home() / ".cache" / "gpupool" / "thirdparty-crds").glob("*/.complete"))
    folder = Path(configured) if configured else (found[-1].parent if found else None)
    if folder is None or not (folder / ".complete").is_file():
        pytest.fail("third-party CRDs not found: run scripts/thirdparty-crds.sh (make test does)")
    return [yaml.safe_load(path.read_text()) for path in sorted(folder.glob("*.yaml"))]


async def establish_crds(api: KubeAPI, crds: list[dict[str, Any]]) -> None:
    """Create ``crds`` (if missing) and wait until they are served."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in crds:
        try:
            await api.create(path, crd)
        except ApiError as error:
            if error.status != 409:
                raise

    async def established() -> bool:
        for crd in crds:
            status = (await api.get(f"{path}/{crd['metadata']['name']}")).get("status", {})
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if conditions.get("Established") != "True":
                return False
        return True

    await wait_for(established, 30, "the third-party CRDs to be established")


async def two_bound_one_pending(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses, identity: str = "one"
) -> str:
    """Three one-GPU pods on a two-GPU node under a fresh replica; returns its HTTP URL."""
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=2)
    await create_pods(api, namespace, [gpu_pod(name, selector=sel) for name in "abc"])
    schedulers.start(identity)
    url = await schedulers.http_url(identity)

    async def settled() -> bool:
        pods = await list_pods(api, namespace)
        bound = [p for p in pods if p["spec"].get("nodeName")]
        return len(bound) == 2 and sum(1 for p in pods if pending_reason(p)) == 1

    await wait_for(settled, 60, "two pods bound and one pending with a reason")
    return url


async def collection_path(api: KubeAPI, manifest: dict[str, Any]) -> str:
    """The collection path of the manifest's kind, from the API server's discovery."""
    version = manifest["apiVersion"]
    prefix = "/api/v1" if version == "v1" else f"/apis/{version}"
    discovery = await api.get(prefix)
    (resource,) = [
        r for r in discovery["resources"] if r["kind"] == manifest["kind"] and "/" not in r["name"]
    ]
    if resource["namespaced"]:
        return f"{prefix}/namespaces/{manifest['metadata']['namespace']}/{resource['name']}"
    return f"{prefix}/{resource['name']}"


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
"""What ``kubectl get`` asks for: the server computes the printer columns."""


async def printer_columns(api: KubeAPI, path: str) -> dict[str, dict[str, Any]]:
    """``kubectl get``'s table for a collection: per object name, column name to cell."""
    response = await api.http.get(path, headers={"Accept": TABLE})
    response.raise_for_status()
    table = response.json()
    names = [column["name"] for column in table["columnDefinitions"]]
    return {
        row["object"]["metadata"]["name"]: dict(zip(names, row["cells"], strict=True))
        for row in table["rows"]
    }


async def events_about(api: KubeAPI, namespace: str, name: str) -> list[Json]:
    """``events.k8s.io`` Events whose ``regarding`` is the pod ``namespace/name``."""
    events = await api.list_items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [e for e in events if e.get("regarding", {}).get("name") == name]


async def create_priority_class(api: KubeAPI, name: str, value: int) -> None:
    await api.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        },
    )


async def create_mig_node(api: KubeAPI, name: str, labels: dict[str, str], slices: Json) -> None:
    """A fake node whose allocatable offers MIG slices (``{"1g.10gb": 7}``) on one GPU."""
    manifest = FakeGpuNode(
        name, gpus=1, gpu_model="A100", gpu_memory_mib=81920, labels=tuple(labels.items())
    ).manifest()
    for profile, count in slices.items():
        for part in ("allocatable", "capacity"):
            manifest["status"][part][f"gpupool.io/mig-{profile}"] = str(count)
    await api.create("/api/v1/nodes", manifest)
