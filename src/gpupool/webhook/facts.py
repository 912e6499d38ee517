"""What the webhook knows about the cluster: GPU models, sizes, MIG profiles and queues.

Some requests can only be judged against the cluster: 90,000 MiB of GPU memory fits an H200 but
no A100, and ``gpupool.io/mig-7g.80gb`` means nothing on a cluster without such slices. These
facts are summarised into one small immutable value, rebuilt when nodes or queues change, so the
admission function stays pure and a review never walks the whole node list.

A node whose labels or allocatable cannot be read is left out (the scheduler reports it), rather
than making every pod admission fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from gpupool.kube.records import KubeObject, NodeRecord
from gpupool.kube.translate import InvalidObjectError, node_spec


class QueueSpecRecord(msgspec.Struct, frozen=True, rename="camel"):
    """The GPUQueue spec fields admission reads."""

    namespaces: list[str] = []
    max_concurrent_pods: int | None = None


class QueueRecord(KubeObject, frozen=True):
    """One GPUQueue, as the webhook's cache holds it."""

    spec: QueueSpecRecord = QueueSpecRecord()


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """One queue as admission sees it.

    Attributes:
        name: The GPUQueue's name (the value of the ``gpupool.io/queue`` label).
        namespaces: The namespaces whose pods it serves.
        max_concurrent_pods: Its ``spec.maxConcurrentPods``; None when unlimited.
    """

    name: str
    namespaces: frozenset[str]
    max_concurrent_pods: int | None = None


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """The cluster facts the admission checks need.

    Attributes:
        models: GPU models of the nodes that have GPUs.
        largest_gpu_memory_mib: Memory of the largest GPU on any node (0: none known).
        most_gpus_per_node: The most GPUs on one node.
        mig_profiles: MIG profiles some node offers (``1g.10gb``).
        queues: GPUQueues by name.
    """

    models: frozenset[str] = frozenset()
    largest_gpu_memory_mib: int = 0
    most_gpus_per_node: int = 0
    mig_profiles: frozenset[str] = frozenset()
    queues: Mapping[str, QueueFacts] = field(default_factory=dict)

    @property
    def has_gpu_nodes(self) -> bool:
        """Whether any node offers GPUs or MIG slices (node-derived checks need one)."""
        return self.most_gpus_per_node > 0 or bool(self.mig_profiles)

    def queues_serving(self, namespace: str) -> list[str]:
        """Names of the queues whose ``spec.namespaces`` contain ``namespace``, sorted."""
        return sorted(q.name for q in self.queues.values() if namespace in q.namespaces)


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """What admission needs from one node."""

    model: str = ""
    gpu_count: int = 0
    gpu_memory_mib: int = 0
    mig_profiles: frozenset[str] = frozenset()


def node_summary(node: NodeRecord) -> NodeSummary | None:
    """The node's GPUs as admission sees them; None when they cannot be read."""
    try:
        spec = node_spec(node)
    except InvalidObjectError:
        return None
    return NodeSummary(
        model=spec.gpu_model,
        gpu_count=spec.gpu_count,
        gpu_memory_mib=spec.gpu_memory_mib,
        mig_profiles=frozenset(profile for profile, count in spec.mig_slices if count > 0),
    )


def facts_from(nodes: Iterable[NodeSummary | None], queues: Iterable[QueueRecord]) -> ClusterFacts:
    """Summarise nodes and queue records; unreadable nodes (None) are skipped."""
    models: set[str] = set()
    profiles: set[str] = set()
    largest = most = 0
    for node in nodes:
        if node is None:
            continue
        if node.gpu_count:
            models.add(node.model)
            largest = max(largest, node.gpu_memory_mib)
            most = max(most, node.gpu_count)
        profiles.update(node.mig_profiles)
    return ClusterFacts(
        models=frozenset(models),
        largest_gpu_memory_mib=largest,
        most_gpus_per_node=most,
        mig_profiles=frozenset(profiles),
        queues={
            queue.metadata.name: QueueFacts(
                queue.metadata.name,
                frozenset(queue.spec.namespaces),
                queue.spec.max_concurrent_pods,
            )
            for queue in queues
        },
    )
