"""Backfill behind several reservations: the first k blocked pods of a pool keep their place.

Two 4-GPU nodes each run a 3-GPU pod (ending at t=5000 on n0, t=6000 on n1); two 4-GPU pods
wait. With one reservation (EASY) only the first is protected, so a long 1-GPU pod may take n1's
free GPU and push the second big pod's start past t=6000; with two, each big pod holds its own
node and only pods that end before the reserved starts may jump ahead.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core.model import PodSpec
from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.backfill import Reservation
from gpupool.scheduling.decisions import EASY, Admit, CycleRequest, CycleResult, EngineOptions, Wait

from ..policy.builders import Cluster, node, queue, whole, work

POOL = PoolSpec("p", PoolMode.EXCLUSIVE)


def two_busy_nodes(
    per_pool: int, follow: bool = False, above: int | None = None, backfill: bool = True
) -> Cluster:
    cluster = Cluster(
        [node("n0", gpus=4), node("n1", gpus=4)],
        PolicyConfig((POOL,), (queue("q", "p"),)),
        replace(
            EASY,
            reservations_per_pool=per_pool,
            reservations_follow_pods=follow,
            reserve_above_units=above,
            backfill=backfill,
        ),
    )
    for name, row, end in (("a", 0, 5000.0), ("b", 1, 6000.0)):
        workload = work(whole(name, 3), "q")
        cluster.snapshot.bind(workload.pod, row, (0, 1, 2))
        record = Running(workload, 0, 0, 3000, row, 0.0, end)
        cluster.running[name] = record
        cluster.ledger.add(record)
    return cluster


def pending(runtime: float) -> list[Workload]:
    return [
        work(whole("big1", 4), "q", created_at=1),
        work(whole("big2", 4), "q", created_at=2),
        work(whole("one"), "q", created_at=3, runtime=runtime),
    ]


def test_one_reservation_lets_a_long_pod_delay_the_second_big_pod() -> None:
    result = two_busy_nodes(per_pool=1).cycle(pending(runtime=9000.0), 10.0)
    big1, big2, one = result.decisions
    assert isinstance(big1, Wait)
    assert isinstance(big2, Wait)
    assert isinstance(one, Admit)
    assert one.backfilled
    assert one.bind.node_name == "n1"  # away from big1's node, onto the one big2 needs
    assert result.reservations == {0: (Reservation("big1", 0, 5000.0),)}


def test_two_reservations_keep_each_big_pod_its_node() -> None:
    result = two_busy_nodes(per_pool=2).cycle(pending(runtime=9000.0), 10.0)
    *_, one = result.decisions
    assert isinstance(one, Wait)
    assert one.reason == "backfill: would delay big1, reserved on node n0 from t=5000s"
    assert result.reservations == {
        0: (Reservation("big1", 0, 5000.0), Reservation("big2", 1, 6000.0))
    }


def test_a_pod_that_ends_before_every_reserved_start_still_backfills() -> None:
    result = two_busy_nodes(per_pool=2).cycle(pending(runtime=100.0), 10.0)
    *_, one = result.decisions
    assert isinstance(one, Admit)
    assert one.backfilled


def test_reservations_carry_to_the_next_cycle_with_their_pods() -> None:
    cluster = two_busy_nodes(per_pool=2)
    first = cluster.cycle(pending(runtime=9000.0), 10.0)
    request = CycleRequest(
        cluster.snapshot,
        pending(runtime=9000.0)[1:],  # big1 has gone: only big2's reservation is kept
        cluster.running,
        cluster.ledger,
        20.0,
        reservations=first.reservations,
    )
    second = cluster.engine.cycle(request)
    assert second.reservations == {0: (Reservation("big2", 1, 6000.0),)}


@pytest.mark.parametrize(
    ("follow", "kept"),
    [(False, Reservation("big1", 0, 5000.0)), (True, Reservation("big2", 1, 6000.0))],
)
def test_a_reservation_past_its_start_follows_its_pod_when_asked(
    follow: bool, kept: Reservation
) -> None:
    """big2's start on n1 passed: the head big1 takes n0, unless big2 keeps n1 (follow).

    n0 drains first (t=5000), but a reservation found afresh would leave n1, where backfill
    was kept off for big2, to fill up again.
    """
    cluster = two_busy_nodes(per_pool=1, follow=follow)
    request = CycleRequest(
        cluster.snapshot,
        pending(runtime=9000.0),
        cluster.running,
        cluster.ledger,
        10.0,
        reservations={0: (Reservation("big2", 1, 5.0),)},
    )
    result = cluster.engine.cycle(request)
    assert result.reservations == {0: (kept,)}


def test_reservations_per_pool_below_one_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="reservations_per_pool: must be at least 1"):
        EngineOptions(reservations_per_pool=0)


@pytest.mark.parametrize("follow", [False, True])
def test_a_followed_reservation_survives_a_cycle_with_nothing_to_backfill(follow: bool) -> None:
    """Only big2 is pending, so nothing is tried behind it: with follow it keeps n1.

    Its reserved start (t=5 s) has passed at t=10 s, so it is found again on the same node,
    from the running pods' expected ends, rather than carried as it was.
    """
    cluster = two_busy_nodes(per_pool=1, follow=follow)
    held = Reservation("big2", 1, 5.0)
    request = CycleRequest(
        cluster.snapshot,
        pending(runtime=9000.0)[1:2],
        cluster.running,
        cluster.ledger,
        10.0,
        reservations={0: (held,)},
    )
    result = cluster.engine.cycle(request)
    if not follow:
        assert result.reservations == {}
        return
    (renewed,) = result.reservations[0]
    assert (renewed.pod, renewed.node) == (held.pod, held.node)
    assert renewed.start_at > request.now


def sized_pending() -> list[Workload]:
    """A 2-GPU pod blocked first, a 4-GPU pod behind it, then a long 1-GPU pod."""
    return [
        work(whole("two", 2), "q", created_at=1),
        work(whole("big", 4), "q", created_at=2),
        work(whole("one"), "q", created_at=3, runtime=9000.0),
    ]


@pytest.mark.parametrize(("above", "holder"), [(None, "two"), (1000, "two"), (2000, "big")])
def test_only_pods_above_the_size_hold_the_reservation(above: int | None, holder: str) -> None:
    """The 2-GPU head is too small above 2,000 milli-units: the 4-GPU pod behind it holds n0."""
    cluster = two_busy_nodes(per_pool=1, above=above)
    result = cluster.cycle(sized_pending(), 10.0)
    two, big, one = result.decisions
    assert isinstance(two, Wait)
    assert isinstance(big, Wait)
    assert isinstance(one, Admit)
    assert one.bind.node_name == "n1"  # off the reserved node, whoever holds it
    assert result.reservations == {0: (Reservation(holder, 0, 5000.0),)}


def test_a_head_below_the_size_holds_nothing_and_backfill_is_free() -> None:
    cluster = two_busy_nodes(per_pool=1, above=2000)
    pods = [sized_pending()[0], sized_pending()[2]]
    result = cluster.cycle(pods, 10.0)
    two, one = result.decisions
    assert isinstance(two, Wait)
    assert isinstance(one, Admit)
    assert result.reservations == {}


def test_a_negative_size_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="reserve_above_units: must be at least 0"):
        EngineOptions(reserve_above_units=-1)


def busy(
    running: list[tuple[str, int, int, float]], follow: bool = False, depth: int = 100
) -> Cluster:
    """Two 4-GPU nodes running (name, node row, GPUs, expected end) pods; two reservations."""
    cluster = Cluster(
        [node("n0", gpus=4), node("n1", gpus=4)],
        PolicyConfig((POOL,), (queue("q", "p"),)),
        replace(
            EASY, reservations_per_pool=2, reservations_follow_pods=follow, backfill_depth=depth
        ),
    )
    for name, row, gpus, end in running:
        workload = work(whole(name, gpus), "q")
        cluster.snapshot.bind(workload.pod, row, tuple(range(gpus)))
        record = Running(workload, 0, 0, gpus * 1000, row, 0.0, end)
        cluster.running[name] = record
        cluster.ledger.add(record)
    return cluster


def cycle_holding(cluster: Cluster, pending: list[Workload], *held: Reservation) -> CycleResult:
    """A cycle at t=10 s that starts from ``held``, the previous cycle's reservations."""
    request = CycleRequest(
        cluster.snapshot, pending, cluster.running, cluster.ledger, 10.0, reservations={0: held}
    )
    return cluster.engine.cycle(request)


def one_then_big2() -> list[Workload]:
    """A long 1-GPU pod served first, then big2."""
    return [
        work(whole("one"), "q", created_at=1, runtime=9000.0),
        work(whole("big2", 4), "q", created_at=2),
    ]


def test_a_holder_behind_another_blocked_pod_starts_on_its_own_reserved_node() -> None:
    """two holds n1, where 2 GPUs are free; big1 blocks first: two's reservation is no bar."""
    cluster = busy([("a", 0, 3, 5000.0), ("b", 1, 2, 6000.0)])
    request = CycleRequest(
        cluster.snapshot,
        [work(whole("big1", 4), "q", created_at=1), work(whole("two", 2), "q", created_at=2)],
        cluster.running,
        cluster.ledger,
        10.0,
        reservations={0: (Reservation("two", 1, 100.0),)},
    )
    big1, two = cluster.engine.cycle(request).decisions
    assert isinstance(big1, Wait)
    assert isinstance(two, Admit)
    assert two.bind.node_name == "n1"


@pytest.mark.parametrize("follow", [False, True])
def test_a_followed_reservation_holds_back_pods_served_before_any_blocked_pod(
    follow: bool,
) -> None:
    """n0 is full and n1 is kept for big2: the 1-GPU pod served first may take n1 only in EASY."""
    cluster = busy([("a", 0, 4, 5000.0)], follow=follow)
    result = cycle_holding(cluster, one_then_big2(), Reservation("big2", 1, 20.0))
    one, big2 = result.decisions
    if follow:
        assert isinstance(one, Wait)
        assert one.reason == "backfill: would delay big2, reserved on node n1 from t=20s"
        assert isinstance(big2, Admit)
        assert big2.bind.node_name == "n1"
    else:
        assert isinstance(one, Admit)
        assert one.bind.node_name == "n1"
        assert isinstance(big2, Wait)


def test_a_holder_is_tried_past_the_backfill_depth() -> None:
    """huge blocks, one uses up the depth of 1: big2 is still tried and takes n1, kept for it."""
    cluster = busy([("a", 0, 4, 5000.0)], follow=True, depth=1)
    pending = [work(whole("huge", 8), "q", created_at=0), *one_then_big2()]
    result = cycle_holding(cluster, pending, Reservation("big2", 1, 20.0))
    huge, one, big2 = result.decisions
    assert isinstance(huge, Wait)
    assert isinstance(one, Wait)
    assert isinstance(big2, Admit)
    assert big2.bind.node_name == "n1"


def test_a_pool_swept_behind_its_blocked_pods_is_not_swept_again_at_the_cycle_end() -> None:
    """big1 blocks, one is tried behind it (the sweep), big2 blocks after: only big1 holds one.

    Sweeping again at the cycle's end, for big2, raised the large pods' p95 delay in the
    dynamic simulation; big2 gets its reservation in a later cycle's sweep.
    """
    cluster = two_busy_nodes(per_pool=2, follow=True)
    pending = [
        work(whole("big1", 4), "q", created_at=1),
        work(whole("one"), "q", created_at=2, runtime=100.0),
        work(whole("big2", 4), "q", created_at=3),
    ]
    result = cluster.cycle(pending, 10.0)
    big1, one, big2 = result.decisions
    assert isinstance(big1, Wait)
    assert isinstance(one, Admit)
    assert isinstance(big2, Wait)
    assert [r.pod for r in result.reservations[0]] == ["big1"]


def test_a_pool_nobody_was_tried_behind_gets_its_sweep_at_the_cycle_end() -> None:
    """big1 and big2 block and nothing is tried behind them: both hold one, on their own nodes."""
    result = two_busy_nodes(per_pool=2, follow=True).cycle(pending(runtime=100.0)[:2], 10.0)
    assert all(isinstance(decision, Wait) for decision in result.decisions)
    assert sorted((r.pod, r.node) for r in result.reservations[0]) == [("big1", 0), ("big2", 1)]


def test_strict_order_holds_no_reservations() -> None:
    """Without backfill nothing starts behind big1, so nothing needs keeping off its node."""
    cluster = two_busy_nodes(per_pool=2, follow=True, backfill=False)
    result = cluster.cycle(pending(runtime=100.0), 10.0)
    assert all(isinstance(decision, Wait) for decision in result.decisions)
    assert result.reservations == {}


def _cpu_hungry(name: str, created_at: float) -> Workload:
    """Four GPUs and 40 of a node's 64 CPUs."""
    return work(
        PodSpec(name, 40_000, 1024, gpu_count=4, gpu_milli=1000), "q", created_at=created_at
    )


@pytest.mark.parametrize(("cpu", "starts"), [(1000, True), (30_000, False)])
def test_a_pod_asking_no_gpu_backfills_on_a_reserved_node_only_where_it_leaves_the_room(
    cpu: int, starts: bool
) -> None:
    """Both nodes are reserved for 40-CPU pods; a long CPU pod starts only if 40 CPUs stay free.

    Kept off every reserved node whatever it asked, a CPU pod waited beside idle cores for as
    long as the reservations held (a ``cpu: 2`` pod on four reserved nodes, never bound).
    """
    cluster = two_busy_nodes(per_pool=2)
    pods = [
        _cpu_hungry("big1", 1),
        _cpu_hungry("big2", 2),
        work(PodSpec("cpu", cpu, 1024), "q", created_at=3, runtime=9000.0),
    ]
    result = cluster.cycle(pods, 10.0)
    *_, decision = result.decisions
    assert len(result.reservations[0]) == 2
    if starts:
        assert isinstance(decision, Admit)
    else:
        assert isinstance(decision, Wait)
        assert decision.reason.startswith("backfill: would delay big")
    assert cluster.snapshot.cpu_free.tolist() == [63_000, 63_000]  # the what-ifs undone
