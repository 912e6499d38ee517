"""The share-packing LP: patterns, floors worked out by hand, and a missing scipy."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from gpupool.core.model import PodSpec
from gpupool.sim.replay.packing_lp import (
    LPUnavailableError,
    maximal_patterns,
    placed_share_floor_milli,
    share_floor_milli,
    share_sizes,
)


def test_maximal_patterns_admit_no_further_share() -> None:
    sizes, counts = [600, 300, 150], [5, 5, 5]
    patterns = maximal_patterns(sizes, counts)
    assert (1, 1, 0) in patterns  # 900: no 150 fits the last 100
    assert (0, 2, 2) in patterns  # 900
    assert (0, 2, 1) not in patterns  # 750: another 150 fits
    assert (0, 0, 5) in patterns  # 750, but every 150 is used
    for pattern in patterns:
        used = sum(k * s for k, s in zip(pattern, sizes, strict=True))
        assert used <= 1000
        assert all(
            k == c or s > 1000 - used for k, c, s in zip(pattern, counts, sizes, strict=True)
        )


def test_maximal_patterns_respect_the_counts() -> None:
    assert maximal_patterns([400], [1]) == [(1,)]
    assert maximal_patterns([400], [3]) == [(2,)]


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"share sizes must be in 1\.\.1000"):
        maximal_patterns([0], [1])
    with pytest.raises(ValueError, match="differ in length"):
        maximal_patterns([100, 200], [1])


@pytest.mark.parametrize(
    ("shares", "floor"),
    [
        (Counter(), 0.0),
        (Counter({500: 4}), 0.0),
        (Counter({600: 3}), 1200.0),  # one per GPU, 400 left on each
        (Counter({810: 2, 190: 1}), 190.0),  # the 190 fills one sliver, the other stays
        (Counter({400: 3}), 300.0),  # 1.5 GPUs in the relaxation; an integral packing needs 2
    ],
)
def test_floor_when_every_share_is_placed(shares: Counter[int], floor: float) -> None:
    assert placed_share_floor_milli(shares) == pytest.approx(floor, abs=1e-6)


def test_letting_shares_fail_lowers_the_floor() -> None:
    # x + f810 >= 2: waste 190 - 190 f810 against failed 810 f810; equal at f810 = 0.19.
    shares = Counter({810: 2, 190: 1})
    assert share_floor_milli(shares, allow_failures=True) == pytest.approx(153.9, abs=1e-6)
    assert share_floor_milli(shares, allow_failures=True) < placed_share_floor_milli(shares)


def test_share_sizes_count_one_item_per_gpu_and_skip_the_rest() -> None:
    pods = [
        PodSpec("a", 1000, 1, gpu_count=1, gpu_milli=810),
        PodSpec("b", 1000, 1, gpu_count=2, gpu_milli=300),
        PodSpec("whole", 1000, 1, gpu_count=2, gpu_milli=1000),
        PodSpec("memory-only", 1000, 1, gpu_count=1, gpu_memory_mib=4096),
        PodSpec("cpu", 1000, 1),
    ]
    assert share_sizes(pods) == Counter({810: 1, 300: 2})


def test_missing_scipy_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    with pytest.raises(LPUnavailableError, match=r"gpupool\[reports\]"):
        placed_share_floor_milli(Counter({500: 1}))
