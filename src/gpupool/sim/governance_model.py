"""Governance in the dynamic simulation: pods that go idle or overrun, and the rules that act.

The simulator's pods do their work and end. Real clusters also have pods that *stop working but
keep their GPUs* (a notebook left open, a job waiting on nothing) and pods that run far past any
reasonable share. This model adds both, as stated shares of the arrivals:

* an **idle** pod does its work (the drawn duration) and then holds its GPUs at 0 % SM for an
  exponentially distributed linger (mean :attr:`GovernanceModel.idle_linger_mean`);
* an **overrun** pod holds its GPUs for 1.5 to 3 times the pool's ``maxShareDuration``.

Every scheduling tick the *same pure rules the live controller runs*
(:func:`gpupool.governance.rules.decide`) look at each running pod with its simulated usage,
sampled every :attr:`GovernanceModel.sample_period` seconds as the node agent does: warn, wait
the grace, reclaim. With ``enforce`` off the rules are not applied and only the idle time is
measured, which is the baseline.

What is measured, over the simulation's metric window:

* ``idle_gpu_hours``: GPU-hours held by pods while idle (what governance can give back);
* ``idle_gpu_hours_reclaimed``: the part of it given back by reclaims;
* ``false_reclaims``: pods reclaimed for idleness while still working (must be 0);
* ``gpu_hours_returned_to_waiting_pods``: GPU-hours freed by reclaims and duration evictions at
  moments when pods were waiting (capacity handed to the queue rather than to nobody);
* ``accounting_error_pct``: :mod:`gpupool.governance.accounting`'s total over the allocations
  this model saw start and end, against the simulator's own integral of allocated units; a gap
  means a start or an end was missed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpupool.governance.accounting import Interval, Window, total
from gpupool.governance.decisions import ClearWarning, Reclaim, Rule, Warn
from gpupool.governance.rules import (
    CleanupLimits,
    Limits,
    PodFacts,
    PodWarning,
    UsagePoint,
    decide,
)
from gpupool.policy.units import MILLI_UNITS

ACTIVE_SM_PERCENT = 60.0
"""SM utilisation of a working pod in the model (anything above the threshold would do)."""

SIM_LIMITS = Limits(
    idle_threshold_percent=5.0, idle_period=600.0, grace=300.0, max_share_duration=6 * 3600.0
)
"""The pool settings the simulation applies: idle under 5 % for 10 min, 5 min grace, 6 h."""


@dataclass(frozen=True, slots=True)
class GovernanceModel:
    """Which pods misbehave and whether governance acts.

    Attributes:
        idle_share: Fraction of arrivals that linger idle after their work.
        overrun_share: Fraction of arrivals that hold their share past ``maxShareDuration``.
        enforce: Apply the rules (reclaim); off: measure only.
        limits: The pool's governance settings.
        idle_linger_mean: Mean idle linger, seconds.
        sample_period: Seconds between usage samples (the node agent publishes every 60 s).
    """

    idle_share: float = 0.0
    overrun_share: float = 0.0
    enforce: bool = True
    limits: Limits = SIM_LIMITS
    idle_linger_mean: float = 3600.0
    sample_period: float = 60.0

    def __post_init__(self) -> None:
        for name in ("idle_share", "overrun_share"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{name}: must be in [0, 1], got {value}")
        if self.idle_share + self.overrun_share > 1:
            raise ValueError("idle_share: idle_share + overrun_share must be at most 1")
        if self.overrun_share and self.limits.max_share_duration is None:
            raise ValueError("overrun_share: needs a maxShareDuration")


@dataclass
class _Run:
    start: float
    units: int
    idle_from: float | None
    planned_end: float
    warning: PodWarning | None = None


@dataclass
class _Totals:
    idle_seconds_units: float = 0.0
    reclaimed_seconds_units: float = 0.0
    returned_seconds_units: float = 0.0
    false_reclaims: int = 0
    idle_reclaims: int = 0
    duration_evictions: int = 0
    warnings: int = 0


@dataclass
class GovernanceSim:
    """The model's state across one simulation run.

    Args:
        model: The settings.
        rng: Draws which pods misbehave and how (its own stream: the rest of the run is
            unchanged by turning governance on).
        window: The metric window ``(start, end)``, seconds.
    """

    model: GovernanceModel
    rng: np.random.Generator
    window: tuple[float, float]
    _work: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    _runs: dict[str, _Run] = field(default_factory=dict)
    _intervals: list[Interval] = field(default_factory=list)
    _totals: _Totals = field(default_factory=_Totals)
    _next_check: float = 0.0

    def hold_time(self, name: str, work: float) -> float:
        """How long pod ``name`` holds its GPUs once started (drawn once, at arrival)."""
        draw = float(self.rng.random())
        model = self.model
        if draw < model.idle_share:
            linger = float(self.rng.exponential(model.idle_linger_mean))
            self._work[name] = (work, linger)
            return work + linger
        if draw < model.idle_share + model.overrun_share:
            limit = model.limits.max_share_duration
            assert limit is not None  # checked by GovernanceModel
            hold = limit * float(self.rng.uniform(1.5, 3.0))
            self._work[name] = (hold, None)
            return hold
        self._work[name] = (work, None)
        return work

    def started(self, name: str, now: float, units: int) -> None:
        """Pod ``name`` was given ``units`` milli-units at ``now``."""
        work, linger = self._work[name]
        idle_from = now + work if linger is not None else None
        planned = now + work + (linger or 0.0)
        self._runs[name] = _Run(now, units, idle_from, planned)

    def ended(self, name: str, now: float) -> None:
        """Pod ``name`` released its GPUs at ``now`` (completed, preempted or evicted)."""
        run = self._runs.pop(name, None)
        if run is None:
            return
        self._intervals.append(
            Interval(name, "", name, "", "", run.units / MILLI_UNITS, 0.0, run.start, now)
        )
        if run.idle_from is not None and now > run.idle_from:
            self._totals.idle_seconds_units += run.units * self._clipped(run.idle_from, now)

    def _clipped(self, start: float, end: float) -> float:
        low, high = self.window
        return max(0.0, min(end, high) - max(start, low))

    def _usage(self, run: _Run, now: float) -> tuple[UsagePoint, ...]:
        """The samples the node agent would have published for this run up to ``now``."""
        period = self.model.sample_period
        last = run.start + math.floor((now - run.start) / period) * period
        if run.idle_from is None or last < run.idle_from:
            return (UsagePoint(last, ACTIVE_SM_PERCENT),)
        first_idle = run.start + math.ceil((run.idle_from - run.start) / period) * period
        before = max(run.start, first_idle - period)
        points = [UsagePoint(first_idle, 0.0), UsagePoint(last, 0.0)]
        if before < first_idle:
            points.insert(0, UsagePoint(before, ACTIVE_SM_PERCENT))
        return tuple(p for i, p in enumerate(points) if i == 0 or p.time > points[i - 1].time)

    def tick(self, now: float, waiting: int) -> list[str]:
        """Apply the rules to every running pod (once per sample period); the pods to evict."""
        if not self.model.enforce or now < self._next_check:
            return []
        self._next_check = now + self.model.sample_period  # the usage changes no faster
        evict = []
        cleanup = CleanupLimits()
        for name, run in self._runs.items():
            facts = PodFacts(
                uid=name,
                allocated_at=run.start,
                usage=self._usage(run, now),
                warning=run.warning,
            )
            decision = decide(facts, self.model.limits, cleanup, now)
            if isinstance(decision, Warn):
                run.warning = PodWarning(decision.rule, now)
                self._totals.warnings += 1
            elif isinstance(decision, ClearWarning):
                run.warning = None
            elif isinstance(decision, Reclaim):
                evict.append(name)
                self._count(run, decision.rule, now, waiting)
        return evict

    def _count(self, run: _Run, rule: Rule, now: float, waiting: int) -> None:
        totals = self._totals
        freed = run.units * self._clipped(now, run.planned_end)
        if rule is Rule.IDLE:
            totals.idle_reclaims += 1
            if run.idle_from is None or now < run.idle_from:
                totals.false_reclaims += 1
            else:
                totals.reclaimed_seconds_units += freed
        else:
            totals.duration_evictions += 1
        if waiting:
            totals.returned_seconds_units += freed

    def report(self, end: float, allocated_gpu_hours: float) -> dict[str, float | int | None]:
        """The governance metrics; ``allocated_gpu_hours``: the simulator's own integral."""
        for name in list(self._runs):
            self.ended(name, end)
        totals = self._totals
        hours = MILLI_UNITS * 3600.0
        low, high = self.window
        accounted = total(self._intervals, Window(low, high)).gpu_hours
        error = (
            abs(accounted - allocated_gpu_hours) / allocated_gpu_hours * 100.0
            if allocated_gpu_hours > 0
            else None
        )
        return {
            "idle_share": self.model.idle_share,
            "overrun_share": self.model.overrun_share,
            "governance": self.model.enforce,
            "idle_gpu_hours": totals.idle_seconds_units / hours,
            "idle_gpu_hours_reclaimed": totals.reclaimed_seconds_units / hours,
            "false_reclaims": totals.false_reclaims,
            "idle_reclaims": totals.idle_reclaims,
            "duration_evictions": totals.duration_evictions,
            "governance_warnings": totals.warnings,
            "gpu_hours_returned_to_waiting_pods": totals.returned_seconds_units / hours,
            "accounting_gpu_hours": accounted,
            "accounting_error_pct": error,
        }
