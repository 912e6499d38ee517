"""The engine's preemption, protection, reclaim, nomination and backfill rules, table by table."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec, QueueSpec
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.decisions import Admit, EngineOptions, Preempt, Wait
from gpupool.scheduling.preemption import Rule

from ..policy.builders import Cluster, node, queue, whole, work

POOL = PoolSpec("p", PoolMode.EXCLUSIVE)


def running_cluster(
    queues: tuple[QueueSpec, ...],
    started: list[tuple[Workload, float]],
    gpus: int = 2,
    nodes: int = 1,
    options: EngineOptions | None = None,
) -> Cluster:
    cluster = Cluster(
        [node(f"n{i}", gpus=gpus) for i in range(nodes)], PolicyConfig((POOL,), queues), options
    )
    for workload, at in started:
        (decision,) = cluster.cycle([workload], at).decisions
        assert isinstance(decision, Admit), decision
        cluster.start(decision, at)
    return cluster


Q = queue("q", "p")


@pytest.mark.parametrize(
    ("queues", "started", "arriving", "expected"),
    [
        pytest.param(
            (Q,),
            [(work(whole("old"), "q"), 0.0), (work(whole("young"), "q"), 50.0)],
            work(whole("urgent"), "q", priority=5),
            ("priority", ("young",)),
            id="priority-evicts-least-gpu-time-lost",
        ),
        pytest.param(
            (Q,),
            [(work(whole("old", 2), "q"), 0.0)],
            work(whole("urgent"), "q", priority=5),
            ("priority", ("old",)),
            id="a-two-gpu-victim-when-nothing-smaller",
        ),
        pytest.param(
            (queue("q", "p", min_runtime=200),),
            [(work(whole("old"), "q"), 0.0), (work(whole("young"), "q"), 50.0)],
            work(whole("urgent"), "q", priority=5),
            None,
            id="protected-by-min-runtime",
        ),
        pytest.param(
            (Q,),
            [(work(whole("a"), "q", priority=5), 0.0), (work(whole("b"), "q", priority=5), 0.0)],
            work(whole("low"), "q"),
            None,
            id="never-for-a-lower-priority-pod",
        ),
        pytest.param(
            (Q,),
            [(work(whole("a"), "q"), 0.0), (work(whole("b"), "q"), 0.0)],
            work(whole("same"), "q"),
            None,
            id="never-for-an-equal-priority-pod-of-the-queue",
        ),
        pytest.param(
            (queue("a", "p", guaranteed=1), queue("b", "p")),
            [(work(whole("b1"), "b"), 0.0), (work(whole("b2"), "b"), 10.0)],
            work(whole("a1"), "a"),
            ("reclaim", ("b2",)),
            id="reclaim-what-b-borrowed",
        ),
        pytest.param(
            (queue("a", "p", guaranteed=1), queue("b", "p", guaranteed=2)),
            [(work(whole("b1"), "b"), 0.0), (work(whole("b2"), "b"), 10.0)],
            work(whole("a1"), "a"),
            None,
            id="no-reclaim-below-the-victims-guarantee",
        ),
        pytest.param(
            (queue("a", "p"), queue("b", "p")),
            [(work(whole("b1"), "b"), 0.0), (work(whole("b2"), "b"), 10.0)],
            work(whole("a1"), "a"),
            None,
            id="no-reclaim-without-a-guarantee",
        ),
        pytest.param(
            (queue("a", "p", guaranteed=1), queue("b", "p", priority=10)),
            [(work(whole("b1"), "b"), 0.0), (work(whole("b2"), "b"), 10.0)],
            work(whole("a1"), "a"),
            ("reclaim", ("b2",)),
            id="reclaim-from-a-higher-priority-queue",
        ),
        pytest.param(
            (queue("a", "p", guaranteed=1), queue("b", "p")),
            [
                (work(whole("b1"), "b", priority=1000), 0.0),
                (work(whole("b2"), "b", priority=1000), 10.0),
            ],
            work(whole("a1"), "a"),
            ("reclaim", ("b2",)),
            id="reclaim-ignores-the-borrowers-pod-priorities",
        ),
        pytest.param(
            (queue("a", "p"), queue("b", "p")),
            [(work(whole("b1"), "b"), 0.0), (work(whole("b2"), "b"), 10.0)],
            work(whole("a1"), "a", priority=1000),
            None,
            id="a-pod-priority-evicts-nothing-of-another-queue",
        ),
        pytest.param(
            (queue("a", "p", guaranteed=2), queue("b", "p")),
            [(work(whole("a0"), "a"), 0.0), (work(whole("b1"), "b"), 0.0)],
            work(whole("a1", 2), "a"),
            None,
            id="no-reclaim-beyond-the-reclaimers-guarantee",
        ),
    ],
)
def test_preemption(
    queues: tuple[QueueSpec, ...],
    started: list[tuple[Workload, float]],
    arriving: Workload,
    expected: tuple[str, tuple[str, ...]] | None,
) -> None:
    cluster = running_cluster(queues, started)
    (decision,) = cluster.cycle([arriving], 100.0).decisions
    if expected is None:
        assert isinstance(decision, Wait), decision
        return
    assert isinstance(decision, Preempt), decision
    assert (decision.rule.value, decision.victims) == expected
    assert decision.node_name == "n0"


def test_preempt_then_nominated_pod_starts_and_victims_lose_their_gpu_time() -> None:
    cluster = running_cluster((Q,), [(work(whole("a"), "q"), 0.0), (work(whole("b"), "q"), 40.0)])
    urgent = work(whole("urgent"), "q", priority=5)
    result = cluster.run([urgent], 100.0)
    (preempt,) = result.decisions
    assert isinstance(preempt, Preempt)
    assert preempt.rule is Rule.PRIORITY
    assert preempt.gpu_seconds_lost == pytest.approx(60.0)
    assert result.nominations == {"urgent": 0}
    for victim in preempt.victims:
        cluster.evict(victim)
    (admit,) = cluster.run([urgent], 101.0).decisions
    assert isinstance(admit, Admit)
    assert cluster.nominations == {}


def place(cluster: Cluster, workload: Workload, node: int, gpus: tuple[int, ...]) -> None:
    cluster.snapshot.bind(workload.pod, node, gpus)
    record = Running(workload, 0, 0, 1000 * len(gpus), node, 0.0, 3600.0)
    cluster.running[workload.name] = record
    cluster.ledger.add(record)


def test_a_nominated_node_is_kept_from_pods_of_lower_or_equal_priority() -> None:
    cluster = Cluster([node("n0", gpus=2), node("n1", gpus=1)], PolicyConfig((POOL,), (Q,)))
    place(cluster, work(whole("terminating"), "q"), 0, (1,))  # a victim not gone yet
    big = work(whole("big", 2), "q", priority=5)
    cluster.nominations = {"big": 0}
    low = work(whole("low"), "q", created_at=-1)
    decisions = cluster.cycle([big, low], 100.0).decisions
    by_name = {d.workload.name: d for d in decisions}
    assert isinstance(by_name["big"], Wait)
    assert "nominated to node n0" in by_name["big"].reason
    assert isinstance(by_name["low"], Admit)
    assert by_name["low"].bind.node_name == "n1"  # n0's free GPU stays for big
    place(cluster, work(whole("filler"), "q"), 1, (0,))
    higher = work(whole("higher"), "q", priority=9)
    decisions = cluster.cycle([big, low, higher], 100.0).decisions
    outcome = {d.workload.name: type(d).__name__ for d in decisions}
    assert outcome == {"higher": "Admit", "big": "Wait", "low": "Wait"}
    low_wait = next(d for d in decisions if d.workload.name == "low")
    assert isinstance(low_wait, Wait)
    # higher took the room big was nominated for, so the nomination is gone (big could not fit
    # there any more) and low waits for room like any pod, not for a preempting pod
    assert low_wait.reason == "0/2 nodes are available: 2 Insufficient gpupool.io/gpu."
    big_wait = next(d for d in decisions if d.workload.name == "big")
    assert isinstance(big_wait, Wait)
    assert "nominated" not in big_wait.reason


BACKFILL_RUNNING = [
    (work(whole("r1", 2), "q", runtime=1000.0), 0.0),
    (work(whole("r2"), "q", runtime=5000.0), 0.0),
]


@pytest.mark.parametrize(
    ("options", "small", "expected"),
    [
        pytest.param(EngineOptions(), work(whole("s"), "q", created_at=2, runtime=100.0),
                     "Admit", id="short-pod-backfills"),
        pytest.param(EngineOptions(), work(whole("s"), "q", created_at=2, runtime=9000.0),
                     "backfill: would delay big, reserved on node n0 from t=5000s",
                     id="long-pod-would-delay-the-reservation"),
        pytest.param(EngineOptions(backfill=False),
                     work(whole("s"), "q", created_at=2, runtime=100.0),
                     "waiting behind big in pool p", id="strict-order"),
    ],
)  # fmt: skip
def test_backfill(options: EngineOptions, small: Workload, expected: str) -> None:
    cluster = running_cluster((Q,), BACKFILL_RUNNING, gpus=4, options=options)
    big = work(whole("big", 4), "q", created_at=1)
    result = cluster.cycle([big, small], 10.0)
    head, other = result.decisions
    assert isinstance(head, Wait)
    if expected == "Admit":
        assert isinstance(other, Admit)
        assert other.backfilled
    else:
        assert isinstance(other, Wait)
        assert other.reason == expected
    if options.backfill:
        ((reservation,),) = result.reservations.values()
        assert (reservation.pod, reservation.node, reservation.start_at) == ("big", 0, 5000.0)


def test_backfill_sends_a_long_pod_to_another_node() -> None:
    cluster = running_cluster((Q,), BACKFILL_RUNNING, gpus=4, nodes=1)
    cluster2 = Cluster([node("n0", gpus=4), node("n1", gpus=1)], PolicyConfig((POOL,), (Q,)))
    for name, record in cluster.running.items():
        cluster2.snapshot.bind(record.workload.pod, 0, cluster.snapshot.allocations[name].gpus)
        cluster2.running[name] = record
        cluster2.ledger.add(record)
    big = work(whole("big", 4), "q", created_at=1)
    long = work(whole("long"), "q", created_at=2, runtime=9000.0)
    _, decision = cluster2.cycle([big, long], 10.0).decisions
    assert isinstance(decision, Admit)
    assert decision.bind.node_name == "n1"


def test_a_cycle_leaves_its_inputs_as_they_were() -> None:
    cluster = running_cluster((Q,), BACKFILL_RUNNING, gpus=4, nodes=2)
    before = {k: getattr(cluster.snapshot, k).copy() for k in ("gpu_free", "cpu_free", "pods_free")}
    used = cluster.ledger.used.copy()
    pending = [work(whole(f"w{i}", 2), "q", created_at=i, priority=i % 2) for i in range(5)]
    result = cluster.cycle(pending, 10.0)
    assert any(isinstance(d, Admit) for d in result.decisions)
    for key, array in before.items():
        np.testing.assert_array_equal(getattr(cluster.snapshot, key), array)
    np.testing.assert_array_equal(cluster.ledger.used, used)
    assert set(cluster.snapshot.allocations) == {"r1", "r2"}


def test_an_urgent_pod_at_its_queues_ceiling_evicts_a_lower_priority_pod_of_the_queue() -> None:
    capped = queue("q", "p", ceiling=2)
    cluster = running_cluster(
        (capped,), [(work(whole("a"), "q"), 0.0), (work(whole("b"), "q"), 40.0)], gpus=4
    )
    (decision,) = cluster.cycle([work(whole("urgent"), "q", priority=5)], 100.0).decisions
    assert isinstance(decision, Preempt)
    assert (decision.rule, decision.victims) == (Rule.PRIORITY, ("b",))
    (same,) = cluster.cycle([work(whole("peer"), "q")], 100.0).decisions
    assert isinstance(same, Wait)
    assert same.reason == "queue q: ceiling 2 GPU units reached in pool p"


def test_a_non_reclaimable_queue_never_holds_what_reclaim_would_need() -> None:
    queues = (queue("a", "p", guaranteed=1), queue("b", "p", reclaimable=False))
    cluster = running_cluster(queues, [(work(whole("b1"), "b"), 0.0)])
    (refused,) = cluster.cycle([work(whole("b2"), "b")], 10.0).decisions
    assert isinstance(refused, Wait)
    assert "not reclaimable" in refused.reason
    (admitted,) = cluster.cycle([work(whole("a1"), "a")], 10.0).decisions
    assert isinstance(admitted, Admit)  # a's guaranteed GPU was never lent to b
