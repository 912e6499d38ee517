"""An in-process API server for the live scheduler's claim path: claims, Bindings, and nothing else.

It keeps ResourceClaims as the API server would: a merge patch of the object or of its status
subresource, refused with 409 when the body's ``metadata.resourceVersion`` is not the stored one
(the precondition the scheduler relies on), each write bumping the version. Pod Bindings are
recorded; a bound pod is given back with its node and annotations, as the watch would.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import msgspec

from gpupool.agent.nvml import GpuDevice, MigDevice
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import ADDED, DELETED, MODIFIED
from gpupool.kube.objects.dra.records import ResourceClaim
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.scheduler.live import LiveConfig, LiveScheduler

from .builders import SIGNER, node_dict
from .dra_builders import CLASSES, decode, resource_slice

Json = dict[str, Any]
NODE_GPUS = 4
MIG_INSTANCES = 7


def node_gpus(name: str) -> tuple[GpuDevice, ...]:
    """Four A100s and a fifth in MIG mode with seven 1g.10gb instances."""
    gpus = [GpuDevice(i, f"GPU-{name}-{i}", "A100", 81920, i) for i in range(NODE_GPUS)]
    migs = tuple(MigDevice(f"MIG-{name}-{s}", "1g.10gb", 9856) for s in range(MIG_INSTANCES))
    gpus.append(
        GpuDevice(
            NODE_GPUS,
            f"GPU-{name}-{NODE_GPUS}",
            "A100",
            81920,
            NODE_GPUS,
            True,
            migs,
            mig_capable=True,
        )
    )
    return tuple(gpus)


def _merge(target: Json, patch: Json) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


class ClaimServer:
    """The objects the scheduler writes, and the answers it gets."""

    def __init__(self) -> None:
        self.claims: dict[str, Json] = {}
        self.bindings: dict[str, Json] = {}
        self.refuse_binding: set[str] = set()  # pods whose Binding an admission policy refuses
        self.evictions: list[str] = []  # namespace/name of each pod an Eviction was posted for
        self.version = 100

    def add_claim(self, name: str, *requests: Json, namespace: str = "team") -> ResourceClaim:
        """Store a claim (as created by a user) and return its record."""
        self.version += 1
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-claim-{name}",
                "resourceVersion": str(self.version),
                "annotations": {},
            },
            "spec": {"devices": {"requests": list(requests)}},
        }
        self.claims[name] = body
        return self.record(name)

    def record(self, name: str) -> ResourceClaim:
        """The stored claim as the informer decodes it."""
        result: ResourceClaim = decode(self.claims[name], ResourceClaim)
        return result

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if request.method == "POST" and path.endswith("/eviction"):
            namespace, name = path.split("/")[4], path.split("/")[6]
            self.evictions.append(f"{namespace}/{name}")
            return httpx2.Response(201, json={})
        if request.method == "POST" and path.endswith("/binding"):
            body = json.loads(request.content)
            if body["metadata"]["name"] in self.refuse_binding:
                return httpx2.Response(403, json={"message": "denied by a test policy"})
            self.bindings[body["metadata"]["name"]] = body
            return httpx2.Response(201, json={})
        if request.method == "PATCH" and "/resourceclaims/" in path:
            return self._patch_claim(path, json.loads(request.content))
        if request.method == "GET" and "/resourceclaims/" in path:
            stored = self.claims.get(path.rsplit("/", 1)[1])
            return httpx2.Response(200, json=stored) if stored else httpx2.Response(404, json={})
        if request.method == "GET":
            return httpx2.Response(200, json={"items": [], "metadata": {}})
        return httpx2.Response(200, json={})

    def _patch_claim(self, path: str, patch: Json) -> httpx2.Response:
        status = path.endswith("/status")
        name = path.removesuffix("/status").rsplit("/", 1)[1]
        stored = self.claims.get(name)
        if stored is None:
            return httpx2.Response(404, json={"message": f"{name} not found", "reason": "NotFound"})
        wanted = patch.get("metadata", {}).pop("resourceVersion", None)
        if wanted is not None and wanted != stored["metadata"]["resourceVersion"]:
            return httpx2.Response(
                409, json={"message": "the object has been modified", "reason": "Conflict"}
            )
        if status:
            stored.setdefault("status", {})
            _merge(stored["status"], patch.get("status", {}))
        else:
            _merge(stored["metadata"], patch.get("metadata", {}))
        self.version += 1
        stored["metadata"]["resourceVersion"] = str(self.version)
        return httpx2.Response(200, json=stored)


async def live_scheduler(server: ClaimServer, nodes: tuple[str, ...] = ("n0",)) -> LiveScheduler:
    """A leading scheduler over ``server``: ``nodes`` with their slices, gpupool's classes."""
    client = httpx2.AsyncClient(base_url="https://api", transport=httpx2.MockTransport(server))
    scheduler = LiveScheduler(
        KubeAPI(client), LiveConfig(identity="test", claims=True), signer=SIGNER
    )
    book = scheduler.state.claims
    for device_class in CLASSES.values():
        book.on_class(ADDED, device_class)
    for name in nodes:
        book.on_slice(ADDED, resource_slice(name, node_gpus(name)))
        body = node_dict(
            name,
            gpus=NODE_GPUS,
            model="A100",
            gpu_memory_mib=81920,
            mig={"gpupool.io/mig-1g.10gb": str(MIG_INSTANCES)},
        )
        scheduler.nodes.handler(ADDED, msgspec.convert(body, NodeRecord))
    for name in server.claims:
        scheduler.state.on_claim(ADDED, server.record(name))
    scheduler.state.restart()
    scheduler.leading = True
    return scheduler


async def run_cycles(scheduler: LiveScheduler, server: ClaimServer, pods: dict[str, Json]) -> None:
    """Cycles until nothing changes: binds land, claims and pods come back as the watch sends."""
    for _ in range(30):
        before = (len(server.bindings), server.version)
        await scheduler.cycle()
        for _ in range(5):
            await asyncio.sleep(0)
        await asyncio.gather(*scheduler.binder.tasks)
        if scheduler.dra is not None:
            await asyncio.gather(*scheduler.dra.releasing.values())
        for name in server.claims:
            scheduler.state.on_claim(MODIFIED, server.record(name))
        for name, binding in server.bindings.items():
            pod = pods[name]
            if not pod["spec"].get("nodeName"):
                pod["spec"]["nodeName"] = binding["target"]["name"]
                pod["metadata"].setdefault("annotations", {}).update(
                    binding["metadata"]["annotations"]
                )
                pod["metadata"]["resourceVersion"] = "2"
                scheduler.pods.handler(MODIFIED, msgspec.convert(pod, PodRecord))
        if (len(server.bindings), server.version) == before:
            return


def add_pods(scheduler: LiveScheduler, pods: dict[str, Json]) -> None:
    """Deliver pods to the scheduler's pod informer."""
    for pod in pods.values():
        scheduler.pods.handler(ADDED, msgspec.convert(pod, PodRecord))


def delete_pod(scheduler: LiveScheduler, pod: Json) -> None:
    """The watch's deletion of a pod."""
    scheduler.pods.handler(DELETED, msgspec.convert(pod, PodRecord))


def claim_pod_json(
    name: str, claim: str, *, limits: dict[str, str] | None = None, namespace: str = "team"
) -> Json:
    """A gpupool pod whose GPUs come from the ResourceClaim ``claim``."""
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {},
        },
        "spec": {
            "schedulerName": "gpupool",
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": limits or {},
                        "claims": [{"name": "gpu"}],
                    },
                }
            ],
        },
        "status": {"phase": "Pending"},
    }
