"""GPUPool/GPUQueue records to policy specs: what is used, what is left out and why."""

from __future__ import annotations

from typing import Any

import msgspec

from gpupool.core.model import NodeSpec, PodSpec
from gpupool.kube.objects.records import PodRecord, PolicyObjectRecord
from gpupool.kube.policy.book import workload_of
from gpupool.kube.policy.source import compile_config
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.spec import PoolMode

from ..builders import pod


def _record(name: str, spec: dict[str, Any]) -> PolicyObjectRecord:
    body = {"metadata": {"name": name, "uid": f"uid-{name}", "generation": 3}, "spec": spec}
    return msgspec.json.decode(msgspec.json.encode(body), type=PolicyObjectRecord)


def test_valid_pools_and_queues_become_specs_in_name_order() -> None:
    pools = [
        _record("b-shared", {"mode": "Shared", "nodeSelector": {"pool": "s"}}),
        _record("a-excl", {"mode": "Exclusive", "nodeSelector": {"pool": "x"}}),
    ]
    queues = [
        _record(
            "research",
            {
                "namespaces": ["ml"],
                "priority": 5,
                "quotas": [{"pool": "a-excl", "guaranteed": 2, "ceiling": 12}],
                "maxConcurrentPods": 7,
                "minRuntimeBeforePreemption": "10m",
            },
        )
    ]
    config, problems = compile_config(pools, queues)
    assert problems == {}
    assert [p.name for p in config.pools] == ["a-excl", "b-shared"]
    assert config.pools[1].mode is PoolMode.SHARED
    assert config.pools[1].max_pods_per_gpu == 4  # the CRD's default for an absent block
    (queue,) = config.queues
    assert queue.quota("a-excl") is not None
    assert (queue.quota("a-excl").guaranteed, queue.quota("a-excl").ceiling) == (2000, 12000)  # type: ignore[union-attr]
    assert (queue.max_concurrent_pods, queue.min_runtime_before_preemption) == (7, 600.0)
    assert queue.namespaces == frozenset({"ml"})


def test_an_unusable_object_is_left_out_with_the_field_named_and_the_rest_kept() -> None:
    pools = [
        _record("default", {"mode": "Exclusive"}),
        _record("odd", {"mode": "Exclusive", "shared": {"maxPodsPerGPU": 2}}),
        _record("good", {"mode": "Exclusive"}),
    ]
    queues = [
        _record("ghost", {"namespaces": ["a"], "quotas": [{"pool": "odd", "ceiling": 1}]}),
        _record("fine", {"namespaces": ["b"], "quotas": [{"pool": "good", "ceiling": 1}]}),
        _record("none", {"namespaces": []}),
    ]
    config, problems = compile_config(pools, queues)
    assert [p.name for p in config.pools] == ["good"]
    assert [q.name for q in config.queues] == ["fine"]
    assert "metadata.name" in problems[("GPUPool", "default")]
    assert "spec.shared" in problems[("GPUPool", "odd")]
    assert "unknown pool 'odd'" in problems[("GPUQueue", "ghost")]
    assert "spec.namespaces" in problems[("GPUQueue", "none")]


def test_two_queues_may_serve_a_namespace_and_the_label_chooses_only_among_them() -> None:
    queues = [
        _record("gold", {"namespaces": ["team"], "priority": 10}),
        _record("bronze", {"namespaces": ["team"]}),
    ]
    config, problems = compile_config([], queues)
    assert problems == {}
    tables = ClusterPolicy.build(config, [NodeSpec("n", 1000, 1000)]).tables

    def charged(record: PodRecord) -> str:
        workload = workload_of(record, PodSpec(record.metadata.uid, 0, 0), config.queues)
        return tables.queues[tables.queue_of(workload.namespace, workload.queue)].name

    assert charged(pod("p", namespace="team", labels={"gpupool.io/queue": "gold"})) == "gold"
    assert charged(pod("p", namespace="team")) == "bronze"  # no label: the first by name
    # a label naming a queue that does not serve the namespace is not believed
    assert charged(pod("q", namespace="other", labels={"gpupool.io/queue": "gold"})) == "default"
