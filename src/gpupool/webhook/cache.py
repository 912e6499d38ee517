"""The cluster facts, kept current by informers on nodes, GPUPools and GPUQueues.

Node heartbeats change a node's resourceVersion every few seconds without changing its GPUs, so
each node is reduced to a small summary on every event and the facts are rebuilt only when a
summary (or a pool or queue) actually changed, and then lazily, at the next review. At 5,000 nodes a
rebuild per heartbeat would otherwise cost more than the admissions themselves.

Pools are read because a queue is judged against them as the scheduler judges it (a queue whose
quota names a pool that does not exist is left out by both). The GPUPool and GPUQueue CRDs must
be installed (``gpupool install-crds``): until every cache has listed, the facts are unknown and
``/readyz`` says so.
"""

from __future__ import annotations

import asyncio

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import DELETED, Informer
from gpupool.kube.objects.records import NodeRecord, PolicyObjectRecord
from gpupool.webhook.facts import ClusterFacts, NodeSummary, facts_from, node_summary

NODES_PATH = "/api/v1/nodes"
GPUPOOLS_PATH = "/apis/gpupool.io/v1alpha1/gpupools"
GPUQUEUES_PATH = "/apis/gpupool.io/v1alpha1/gpuqueues"


class FactsCache:
    """Informers on nodes, pools and queues, and the facts derived from them.

    Args:
        api: The API port (the webhook's service account needs list and watch on nodes,
            gpupools and gpuqueues).
    """

    def __init__(self, api: KubeAPI) -> None:
        self.nodes = Informer(api, NODES_PATH, NodeRecord, self._on_node)
        self.pools = Informer(api, GPUPOOLS_PATH, PolicyObjectRecord, self._on_policy)
        self.queues = Informer(api, GPUQUEUES_PATH, PolicyObjectRecord, self._on_policy)
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

    def _on_policy(self, kind: str, record: PolicyObjectRecord) -> None:
        self._stale = True

    @property
    def synced(self) -> bool:
        """Whether every cache has listed at least once."""
        return all(informer.synced.is_set() for informer in (self.nodes, self.pools, self.queues))

    def facts(self) -> ClusterFacts | None:
        """The current facts; None until every cache has synced."""
        if not self.synced:
            return None
        if self._stale or self._facts is None:
            self._facts = facts_from(
                self._summaries.values(), self.pools.store.values(), self.queues.store.values()
            )
            self._stale = False
        return self._facts

    async def run(self) -> None:
        """Keep every cache current until cancelled."""
        await asyncio.gather(self.nodes.run(), self.pools.run(), self.queues.run())
