from __future__ import annotations

import httpx2
import msgspec

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import ADDED, DELETED, MODIFIED
from gpupool.kube.objects.records import NodeRecord, PolicyObjectRecord
from gpupool.webhook.cache import FactsCache


def node(version: str, model: str = "H100", gpus: int = 8) -> NodeRecord:
    obj = {
        "metadata": {
            "name": "n1",
            "uid": "u1",
            "resourceVersion": version,
            "labels": {"gpupool.io/gpu-model": model, "gpupool.io/gpu-memory-mib": "81559"},
        },
        "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "gpupool.io/gpu": str(gpus)}},
    }
    return msgspec.convert(obj, NodeRecord)


async def test_facts_are_unknown_until_synced_and_rebuilt_only_on_real_changes() -> None:
    cache = FactsCache(KubeAPI(httpx2.AsyncClient(base_url="https://127.0.0.1:9")))
    cache.nodes.handler(ADDED, node("1"))
    assert cache.facts() is None  # nothing listed yet: only the fact-free checks may run
    cache.nodes.synced.set()
    cache.queues.synced.set()
    assert cache.facts() is None  # the pools are not listed yet: a queue is judged against them
    cache.pools.synced.set()
    first = cache.facts()
    assert first is not None
    assert (first.models, first.most_gpus_per_node) == ({"H100"}, 8)
    cache.nodes.handler(MODIFIED, node("2"))  # a heartbeat: same GPUs
    assert cache.facts() is first
    cache.nodes.handler(MODIFIED, node("3", model="H200", gpus=4))
    changed = cache.facts()
    assert changed is not None
    assert (changed.models, changed.most_gpus_per_node) == ({"H200"}, 4)
    queue = msgspec.convert(
        {"metadata": {"name": "q"}, "spec": {"namespaces": ["a"], "quotas": [{"pool": "p"}]}},
        PolicyObjectRecord,
    )
    cache.queues.store["q"] = queue
    cache.queues.handler(ADDED, queue)
    assert cache.facts().queues == {}  # type: ignore[union-attr]  # its pool does not exist
    pool = msgspec.convert(
        {"metadata": {"name": "p"}, "spec": {"mode": "Shared"}}, PolicyObjectRecord
    )
    cache.pools.store["p"] = pool
    cache.pools.handler(ADDED, pool)
    cache.nodes.handler(DELETED, node("4"))
    last = cache.facts()
    assert last is not None
    assert (last.models, last.queues_serving("a")) == (frozenset(), ["q"])
    await cache.nodes.api.close()
