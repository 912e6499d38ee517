"""Bursty usage of working pods, and what the agent's sampling and publication make of it."""

from __future__ import annotations

import itertools
import random

import pytest

from gpupool.sim.dynamic.usage_model import (
    KINDS,
    PUBLISH_PERIOD,
    AgentView,
    Phase,
    Timeline,
    UsageModel,
    phases,
)

IDLE_PERIOD = 600.0  # the simulated pool's


def _timeline(steps: list[Phase], work_end: float = 10_000.0) -> Timeline:
    return Timeline(0.0, work_end, itertools.chain(steps, itertools.repeat((1e6, 0, 0, 1000))))


def _quiet_phases(kind: str, seeds: range, count: int = 200) -> list[Phase]:
    """The phases after loading with SM 0, ``count`` per pod, over pods seeded ``seeds``."""
    found = []
    for seed in seeds:
        drawn = list(itertools.islice(phases(kind, random.Random(seed), 7200.0), 4 + count))
        found += [phase for phase in drawn[4:] if phase[1] == 0]
    return found


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="mix"):
        UsageModel(mix=(0.5, 0.6, 0.0))
    with pytest.raises(ValueError, match="mix"):
        UsageModel(mix=(0.5, 0.5))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ramp"):
        UsageModel(ramp=-1.0)


def test_kinds_by_share() -> None:
    model = UsageModel(mix=(0.6, 0.25, 0.15))
    assert [model.kind(d) for d in (0.0, 0.59, 0.6, 0.84, 0.85, 0.999)] == [
        "training",
        "training",
        "inference",
        "inference",
        "notebook",
        "notebook",
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_every_pod_loads_first_memory_busy_at_zero_sm(kind: str) -> None:
    loading = list(itertools.islice(phases(kind, random.Random(7), 7200.0), 4))
    assert all(sm == 0 and 10 <= busy <= 40 for _, sm, busy, _ in loading)
    held = [memory for *_, memory in loading]
    assert held == sorted(held)
    assert held[0] < held[-1]
    assert 4096 <= held[-1] <= 40960


def test_quiet_phases_shorter_and_longer_than_the_idle_period_with_and_without_memory() -> None:
    for kind in KINDS:
        quiet = _quiet_phases(kind, range(40))
        lengths = [seconds for seconds, *_ in quiet]
        assert min(lengths) < IDLE_PERIOD < max(lengths), kind
        assert any(busy == 0 for _, _, busy, _ in quiet), kind  # nothing moving
    training = _quiet_phases("training", range(40))
    moving = [p for p in training if p[2] > 0]  # checkpoints copied or streamed
    assert moving
    assert any(seconds > IDLE_PERIOD for seconds, *_ in moving)


@pytest.mark.parametrize("kind", ["inference", "notebook"])
def test_bursty_pods_start_with_short_quiet_phases_unless_the_ramp_is_off(kind: str) -> None:
    def first_quiet(ramp: float, seed: int) -> float:
        drawn = phases(kind, random.Random(seed), ramp)
        return next(s for s, sm, busy, _ in itertools.islice(drawn, 4, None) if sm == busy == 0)

    assert all(first_quiet(7200.0, seed) <= 90.0 for seed in range(50))  # 60 s x U(0.5, 1.5)
    assert max(first_quiet(0.0, seed) for seed in range(50)) > IDLE_PERIOD


def test_window_takes_the_highest_level_in_progress_and_idles_after_work() -> None:
    timeline = _timeline([(30, 0, 0, 1000), (10, 80, 40, 2000), (500, 0, 5, 2000)], work_end=500)
    burst = timeline.window(0, 55)
    assert (burst.sm_percent, burst.memory_busy_percent, burst.memory_mib) == (80, 40, 2000)
    assert burst.sm_until == 40  # the burst's end
    quiet = timeline.window(45, 100)
    assert (quiet.sm_percent, quiet.memory_busy_percent, quiet.sm_until) == (0, 5, None)
    after = timeline.window(700, 800)  # work over: held at 0 % with nothing moving
    assert (after.sm_percent, after.memory_busy_percent, after.memory_mib) == (0, 0, 2000)


def test_the_period_peak_sees_a_burst_the_latest_sample_misses() -> None:
    steps: list[Phase] = [(30, 0, 0, 1000), (10, 80, 40, 1000), (500, 0, 0, 1000)]
    peak = AgentView(_timeline(steps), sample_phase=0.0, publish_phase=59.0)
    latest = AgentView(_timeline(steps), sample_phase=0.0, publish_phase=59.0, publication="latest")
    assert list(peak.due(58.0)) == []  # nothing written yet
    (point,) = peak.due(59.0)
    assert (point.time, point.sm_percent, point.memory_busy_percent) == (55.0, 80, 40)
    assert peak.last_active == 40.0  # the first sample after the burst ended
    (blind,) = latest.due(59.0)
    assert (blind.sm_percent, blind.memory_busy_percent) == (0, 0)
    (second,) = peak.due(59.0 + PUBLISH_PERIOD)  # one publication per period
    assert (second.time, second.sm_percent) == (115.0, 0)
    assert peak.next_publication == 59.0 + 2 * PUBLISH_PERIOD
    assert len(list(peak.due(59.0 + 10 * PUBLISH_PERIOD))) == 9  # the ones due since
