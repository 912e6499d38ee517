"""What scheduling reads of a Node: a change in anything else (heartbeats) rebuilds nothing."""

from __future__ import annotations

from gpupool.kube.objects.contention_signal import published_scores
from gpupool.kube.objects.records import NodeRecord
from gpupool.kube.objects.vocabulary import SCHEDULED_NODE_ANNOTATIONS


def node_signature(node: NodeRecord) -> tuple[object, ...]:
    """What scheduling reads of a node; a change in anything else (heartbeats) is ignored."""
    return (
        tuple(sorted(node.status.allocatable.items())),
        tuple(sorted(node.metadata.labels.items())),
        *(node.metadata.annotations.get(key, "") for key in SCHEDULED_NODE_ANNOTATIONS),
        published_scores(node.metadata.annotations, node.key),  # not its sampledAt
        tuple((t.key, t.value, t.effect) for t in node.spec.taints),
        node.spec.unschedulable,
        node.ready,
    )
