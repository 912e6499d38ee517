"""Fake GPU nodes for kwok: Node objects that look like what gpupool's agent will publish.

kwok manages nodes annotated ``kwok.x-k8s.io/node=fake``; our ``node-ready`` stage keeps the
capacity they were created with. Each node gets deterministic GPU UUIDs, so allocations in tests
and in the dev cluster are stable and readable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.kube.client.api import JsonObject, KubeAPI
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_GPU_UUIDS,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
)

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True, slots=True)
class FakeGpuNode:
    """The shape of one fake node.

    Attributes:
        name: Node name.
        gpus: GPU count (0 for a CPU node).
        gpu_model: GPU model label.
        gpu_memory_mib: Memory per GPU in MiB.
        cpu: Allocatable CPU cores.
        memory_gib: Allocatable memory in GiB.
        max_pods: Pod capacity.
        labels: Extra labels (pools, test selectors).
        mig: MIG slices as (profile, count), published as ``gpupool.io/mig-<profile>``.
    """

    name: str
    gpus: int = 8
    gpu_model: str = "H100"
    gpu_memory_mib: int = 81559
    cpu: int = 128
    memory_gib: int = 1024
    max_pods: int = 256
    labels: tuple[tuple[str, str], ...] = ()
    mig: tuple[tuple[str, int], ...] = ()

    def manifest(self) -> JsonObject:
        """The Node object to create (status included: nodes may set status on create)."""
        resources = {
            "cpu": str(self.cpu),
            "memory": f"{self.memory_gib}Gi",
            "pods": str(self.max_pods),
        }
        labels = {"kubernetes.io/hostname": self.name, **dict(self.labels)}
        annotations = {KWOK_ANNOTATION: "fake"}
        if self.gpus:
            resources[RESOURCE_GPU] = str(self.gpus)
            labels[LABEL_GPU_MODEL] = self.gpu_model
            labels[LABEL_GPU_MEMORY] = str(self.gpu_memory_mib)
            annotations[ANNOTATION_GPU_UUIDS] = ",".join(
                f"GPU-{self.name}-{index}" for index in range(self.gpus)
            )
        for profile, count in self.mig:
            resources[f"{RESOURCE_MIG_PREFIX}{profile}"] = str(count)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": annotations},
            "spec": {},
            "status": {"capacity": resources, "allocatable": dict(resources)},
        }


async def create_nodes(api: KubeAPI, nodes: Iterable[FakeGpuNode], concurrency: int = 32) -> None:
    """Create the nodes, ``concurrency`` requests at a time."""
    await api.create_all("/api/v1/nodes", (node.manifest() for node in nodes), concurrency)
