"""The contention model: readings and caps in, a level and per-share slowdowns out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.core.contention import (
    ContentionLevel,
    GpuReadings,
    ShareOnGpu,
    assess,
    contention_share_by_class,
    level_of,
)

NONE, LOW, HIGH = ContentionLevel.NONE, ContentionLevel.LOW, ContentionLevel.HIGH
POWER_CAP, HW_THERMAL, IDLE = 0x4, 0x40, 0x1


@pytest.mark.parametrize(
    ("case", "readings", "shares", "level", "slowdown"),
    [
        (
            "one exclusive pod at 100% SM is busy, not contended",
            GpuReadings(100, 95),
            [ShareOnGpu("a", 100, 100)],
            NONE,
            {"a": 1.0},
        ),
        (
            "two half shares each getting their half: no slowdown",
            GpuReadings(100),
            [ShareOnGpu("a", 50, 50), ShareOnGpu("b", 50, 50)],
            NONE,
            {"a": 1.0, "b": 1.0},
        ),
        (
            "a share promised 50% held at 20% on a saturated GPU is 2.5x slower",
            GpuReadings(100),
            [ShareOnGpu("a", 50, 20), ShareOnGpu("b", 100, 80)],
            HIGH,
            {"a": 2.5, "b": 1.25},
        ),
        (
            "the same split on a GPU with idle cycles is no contention",
            GpuReadings(60),
            [ShareOnGpu("a", 50, 20), ShareOnGpu("b", 100, 40)],
            NONE,
            {"a": 1.0, "b": 1.0},
        ),
        (
            "no per-process samples: three uncapped shares time-slice, 3x each",
            GpuReadings(100),
            [ShareOnGpu("a"), ShareOnGpu("b"), ShareOnGpu("c")],
            HIGH,
            {"a": 3.0, "b": 3.0, "c": 3.0},
        ),
        (
            "a share not running is not slowed, and one running share alone is not contended",
            GpuReadings(100),
            [ShareOnGpu("a", 50, 0), ShareOnGpu("b", 50, 100)],
            NONE,
            {"a": 1.0, "b": 1.0},
        ),
        (
            "power capped from 1980 to 1320 MHz: every share 1.5x slower",
            GpuReadings(40, throttle_reasons=POWER_CAP, sm_clock_mhz=1320, max_sm_clock_mhz=1980),
            [ShareOnGpu("a", 50, 40)],
            LOW,
            {"a": 1.5},
        ),
        (
            "a thermal throttle with no clocks to size it is low, never none",
            GpuReadings(10, throttle_reasons=HW_THERMAL),
            [ShareOnGpu("a", 50, 10)],
            LOW,
            {"a": 1.0},
        ),
        (
            "the idle clock reason is not a slowdown",
            GpuReadings(0, throttle_reasons=IDLE, sm_clock_mhz=345, max_sm_clock_mhz=1980),
            [ShareOnGpu("a", 50, 0)],
            NONE,
            {"a": 1.0},
        ),
        (
            "a saturated memory bus under two running shares is high",
            GpuReadings(50, memory_busy_percent=100),
            [ShareOnGpu("a", 50, 25), ShareOnGpu("b", 50, 25)],
            HIGH,
            {"a": 1.0, "b": 1.0},
        ),
        (
            "a saturated memory bus under one share is that share's own business",
            GpuReadings(50, memory_busy_percent=100),
            [ShareOnGpu("a", 50, 50), ShareOnGpu("b", 50, 0)],
            NONE,
            {"a": 1.0, "b": 1.0},
        ),
        (
            "a share measured near 0% is capped at 16x, not 100x",
            GpuReadings(100),
            [ShareOnGpu("a", 100, 1), ShareOnGpu("b", 100, 99)],
            HIGH,
            {"a": 16.0, "b": 1.01},
        ),
    ],
)
def test_assess_gives_the_level_and_slowdowns_the_readings_call_for(
    case: str,
    readings: GpuReadings,
    shares: list[ShareOnGpu],
    level: ContentionLevel,
    slowdown: dict[str, float],
) -> None:
    result = assess(readings, shares)
    assert result.level is level, (case, result)
    assert dict(result.slowdown) == pytest.approx(slowdown), case
    assert (result.reasons == ()) is (level is NONE), (case, result.reasons)


def test_reasons_name_what_contends() -> None:
    result = assess(
        GpuReadings(100, 97, throttle_reasons=POWER_CAP | HW_THERMAL),
        [ShareOnGpu("a", 50, 20), ShareOnGpu("b", 50, 80)],
    )
    text = " | ".join(result.reasons)
    assert "SM saturated (100%) with 2 running shares: up to 2.5x slower" in text
    assert "throttled: power cap, hardware thermal slowdown" in text
    assert "memory bandwidth saturated (97%) with 2 running shares" in text


def test_score_is_the_time_the_worst_hit_share_loses() -> None:
    result = assess(GpuReadings(100), [ShareOnGpu("a", 100, 25), ShareOnGpu("b", 100, 75)])
    assert result.score == pytest.approx(0.75)  # a: 4x slower, loses three quarters


@pytest.mark.parametrize(
    ("score", "level"), [(0.0, NONE), (0.199, NONE), (0.2, LOW), (0.499, LOW), (0.5, HIGH)]
)
def test_level_thresholds(score: float, level: ContentionLevel) -> None:
    assert level_of(score) is level


def test_share_of_contention_counts_only_shares_on_contended_gpus() -> None:
    placements = [
        ("inference", 0.8),
        ("training", 0.8),
        ("training", 0.3),
        ("training", 0.0),  # on a quiet GPU: not part of the contention
        ("dev", 0.1),
    ]
    assert contention_share_by_class(placements) == {
        "inference": pytest.approx(1 / 3),
        "training": pytest.approx(2 / 3),
    }
    assert contention_share_by_class(placements, contended_at=0.5) == {
        "inference": 0.5,
        "training": 0.5,
    }
    assert contention_share_by_class([("dev", 0.1)]) == {}


percent = st.floats(0, 100, allow_nan=False)


@given(
    readings=st.builds(
        GpuReadings,
        percent,
        percent,
        st.integers(0, 0x1FF),
        st.integers(0, 2000),
        st.integers(0, 2000),
    ),
    shares=st.lists(
        st.builds(ShareOnGpu, st.text(min_size=1, max_size=4), percent, st.none() | percent),
        max_size=6,
        unique_by=lambda share: share.key,
    ),
)
def test_any_readings_give_a_bounded_score_and_slowdowns_no_faster_than_alone(
    readings: GpuReadings, shares: list[ShareOnGpu]
) -> None:
    result = assess(readings, shares)
    assert 0.0 <= result.score <= 1.0
    assert result.level is level_of(result.score)
    assert set(result.slowdown) == {share.key for share in shares}
    assert all(1.0 <= ratio <= 16.0 * 16.0 for ratio in result.slowdown.values())
    assert (result.level is NONE) or result.reasons  # a level is never given without a why
