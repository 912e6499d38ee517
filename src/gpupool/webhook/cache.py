"""The cluster facts, kept current by informers on nodes and GPUQueues.

Node heartbeats change a node's resourceVersion every few seconds without changing its GPUs, so
each node is reduced to a small summary on every event and the facts are rebuilt only when a
summary (or a queue) actually changed, and then lazily, at the next review. At 5,000 nodes a
rebuild per heartbeat would otherwise cost more than the admissions themselves.

The GPUQueue CRD must be installed (``gpupool install-crds``): until both caches have listed, the
facts are unknown and ``/readyz`` says so.
"""

from __future__ import annotations

import asyncio

from gpupool.kube.api import KubeAPI
from gpupool.kube.informer import DELETED, Informer
from gpupool.kube.records import NodeRecord
from gpupool.webhook.facts import ClusterFacts, NodeSummary, QueueRecord, facts_from, node_summary

NODES_PATH = "/api/v1/nodes"
GPUQUEUES_PATH = "/apis/gpupool.io/v1alpha1/gpuqueues"


class FactsCache:
    """Informers on nodes and queues, and the facts derived from them.

    Args:
        api: The API port (the webhook's service account needs list and watch on nodes and
            gpuqueues).
    """

    def __init__(self, api: KubeAPI) -> None:
        self.nodes = Informer(api, NODES_PATH, NodeRecord, self._on_node)
        self.queues = Informer(api, GPUQUEUES_PATH, QueueRecord, self._on_queue)
        self._summaries: dict[str, NodeSummary | None] = {}
        self._facts: ClusterFacts | None = None
        self._stale = True

    def _on_node(self, kind: str, node: NodeRecord) -> None:
        uid = node.metadata.uid
        if kind == DELETED:
            self._summaries.pop(uid, None)
            self._stale = True
            return
        summary = node_summary(node)
        if uid not in self._summaries or self._summaries[uid] != summary:
            self._summaries[uid] = summary
            self._stale = True

    def _on_queue(self, kind: str, queue: QueueRecord) -> None:
        self._stale = True

    @property
    def synced(self) -> bool:
        """Whether both caches have listed at least once."""
        return self.nodes.synced.is_set() and self.queues.synced.is_set()

    def facts(self) -> ClusterFacts | None:
        """The current facts; None until both caches have synced."""
        if not self.synced:
            return None
        if self._stale or self._facts is None:
            self._facts = facts_from(self._summaries.values(), self.queues.store.values())
            self._stale = False
        return self._facts

    async def run(self) -> None:
        """Keep both caches current until cancelled."""
        await asyncio.gather(self.nodes.run(), self.queues.run())
