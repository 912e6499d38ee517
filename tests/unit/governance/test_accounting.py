"""Accounting: exact clipping to the window, groups and partitions that add up, efficiency."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.governance.accounting import (
    AccountingError,
    GroupBy,
    Interval,
    Sample,
    Usage,
    Window,
    account,
    ended_at,
    total,
)

H = 3600.0


def alloc(
    uid: str,
    start: float,
    end: float | None,
    units: float = 1.0,
    memory: float = 80.0,
    *,
    ns: str = "ml",
    queue: str = "team-a",
    pool: str = "a100",
) -> Interval:
    return Interval(uid, ns, f"pod-{uid}", queue, pool, units, memory, start, end)


@pytest.mark.parametrize(
    ("interval", "window", "gpu_hours"),
    [
        (alloc("a", 0, 2 * H, units=2), Window(0, 10 * H), 4.0),  # inside
        (alloc("a", 0, 2 * H, units=2), Window(H, 10 * H), 2.0),  # clipped at the start
        (alloc("a", 0, 2 * H, units=2), Window(0, 0.5 * H), 1.0),  # clipped at the end
        (alloc("a", 0, None, units=0.5), Window(H, 5 * H), 2.0),  # open: runs to the window end
        (alloc("a", 0, 2 * H), Window(2 * H, 3 * H), 0.0),  # [start, end): ends where it starts
        (alloc("a", 3 * H, 4 * H), Window(0, 3 * H), 0.0),  # after the window
        (alloc("a", H, H), Window(0, 3 * H), 0.0),  # zero length
        (alloc("a", 0, 90, units=1 / 7), Window(0, H), 90 / 7 / H),  # a MIG slice for 90 s
    ],
)
def test_clipping_to_the_window(interval: Interval, window: Window, gpu_hours: float) -> None:
    usage = total([interval], window)
    assert usage.gpu_hours == pytest.approx(gpu_hours, abs=1e-12)
    assert usage.memory_gib_hours == pytest.approx(gpu_hours / interval.units * 80, abs=1e-9)
    assert usage.pods == (1 if gpu_hours > 0 else 0)


def test_groups_by_queue_namespace_pool_and_pod() -> None:
    intervals = [
        alloc("a", 0, H, 1, ns="ml", queue="team-a", pool="a100"),
        alloc("b", 0, 2 * H, 0.5, ns="ml", queue="team-b", pool="h100"),
        alloc("c", 0, 4 * H, 1 / 7, ns="web", queue="team-b", pool="a100"),
    ]
    window = Window(0, 10 * H)

    def hours(by: GroupBy) -> dict[str, float]:
        return {u.group: round(u.gpu_hours, 9) for u in account(intervals, window, by)}

    assert hours(GroupBy.QUEUE) == {"team-a": 1.0, "team-b": round(1 + 4 / 7, 9)}
    assert hours(GroupBy.NAMESPACE) == {"ml": 2.0, "web": round(4 / 7, 9)}
    assert hours(GroupBy.POOL) == {"a100": round(1 + 4 / 7, 9), "h100": 1.0}
    assert hours(GroupBy.POD) == {"ml/pod-a": 1.0, "ml/pod-b": 1.0, "web/pod-c": round(4 / 7, 9)}
    assert [u.pods for u in account(intervals, window, GroupBy.QUEUE)] == [1, 2]


def test_efficiency_is_used_over_requested_where_samples_cover() -> None:
    # Two GPUs for 4 h; samples from hour 1: 100% SM (of 200 possible) for 2 h, then 200%.
    pod = alloc("a", 0, 4 * H, units=2, memory=160)
    samples = [
        Sample("a", 1 * H, sm_percent=100, memory_used_gib=40),
        Sample("a", 3 * H, sm_percent=200, memory_used_gib=160),
        Sample("unknown-pod", 0, sm_percent=100, memory_used_gib=1),
    ]
    usage = total([pod], Window(0, 10 * H), samples)
    assert usage.gpu_hours == pytest.approx(8.0)
    assert usage.sampled_gpu_hours == pytest.approx(6.0)  # hours 1..4 of 2 GPUs
    assert usage.used_gpu_hours == pytest.approx(2 * 1.0 + 1 * 2.0)
    assert usage.gpu_efficiency == pytest.approx(4 / 6)
    assert usage.sampled_memory_gib_hours == pytest.approx(3 * 160)
    assert usage.used_memory_gib_hours == pytest.approx(2 * 40 + 1 * 160)
    assert usage.memory_efficiency == pytest.approx(240 / 480)
    # clipped to the window too
    clipped = total([pod], Window(2 * H, 3.5 * H), samples)
    assert clipped.used_gpu_hours == pytest.approx(1.0 * 1 + 2.0 * 0.5)
    assert clipped.sampled_gpu_hours == pytest.approx(3.0)


def test_no_samples_means_no_efficiency() -> None:
    usage = total([alloc("a", 0, H)], Window(0, H))
    assert usage.gpu_efficiency is None
    assert usage.memory_efficiency is None
    assert account([], Window(0, H), GroupBy.QUEUE) == ()
    assert total([], Window(0, H)) == Usage("total", 0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: alloc("a", 10, 5), "end"),
        (lambda: alloc("a", 0, 5, units=-1), "units"),
        (lambda: alloc("a", 0, 5, memory=math.nan), "memory_gib"),
        (lambda: alloc("", 0, 5), "pod_uid"),
        (lambda: Sample("a", 0, -1, 0), "sm_percent"),
        (lambda: Window(5, 1), "window"),
    ],
)
def test_bad_values_name_the_field(build: object, field: str) -> None:
    with pytest.raises(AccountingError, match=f"^{field}:"):
        build()  # type: ignore[operator]


times = st.integers(min_value=0, max_value=1000).map(float)
intervals_st = st.lists(
    st.builds(
        lambda i, start, length, units, memory, queue, pool, open_: Interval(
            f"uid-{i}", f"ns-{queue}", f"p{i}", f"q{queue}", f"pool{pool}", units, memory,
            start, None if open_ else start + length,
        ),
        st.integers(0, 10_000),
        times,
        st.integers(0, 500).map(float),
        st.sampled_from([0.0, 1 / 7, 0.25, 0.5, 1.0, 2.0, 8.0]),
        st.sampled_from([0.0, 10.0, 40.0, 80.0]),
        st.integers(0, 3),
        st.integers(0, 2),
        st.booleans(),
    ),
    max_size=30,
    unique_by=lambda i: i.pod_uid,
)  # fmt: skip
samples_st = st.lists(
    st.builds(
        Sample,
        st.integers(0, 10_000).map(lambda i: f"uid-{i}"),
        times,
        st.floats(0, 800),
        st.floats(0, 640),
    ),
    max_size=30,
)
FIELDS = ("gpu_hours", "memory_gib_hours", "sampled_gpu_hours", "used_gpu_hours",
          "sampled_memory_gib_hours", "used_memory_gib_hours")  # fmt: skip


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=150, deadline=None)
@given(intervals_st, samples_st, st.lists(times, min_size=0, max_size=8, unique=True))
def test_any_partition_of_the_window_adds_up_to_the_whole(
    intervals: list[Interval], samples: list[Sample], cuts: list[float]
) -> None:
    lo, hi = 100.0, 1200.0
    edges = [lo, *sorted(c for c in cuts if lo < c < hi), hi]
    whole = total(intervals, Window(lo, hi), samples)
    parts = [total(intervals, Window(a, b), samples) for a, b in itertools.pairwise(edges)]
    for name in FIELDS:
        assert close(math.fsum(getattr(p, name) for p in parts), getattr(whole, name)), name


@settings(max_examples=150, deadline=None)
@given(intervals_st, samples_st, st.sampled_from(list(GroupBy)))
def test_groups_add_up_to_the_total(
    intervals: list[Interval], samples: list[Sample], by: GroupBy
) -> None:
    window = Window(0.0, 1500.0)
    whole = total(intervals, window, samples)
    groups = account(intervals, window, by, samples)
    assert sum(g.pods for g in groups) == whole.pods
    for name in FIELDS:
        assert close(math.fsum(getattr(g, name) for g in groups), getattr(whole, name)), name
    # and the total is the plain integral, computed independently
    expected = (
        math.fsum(
            i.units * max(0.0, min(1500.0 if i.end is None else i.end, 1500.0) - max(i.start, 0.0))
            for i in intervals
        )
        / 3600
    )
    assert close(whole.gpu_hours, expected)


def test_an_allocation_without_a_queue_is_in_a_named_group() -> None:
    usage = account([alloc("a", 0, H, queue="")], Window(0, H), GroupBy.QUEUE)
    assert [u.group for u in usage] == ["(none)"]


def test_an_allocation_that_ended_with_no_leader_ends_at_the_pods_end_never_now() -> None:
    assert ended_at(100.0, finished_at=500.0, last_seen=450.0) == 500.0  # the pod's own time
    assert ended_at(100.0, finished_at=None, last_seen=450.0) == 450.0  # gone: last seen alive
    assert ended_at(100.0, finished_at=None, last_seen=None) == 100.0  # nothing known: nothing
    assert ended_at(100.0, finished_at=50.0, last_seen=None) == 100.0  # never before its start
