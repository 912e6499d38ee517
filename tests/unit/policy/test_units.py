"""GPU units and GPU memory of allocations, table by table (the one count quota and cost use)."""

from __future__ import annotations

import pytest

from gpupool.core.model import RequestKind
from gpupool.policy.units import (
    AllocationSize,
    MigProfile,
    UnitsError,
    allocation_size,
    parse_mig_profile,
)

A100_80 = 81920
CASES = [
    # (kind, gpu_count, milli, memory MiB per GPU, GPU memory MiB, profile) -> (milli-units, GiB)
    (RequestKind.NONE, 0, 0, 0, A100_80, "", 0, 0.0),
    (RequestKind.WHOLE, 1, 1000, 0, A100_80, "", 1000, 80.0),
    (RequestKind.WHOLE, 8, 1000, 0, A100_80, "", 8000, 640.0),
    (RequestKind.WHOLE, 2, 1000, 0, 0, "", 2000, 0.0),  # unknown GPU memory: no GiB counted
    # memory dominates: 10% compute, half the memory
    (RequestKind.SHARE, 1, 100, 40960, A100_80, "", 500, 40.0),
    # compute dominates: 75% compute, 8 GiB of 80
    (RequestKind.SHARE, 1, 750, 8192, A100_80, "", 750, 8.0),
    # per GPU, times the GPU count
    (RequestKind.SHARE, 2, 250, 20480, A100_80, "", 500, 40.0),
    # compute only: memory counted as the compute part of the GPU's memory
    (RequestKind.SHARE, 1, 500, 0, A100_80, "", 500, 40.0),
    # memory only
    (RequestKind.SHARE, 1, 0, 20480, A100_80, "", 250, 20.0),
    # a memory cap on a GPU of unknown memory counts whole: its fraction cannot be known
    (RequestKind.SHARE, 1, 300, 4096, 0, "", 1000, 4.0),
    # a cap above the GPU (memory overcommit) still counts one GPU at most
    (RequestKind.SHARE, 1, 100, 90000, A100_80, "", 1000, 90000 / 1024),
    # a MIG slice: its compute slices over seven, rounded up; an attribute changes nothing
    (RequestKind.MIG, 0, 0, 0, A100_80, "1g.10gb", 143, 10.0),
    (RequestKind.MIG, 0, 0, 0, A100_80, "3g.40gb", 429, 40.0),
    (RequestKind.MIG, 0, 0, 0, A100_80, "7g.80gb", 1000, 80.0),
    (RequestKind.MIG, 0, 0, 0, 0, "1g.10gb+me", 143, 10.0),
    # an unreadable profile counts as a whole GPU, never as nothing
    (RequestKind.MIG, 0, 0, 0, A100_80, "8g.80gb", 1000, 80.0),
]


@pytest.mark.parametrize(
    ("kind", "count", "milli", "memory", "gpu_memory", "profile", "units", "gib"), CASES
)
def test_allocation_size(
    kind: RequestKind,
    count: int,
    milli: int,
    memory: int,
    gpu_memory: int,
    profile: str,
    units: int,
    gib: float,
) -> None:
    size = allocation_size(
        kind,
        gpu_count=count,
        milli_per_gpu=milli,
        memory_mib_per_gpu=memory,
        gpu_memory_mib=gpu_memory,
        mig_profile=profile,
    )
    assert size == AllocationSize(units, pytest.approx(gib))
    assert size.units == units / 1000


def test_a_mig_slice_is_its_compute_slices_over_seven() -> None:
    assert parse_mig_profile("2g.20gb") == MigProfile(2, 20)
    assert parse_mig_profile("2g.20gb+me") == MigProfile(2, 20)
    assert MigProfile(2, 20).milli_units == 286  # 2/7, rounded up


@pytest.mark.parametrize("profile", ["", "8g.80gb", "0g.10gb", "1g", "1c.2g.20gb", "1g.0gb", "x"])
def test_unreadable_mig_profiles_are_not_profiles(profile: str) -> None:
    assert parse_mig_profile(profile) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpu_count": -1, "milli_per_gpu": 1000}, "gpu_count"),
        ({"gpu_count": 1, "milli_per_gpu": -5}, "milli_per_gpu"),
        ({"gpu_count": 1, "milli_per_gpu": 1500}, "milli_per_gpu"),
        ({"gpu_count": 1, "memory_mib_per_gpu": -1}, "memory_mib_per_gpu"),
        ({"gpu_count": 1, "gpu_memory_mib": -1}, "gpu_memory_mib"),
    ],
)
def test_bad_values_name_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(UnitsError, match=f"^{field}"):
        allocation_size(RequestKind.SHARE, **kwargs)
