"""What the webhook knows about the cluster: GPU models, sizes, MIG profiles and queues.

Some requests can only be judged against the cluster: 90,000 MiB of GPU memory fits an H200 but
no A100, and ``gpupool.io/mig-7g.80gb`` means nothing on a cluster without such slices. These
facts are summarised into one small immutable value, rebuilt when nodes or queues change, so the
admission function stays pure and a review never walks the whole node list.

A node whose labels or allocatable cannot be read is left out (the scheduler reports it), rather
than making every pod admission fail. GPUPool and GPUQueue objects are parsed by
:func:`gpupool.policy.config.parse_objects`, the reader the scheduler uses, so a queue the
scheduler leaves out (a quota naming a pool that does not exist) is no queue here either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpupool.kube.objects.records import NodeRecord, PolicyObjectRecord
from gpupool.kube.objects.translate import InvalidObjectError, node_spec
from gpupool.policy.config import parse_objects
from gpupool.policy.membership import queues_serving
from gpupool.policy.spec import QueueSpec


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """The cluster facts the admission checks need.

    Attributes:
        models: GPU models of the nodes that have GPUs.
        largest_gpu_memory_mib: Memory of the largest GPU on any node (0: none known).
        most_gpus_per_node: The most GPUs on one node.
        mig_profiles: MIG profiles some node offers (``1g.10gb``).
        queues: The usable GPUQueues by name.
    """

    models: frozenset[str] = frozenset()
    largest_gpu_memory_mib: int = 0
    most_gpus_per_node: int = 0
    mig_profiles: frozenset[str] = frozenset()
    queues: Mapping[str, QueueSpec] = field(default_factory=dict)

    @property
    def has_gpu_nodes(self) -> bool:
        """Whether any node offers GPUs or MIG slices (node-derived checks need one)."""
        return self.most_gpus_per_node > 0 or bool(self.mig_profiles)

    def queues_serving(self, namespace: str) -> list[str]:
        """Names of the queues whose ``spec.namespaces`` contain ``namespace``, sorted."""
        return [queue.name for queue in queues_serving(self.queues.values(), namespace)]


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


def _object(record: PolicyObjectRecord) -> dict[str, object]:
    return {"metadata": {"name": record.metadata.name}, "spec": record.spec}


def facts_from(
    nodes: Iterable[NodeSummary | None],
    pools: Iterable[PolicyObjectRecord],
    queues: Iterable[PolicyObjectRecord],
) -> ClusterFacts:
    """Summarise nodes and the GPUPool/GPUQueue records; unreadable nodes (None) are skipped."""
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
    config, _ = parse_objects(map(_object, pools), map(_object, queues))
    return ClusterFacts(
        models=frozenset(models),
        largest_gpu_memory_mib=largest,
        most_gpus_per_node=most,
        mig_profiles=frozenset(profiles),
        queues={queue.name: queue for queue in config.queues},
    )
