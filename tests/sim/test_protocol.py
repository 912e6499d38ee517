"""The replay protocol: shuffle, inflation, deflation, node ranks and arrival binning."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from gpupool.core.model import PodSpec
from gpupool.sim.replay.metrics import bin_by_arrival
from gpupool.sim.replay.protocol import RunStreams, tie_ranks, tune_arrivals


def pods(n: int, gpu_milli: int = 500, gpu_count: int = 1) -> list[PodSpec]:
    return [
        PodSpec(f"p{i:03d}", 1000, 1024, gpu_count=gpu_count, gpu_milli=gpu_milli) for i in range(n)
    ]


def total(arrivals: list[PodSpec]) -> int:
    return sum(pod.total_gpu_milli for pod in arrivals)


def test_originals_come_first_shuffled_then_clones() -> None:
    trace = pods(20)  # 10 GPUs asked, capacity 10 GPUs, target 13 GPUs
    arrivals = tune_arrivals(trace, total_gpus=10, streams=RunStreams.from_seed(1))
    originals = arrivals[:20]
    assert sorted(pod.name for pod in originals) == [pod.name for pod in trace]
    assert [pod.name for pod in originals] != [pod.name for pod in trace]
    clones = arrivals[20:]
    assert clones, "the trace is below 130% and must be inflated"
    assert all(pod.name.rsplit("-tuned-", 1)[1] == str(i) for i, pod in enumerate(clones))
    assert total(arrivals) <= 13_000
    assert total(arrivals) + 500 > 13_000  # stopped at the first draw that would exceed


def test_inflation_check_uses_the_per_gpu_share() -> None:
    # Multi-GPU draws are checked with their per-GPU share, so the total can overshoot.
    trace = [PodSpec("big", 1000, 1, gpu_count=8, gpu_milli=1000)]
    arrivals = tune_arrivals(trace, total_gpus=10, streams=RunStreams.from_seed(3))
    assert total(arrivals) == 16_000  # 8000 + 8000: the second draw saw 8000 + 1000 <= 13000


def test_deflation_removes_random_pods_down_to_the_target() -> None:
    trace = pods(40, gpu_milli=1000)  # 40 GPUs asked, capacity 10, target 13
    arrivals = tune_arrivals(trace, total_gpus=10, streams=RunStreams.from_seed(5))
    assert total(arrivals) == 13_000
    assert len({pod.name for pod in arrivals}) == 13


def test_same_seed_same_arrivals_other_seed_other_order() -> None:
    trace = pods(30)
    a = tune_arrivals(trace, 10, RunStreams.from_seed(7))
    b = tune_arrivals(trace, 10, RunStreams.from_seed(7))
    c = tune_arrivals(trace, 10, RunStreams.from_seed(8))
    assert [p.name for p in a] == [p.name for p in b]
    assert [p.name for p in a] != [p.name for p in c]


def test_bad_tuning_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="tune ratio"):
        tune_arrivals(pods(3), 10, RunStreams.from_seed(1), ratio=0)
    with pytest.raises(ValueError, match="requests no GPU"):
        tune_arrivals([PodSpec("cpu", 1000, 1)], 10, RunStreams.from_seed(1))


def test_tie_ranks_are_a_permutation_that_depends_on_the_seed() -> None:
    a = tie_ranks(50, RunStreams.from_seed(1))
    assert sorted(a.tolist()) == list(range(50))
    assert not np.array_equal(a, tie_ranks(50, RunStreams.from_seed(2)))


def test_clone_sampling_is_uniform_over_the_trace() -> None:
    trace = pods(4, gpu_milli=50)
    arrivals = tune_arrivals(trace, total_gpus=100, streams=RunStreams.from_seed(11))
    drawn = Counter(pod.name.split("-tuned-")[0] for pod in arrivals[4:])
    assert set(drawn) == {pod.name for pod in trace}
    assert max(drawn.values()) / min(drawn.values()) < 1.2


def test_binning_means_per_rounded_percent_and_fills_gaps_from_neighbours() -> None:
    total_gpus = 10  # 1% of capacity = 100 milli
    arrived = np.array([100, 149, 150, 250, 251, 450], dtype=np.int64)
    # percents 1, 1.49, 1.5, 2.5, 2.51, 4.5 -> bins 1, 1, 2, 2, 3, 4 (half to even)
    values = np.array([1.0, 3.0, 5.0, 7.0, 9.0, 11.0])
    curve = bin_by_arrival(arrived, values, total_gpus, max_pct=6)
    assert curve[1] == 2.0
    assert curve[2] == 6.0
    assert curve[3] == 9.0
    assert curve[4] == 11.0
    assert curve[0] == 2.0  # empty: mean of bins 0 and 1
    assert curve[5] == 11.0  # empty: mean of bins 4 and 6
    assert np.isnan(curve[6])
