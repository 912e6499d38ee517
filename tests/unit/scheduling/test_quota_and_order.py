"""Quota admission (guarantee, borrowing, ceiling, concurrency) and the serving order."""

from __future__ import annotations

import pytest

from gpupool.policy.quota import hold_reason
from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec
from gpupool.scheduling.decisions import Admit, Wait
from gpupool.scheduling.ordering import dominant_shares, order_pending

from ..policy.builders import Cluster, node, queue, share, whole, work

POOL = PoolSpec("a100-shared", PoolMode.SHARED, max_pods_per_gpu=8)


def cluster_with(*queues: object, gpus: int = 16) -> Cluster:
    nodes = [node(f"n{i}", gpus=8) for i in range(gpus // 8)]
    return Cluster(nodes, PolicyConfig((POOL,), tuple(queues)))  # type: ignore[arg-type]


def test_the_ceiling_reason_names_queue_limit_and_pool() -> None:
    cluster = cluster_with(queue("research", "a100-shared", guaranteed=4, ceiling=12))
    pods = [work(share(f"s{i}", 500), "research", created_at=i) for i in range(26)]
    decisions = cluster.run(pods).decisions
    admitted = [d for d in decisions if isinstance(d, Admit)]
    assert len(admitted) == 24  # 24 x 0.5 = 12 GPU units
    assert int(cluster.ledger.used.max()) == 12_000
    waits = [d for d in decisions if isinstance(d, Wait)]
    assert {d.reason for d in waits} == {
        "queue research: ceiling 12 GPU units reached in pool a100-shared"
    }


@pytest.mark.parametrize(
    ("spec", "used", "pods", "units", "reason"),
    [
        pytest.param(queue("q", "a100-shared", ceiling=2), 1500, 0, 500, "",
                     id="exactly-at-ceiling"),
        pytest.param(queue("q", "a100-shared", ceiling=2), 1500, 0, 501,
                     "queue q: ceiling 2 GPU units reached in pool a100-shared", id="over-ceiling"),
        pytest.param(queue("q", "a100-shared"), 16_000, 0, 1, "",
                     id="no-ceiling-no-quota-reason"),
        pytest.param(queue("q", max_pods=3), 0, 3, 0, "queue q: maxConcurrentPods 3 reached",
                     id="concurrency-counts-cpu-pods-too"),
        pytest.param(queue("q", "a100-shared", guaranteed=4, reclaimable=False), 4000, 0, 1000, "",
                     id="non-reclaimable-may-borrow-unpromised"),
    ],
)  # fmt: skip
def test_admission(spec: object, used: int, pods: int, units: int, reason: str) -> None:
    cluster = cluster_with(spec)
    cluster.ledger.used[0, 0] = used
    cluster.ledger.pods[0] = pods
    tables, layout = cluster.policy.tables, cluster.policy.layout
    assert hold_reason(tables, layout, cluster.ledger, 0, 0, units) == reason


def test_a_non_reclaimable_queue_cannot_borrow_what_others_are_promised() -> None:
    cluster = cluster_with(
        queue("safe", "a100-shared", guaranteed=2, reclaimable=False),
        queue("owner", "a100-shared", guaranteed=13),
    )
    cluster.ledger.used[0, 0] = 2000
    tables, layout = cluster.policy.tables, cluster.policy.layout
    assert hold_reason(tables, layout, cluster.ledger, 0, 0, 1000) == ""  # 16 - 13 = 3 for it
    assert "not reclaimable" in hold_reason(tables, layout, cluster.ledger, 0, 0, 1001)


def test_a_pod_in_no_queue_goes_to_the_default_queue_without_guarantee() -> None:
    cluster = cluster_with(queue("research", "a100-shared", guaranteed=4))
    (decision,) = cluster.run([work(share("s"), "elsewhere")]).decisions
    assert isinstance(decision, Admit)
    tables = cluster.policy.tables
    assert tables.queues[decision.queue].name == "default"
    assert tables.guaranteed[decision.queue].sum() == 0


def test_order_priority_then_fair_share_then_age() -> None:
    cluster = cluster_with(
        queue("high", "a100-shared", priority=10),
        queue("under", "a100-shared", guaranteed=4),
        queue("over", "a100-shared", guaranteed=2),
        queue("heavy", "a100-shared", guaranteed=2, weight=4),
    )
    cluster.ledger.used[:4, 0] = [0, 1000, 6000, 6000]  # over borrows 4; heavy 4 at weight 4
    tables, layout = cluster.policy.tables, cluster.policy.layout
    shares = dominant_shares(tables, layout, cluster.ledger)
    assert shares[1] < 0 < shares[3] < shares[2]
    pending = [
        (work(whole("over-old"), "over", created_at=0), 2),
        (work(whole("heavy"), "heavy", created_at=5), 3),
        (work(whole("under-new"), "under", created_at=9), 1),
        (work(whole("high-new"), "high", created_at=9), 0),
        (work(whole("high-urgent"), "high", priority=5, created_at=9), 0),
        (work(whole("high-old"), "high", created_at=1), 0),
    ]
    ordered = order_pending(pending, tables, layout, cluster.ledger)
    assert [w.name for w, _ in ordered] == [
        "high-urgent", "high-old", "high-new", "under-new", "heavy", "over-old"
    ]  # fmt: skip


def test_queues_come_before_pods_a_borrowers_pod_priority_buys_nothing() -> None:
    cluster = cluster_with(
        queue("under", "a100-shared", guaranteed=4),
        queue("borrower", "a100-shared"),
    )
    cluster.ledger.used[:2, 0] = [1000, 6000]
    tables, layout = cluster.policy.tables, cluster.policy.layout
    pending = [
        (work(whole("urgent-borrow"), "borrower", priority=1000, created_at=0), 1),
        (work(whole("borrow-old"), "borrower", created_at=-5), 1),
        (work(whole("under-plain"), "under", created_at=3), 0),
        (work(whole("under-urgent"), "under", priority=5, created_at=9), 0),
    ]
    ordered = order_pending(pending, tables, layout, cluster.ledger)
    assert [w.name for w, _ in ordered] == [
        "under-urgent", "under-plain", "urgent-borrow", "borrow-old"
    ]  # fmt: skip
