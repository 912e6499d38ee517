"""GPU-hours cut at the simulated clock's hour marks: each piece in its hour, none lost."""

from __future__ import annotations

import pytest

from gpupool.sim.demo.hourly import HourlyGpuHours, pieces


def test_an_interval_is_cut_at_each_hour_mark() -> None:
    assert list(pieces(1800.0, 9000.0)) == [(0, 1800.0), (1, 3600.0), (2, 1800.0)]
    assert list(pieces(3600.0, 3600.0)) == []


def test_closed_and_open_intervals_add_up_per_hour_and_team() -> None:
    hourly = HourlyGpuHours()
    hourly.add("vision", 2.0, 0.0, 5400.0)  # two GPUs for 1.5 h
    hours = hourly.with_open([("nlp", 0.5, 3600.0)], now=7200.0)  # half a GPU, 1 h so far
    assert hours == {0: {"vision": 2.0}, 1: {"vision": 1.0, "nlp": 0.5}}
    assert hourly.closed == {0: {"vision": 2.0}, 1: {"vision": 1.0}}  # the open one not kept
    total = sum(value for teams in hours.values() for value in teams.values())
    assert total == pytest.approx(2.0 * 1.5 + 0.5 * 1.0)
