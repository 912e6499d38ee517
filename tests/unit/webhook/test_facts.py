from __future__ import annotations

import msgspec

from gpupool.kube.objects.records import NodeRecord, PolicyObjectRecord
from gpupool.webhook.facts import facts_from, node_summary


def node(name: str, labels: dict[str, str], allocatable: dict[str, str]) -> NodeRecord:
    obj = {
        "metadata": {"name": name, "uid": name, "labels": labels},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", **allocatable}},
    }
    return msgspec.convert(obj, NodeRecord)


def gpu_node(name: str, model: str, memory: int, gpus: int, **mig: str) -> NodeRecord:
    labels = {"gpupool.io/gpu-model": model, "gpupool.io/gpu-memory-mib": str(memory)}
    allocatable = {"gpupool.io/gpu": str(gpus)} | {f"gpupool.io/mig-{k}": v for k, v in mig.items()}
    return node(name, labels, allocatable)


def test_facts_summarise_the_nodes_and_queues() -> None:
    nodes = [
        gpu_node("a", "A100", 40960, 4),
        gpu_node("h", "H200", 143771, 8),
        node("mig", {}, {"gpupool.io/mig-1g.10gb": "7", "gpupool.io/mig-7g.80gb": "0"}),
        node("cpu", {}, {}),
        node("broken", {"gpupool.io/gpu-memory-mib": "lots"}, {"gpupool.io/gpu": "8"}),
    ]
    queue = msgspec.convert(
        {"metadata": {"name": "q"}, "spec": {"namespaces": ["a", "b"], "maxConcurrentPods": 3}},
        PolicyObjectRecord,
    )
    facts = facts_from((node_summary(n) for n in nodes), [], [queue])
    assert facts.models == {"A100", "H200"}
    assert (facts.largest_gpu_memory_mib, facts.most_gpus_per_node) == (143771, 8)
    assert facts.mig_profiles == {"1g.10gb"}  # a profile with no slice left is not offered
    assert facts.queues_serving("b") == ["q"]
    assert facts.queues["q"].max_concurrent_pods == 3
    assert node_summary(nodes[-1]) is None
