"""GPU-hours per team per simulated hour: what the demo's cost chart draws.

The embedded cluster's clock counts seconds from 0 and has no calendar; the demo's dashboard
draws GPU-hours over time from buckets, as it does from the store's days. So every interval a
pod held GPUs is cut at the hour marks of the simulated clock and each piece added to its hour:
:class:`HourlyGpuHours` keeps the closed intervals, and :meth:`HourlyGpuHours.with_open` adds
those of the pods still running, up to now, without keeping them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from gpupool.governance.accounting import SECONDS_PER_HOUR


def pieces(start: float, end: float) -> Iterator[tuple[int, float]]:
    """(hour index, seconds) of ``[start, end)`` cut at the hour marks."""
    at = start
    while at < end:
        hour = math.floor(at / SECONDS_PER_HOUR)
        upto = min(end, (hour + 1) * SECONDS_PER_HOUR)
        yield hour, upto - at
        at = upto


class HourlyGpuHours:
    """GPU-hours per hour index and team, from the intervals pods held GPUs."""

    def __init__(self) -> None:
        self.closed: dict[int, dict[str, float]] = {}

    def add(self, team: str, gpus: float, start: float, end: float) -> None:
        """``team`` held ``gpus`` GPUs from ``start`` to ``end`` (seconds)."""
        _add(self.closed, team, gpus, start, end)

    def with_open(
        self, running: Iterable[tuple[str, float, float]], now: float
    ) -> dict[int, dict[str, float]]:
        """The closed hours plus each running (team, GPUs, start) up to ``now``."""
        hours = {hour: dict(teams) for hour, teams in self.closed.items()}
        for team, gpus, start in running:
            _add(hours, team, gpus, start, now)
        return hours


def _add(
    hours: dict[int, dict[str, float]], team: str, gpus: float, start: float, end: float
) -> None:
    for hour, seconds in pieces(start, end):
        teams = hours.setdefault(hour, {})
        teams[team] = teams.get(team, 0.0) + gpus * seconds / SECONDS_PER_HOUR
