"""How long a running pod still has to go: the mean residual life of what finished before.

Runtimes here are heavy-tailed on purpose (90 pods of 100 s, 10 of 10,000 s: mean 1,090 s), as
GPU jobs are: a pod that has outlived the mean is most likely one of the long ones, and a
reservation that assumed it ends "now" would wait on the node that drains last.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.backfill import Reservation
from gpupool.scheduling.decisions import EASY, Admit, EngineOptions, Wait
from gpupool.scheduling.runtime import DEFAULT_RUNTIME, MIN_TAIL, WINDOW, RuntimeEstimator

from ..policy.builders import Cluster, node, queue, share, whole, work


def heavy_tailed(estimator: RuntimeEstimator, workload: Workload, queue_name: str = "q") -> None:
    for seconds in [100.0] * 90 + [10_000.0] * 10:
        estimator.observe_completion(workload, queue_name, seconds)


def test_the_remaining_runtime_grows_once_a_pod_outlives_the_short_ones() -> None:
    estimator = RuntimeEstimator()
    pod = work(whole("p", 3), "q")
    heavy_tailed(estimator, pod)
    assert estimator.estimate(pod, "q") == pytest.approx(1090.0)
    assert estimator.remaining(pod, "q", 50.0) == pytest.approx(1040.0)
    assert estimator.remaining(pod, "q", 200.0) == pytest.approx(9800.0)  # one of the long ten
    assert estimator.remaining(pod, "q", 20_000.0) == pytest.approx(20_000.0)  # older than all


def test_a_declared_runtime_is_what_is_left_of_it_and_nothing_once_past() -> None:
    estimator = RuntimeEstimator()
    pod = work(whole("p"), "q", runtime=600.0)
    heavy_tailed(estimator, pod)
    assert estimator.remaining(pod, "q", 100.0) == 500.0
    assert estimator.remaining(pod, "q", 900.0) == 0.0


def test_nothing_learned_leaves_what_is_left_of_the_default() -> None:
    pod = work(whole("p"), "q")
    assert RuntimeEstimator().remaining(pod, "q", 600.0) == DEFAULT_RUNTIME - 600.0
    assert RuntimeEstimator().remaining(pod, "q", DEFAULT_RUNTIME + 1) == 0.0


def test_a_shape_with_too_thin_a_tail_falls_back_to_its_queue() -> None:
    estimator = RuntimeEstimator()
    small = work(share("s"), "q")
    heavy_tailed(estimator, work(whole("p", 3), "q"))
    for _ in range(MIN_TAIL - 1):
        estimator.observe_completion(small, "q", 300.0)
    # Seven shares of 300 s cannot say what a share older than 200 s does; the queue's 107
    # completions can (17 longer than 200 s: seven of 300 s and ten of 10,000 s).
    expected = (7 * 300.0 + 10 * 10_000.0) / 17 - 200.0
    assert estimator.remaining(small, "q", 200.0) == pytest.approx(expected)
    estimator.observe_completion(small, "q", 300.0)
    assert estimator.remaining(small, "q", 200.0) == pytest.approx(100.0)


def test_only_the_recent_completions_count() -> None:
    estimator = RuntimeEstimator()
    pod = work(whole("p"), "q")
    for _ in range(WINDOW):
        estimator.observe_completion(pod, "q", 5000.0)
    assert estimator.remaining(pod, "q", 1000.0) == pytest.approx(4000.0)
    for _ in range(WINDOW):
        estimator.observe_completion(pod, "q", 2000.0)
    assert estimator.remaining(pod, "q", 1000.0) == pytest.approx(1000.0)
    assert estimator.estimate(pod, "q") == pytest.approx(3500.0)  # the mean keeps everything


def reserving_cluster(remaining_by_age: bool) -> Cluster:
    """n0's pod has run 20,000 s (older than anything seen), n1's 50 s; a 4-GPU pod waits."""
    cluster = Cluster(
        [node("n0", gpus=4), node("n1", gpus=4)],
        PolicyConfig((PoolSpec("p", PoolMode.EXCLUSIVE),), (queue("q", "p"),)),
        replace(EASY, remaining_by_age=remaining_by_age),
    )
    heavy_tailed(cluster.engine.default_runtimes, work(whole("old", 3), "q"))
    for name, row, started in (("old", 0, 0.0), ("young", 1, 19_950.0)):
        workload = work(whole(name, 3), "q")
        cluster.snapshot.bind(workload.pod, row, (0, 1, 2))
        record = Running(workload, 0, 0, 3000, row, started, started + 1090.0)
        cluster.running[name] = record
        cluster.ledger.add(record)
    return cluster


@pytest.mark.parametrize(
    ("remaining_by_age", "reserved", "backfilled_on"),
    [
        (False, Reservation("big", 0, 20_000.0), "n1"),  # the old pod "ends now"
        (True, Reservation("big", 1, 21_040.0), "n0"),  # the young one: 1,090 s less its 50 s
    ],
)
def test_the_reservation_waits_for_the_node_that_drains_first(
    remaining_by_age: bool, reserved: Reservation, backfilled_on: str
) -> None:
    cluster = reserving_cluster(remaining_by_age)
    pending = [work(whole("big", 4), "q"), work(whole("long"), "q", created_at=1, runtime=9000)]
    result = cluster.cycle(pending, 20_000.0)
    big, long = result.decisions
    assert isinstance(big, Wait)
    assert isinstance(long, Admit)
    assert long.bind.node_name == backfilled_on  # kept off the reserved node
    assert result.reservations == {0: (reserved,)}


def test_a_quantile_of_a_heavy_tail_lies_far_above_its_mean() -> None:
    estimator = RuntimeEstimator()
    pod = work(whole("p", 3), "q")
    assert estimator.quantile(pod, "q", 0.9) == DEFAULT_RUNTIME  # nothing learned: the mean
    heavy_tailed(estimator, pod)
    assert estimator.quantile(pod, "q", 0.5) == 100.0
    assert estimator.quantile(pod, "q", 0.9) == 10_000.0
    assert estimator.quantile(work(whole("d", 3), "q", runtime=700.0), "q", 0.9) == 700.0


@pytest.mark.parametrize(("quantile", "starts"), [(None, True), (0.9, False)])
def test_a_pod_whose_tail_would_overrun_the_reserved_start_keeps_off_the_node(
    quantile: float | None, starts: bool
) -> None:
    """Its mean (1,090 s) ends before the big pod's start at t=5,000, its p90 (10,000 s) not."""
    cluster = Cluster(
        [node("n0", gpus=4)],
        PolicyConfig((PoolSpec("p", PoolMode.EXCLUSIVE),), (queue("q", "p"),)),
        replace(EASY, backfill_quantile=quantile),
    )
    heavy_tailed(cluster.engine.default_runtimes, work(whole("one"), "q"))
    running = work(whole("a", 3), "q")
    cluster.snapshot.bind(running.pod, 0, (0, 1, 2))
    cluster.running["a"] = record = Running(running, 0, 0, 3000, 0, 0.0, 5000.0)
    cluster.ledger.add(record)
    pending = [work(whole("big", 4), "q"), work(whole("one"), "q", created_at=1)]
    _, one = cluster.cycle(pending, 10.0).decisions
    assert isinstance(one, Admit) is starts
    if not starts:
        assert isinstance(one, Wait)
        assert one.reason == "backfill: would delay big, reserved on node n0 from t=5000s"


def test_a_backfill_quantile_outside_zero_and_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"backfill_quantile: must lie between 0 and 1 \(1.0\)"):
        EngineOptions(backfill_quantile=1.0)
