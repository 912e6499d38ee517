"""The embedded cluster: the policy engine applied step by step, as the demo runs it."""

from __future__ import annotations

import numpy as np

from gpupool.core.model import NodeSpec, PodSpec
from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec, QueueSpec, QuotaSpec
from gpupool.policy.workload import Workload
from gpupool.scheduling.wait_cause import WaitKind
from gpupool.sim.demo.embedded import EmbeddedCluster, Submission
from gpupool.sim.demo.session import DemoSession


def nodes(count: int = 2) -> list[NodeSpec]:
    return [
        NodeSpec(f"n{i}", 64_000, 512_000, gpu_count=4, gpu_model="H100", gpu_memory_mib=81_920)
        for i in range(count)
    ]


def whole(name: str, gpus: int, namespace: str = "a", priority: int = 0) -> Workload:
    pod = PodSpec(name, 1000, 1024, gpu_count=gpus, gpu_milli=1000)
    return Workload(pod=pod, namespace=namespace, priority=priority, workload_class="training")


def test_pods_start_and_finish_and_give_their_gpus_back() -> None:
    cluster = EmbeddedCluster(nodes(1), PolicyConfig())
    cluster.submit(Submission(whole("a/p1", 4), duration=100.0))
    cluster.submit(Submission(whole("a/p2", 2), duration=100.0))
    cluster.advance(10.0)
    assert set(cluster.running) == {"a/p1"}
    cause = cluster.causes["a/p2"]
    assert cause is not None
    assert cause.kind is WaitKind.RESOURCES
    assert "Insufficient gpupool.io/gpu" in cause.text()
    cluster.advance(100.0)  # p1 ends at 110; p2 starts in the same step
    assert set(cluster.running) == {"a/p2"}
    assert cluster.completed == 1
    assert int(cluster.snapshot.gpu_free.sum()) == 2000
    assert [e.action for e in cluster.events] == ["bind", "finish", "bind"]


def test_a_ceiling_holds_pods_with_a_reason_naming_queue_and_limit() -> None:
    config = PolicyConfig(
        queues=(QueueSpec("a", frozenset({"a"}), quotas=(QuotaSpec("default", 0, 2000),)),)
    )
    cluster = EmbeddedCluster(nodes(1), config)
    for i in range(3):
        cluster.submit(Submission(whole(f"a/p{i}", 1), duration=1000.0))
    cluster.advance(10.0)
    assert len(cluster.running) == 2
    (cause,) = cluster.causes.values()
    assert cause is not None
    assert cause.kind is WaitKind.QUOTA
    reason = cause.text()
    assert reason.startswith("queue a: ceiling 2 GPU units reached in pool default")


def test_a_higher_priority_pod_preempts_and_the_victim_waits_again() -> None:
    config = PolicyConfig(queues=(QueueSpec("a", frozenset({"a"})),))
    cluster = EmbeddedCluster(nodes(1), config)
    cluster.submit(Submission(whole("a/low", 4), duration=1000.0))
    cluster.advance(10.0)
    cluster.submit(Submission(whole("a/high", 4, priority=100), duration=1000.0))
    cluster.advance(10.0)
    assert set(cluster.running) == {"a/high"}
    assert "a/low" in cluster.pending
    assert cluster.preemptions == 1
    assert any(e.action == "preempt" and e.pod == "a/low" for e in cluster.events)


def test_shared_pool_keeps_shares_apart_from_exclusive_nodes() -> None:
    labelled = [
        NodeSpec("x", 64_000, 512_000, 4, "H100", 81_920, labels=(("g", "x"),)),
        NodeSpec("s", 64_000, 512_000, 4, "H100", 81_920, labels=(("g", "s"),)),
    ]
    config = PolicyConfig(
        pools=(
            PoolSpec("excl", PoolMode.EXCLUSIVE, (("g", "x"),)),
            PoolSpec("shared", PoolMode.SHARED, (("g", "s"),), max_pods_per_gpu=2),
        )
    )
    cluster = EmbeddedCluster(labelled, config)
    share = PodSpec("a/s", 100, 100, gpu_count=1, gpu_milli=100, gpu_memory_mib=1000)
    cluster.submit(Submission(Workload(share, namespace="a", workload_class="dev"), 100.0))
    cluster.submit(Submission(whole("a/w", 1), 100.0))
    cluster.advance(5.0)
    node = {name: cluster.snapshot.node_names[r.node] for name, r in cluster.running.items()}
    assert node == {"a/s": "s", "a/w": "x"}


def test_idle_pods_report_no_usage() -> None:
    cluster = EmbeddedCluster(nodes(1), PolicyConfig())
    cluster.submit(Submission(whole("a/busy", 1), 100.0))
    cluster.submit(Submission(whole("a/idle", 1), 100.0, idle=True))
    cluster.advance(1.0)
    assert cluster.usage["a/idle"] == 0.0
    assert cluster.usage["a/busy"] > 0.0


def test_demo_session_starts_busy_and_is_reproducible() -> None:
    first, second = DemoSession(seed=3, warm_hours=2.0), DemoSession(seed=3, warm_hours=2.0)
    summary = first.summary()
    assert summary.running > 20
    assert summary.allocated_units > 0.5 * summary.capacity_units
    assert {use.queue for use in summary.queues} >= {"vision", "nlp", "serving", "research"}
    with first.locked() as a, second.locked() as b:
        assert a.running.keys() == b.running.keys()
        assert np.array_equal(a.snapshot.gpu_free, b.snapshot.gpu_free)
        assert bool(np.all(a.snapshot.gpu_free >= 0))
    first.advance(600.0)
    assert first.summary().now == summary.now + 600.0


def test_idle_pods_in_a_governed_pool_are_warned_then_reclaimed_busy_ones_never() -> None:
    from gpupool.governance.rules import Limits

    limits = Limits(
        idle_threshold_percent=5.0,
        idle_period=600.0,
        grace=300.0,
        exempt_classes=frozenset({"inference"}),
    )
    # the exemption holds for a class the pod's queue lists in allowedClasses
    serving_queue = QueueSpec("a", frozenset({"a"}), allowed_classes=frozenset({"inference"}))
    config = PolicyConfig(queues=(serving_queue,))
    cluster = EmbeddedCluster(nodes(1), config, limits={"default": limits})
    cluster.submit(Submission(whole("a/busy", 1), 10_000.0))
    cluster.submit(Submission(whole("a/idle", 1), 10_000.0, idle=True))
    exempt = Workload(
        PodSpec("a/serve", 100, 100, 1, 1000), namespace="a", workload_class="inference"
    )
    cluster.submit(Submission(exempt, 10_000.0, idle=True))
    for _ in range(20):  # 20 minutes in 60 s steps
        cluster.advance(60.0)
    actions = [(e.action, e.pod) for e in cluster.events if e.action in ("warn", "reclaim")]
    assert actions == [("warn", "a/idle"), ("reclaim", "a/idle")]
    assert set(cluster.running) == {"a/busy", "a/serve"}
    assert cluster.reclaims == 1
    counted = sum(teams.get("a", 0.0) for teams in cluster.hourly.closed.values())
    assert counted > 0  # the reclaimed share was counted
