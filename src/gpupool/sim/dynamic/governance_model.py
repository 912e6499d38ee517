"""Governance in the dynamic simulation: pods that go idle or overrun, and the rules that act.

The simulator's pods do their work and end. Real clusters also have pods that *stop working but
keep their GPUs* (a notebook left open, a job waiting on nothing) and pods that run far past any
reasonable share. This model adds both, as stated shares of the arrivals:

* an **idle** pod does its work (the drawn duration) and then holds its GPUs at 0 % SM with
  nothing moving for an exponentially distributed linger (mean
  :attr:`GovernanceModel.idle_linger_mean`);
* an **overrun** pod holds its GPUs for 1.5 to 3 times the pool's ``maxShareDuration``.

While it works, every pod's usage is bursty (:mod:`gpupool.sim.dynamic.usage_model`: training
with data stalls and checkpoints, inference with gaps between requests, notebooks with think
time), and the rules see it as the node agent publishes it: one sample a minute, the highest of the
5-second samples since the last one, at the agent's own phase. Every
:attr:`GovernanceModel.check_period` seconds the *same pure rules the live controller runs*
(:func:`gpupool.governance.rules.decide`, through :class:`~gpupool.sim.governing.WarnedPods`,
as in the demo) look at each running pod: warn, wait the grace,
reclaim. With ``enforce`` off the rules are not applied and only the idle time is measured,
which is the baseline. :data:`IDLE_RULES` names the idle rules compared (the agent's publication
and the pool's limits together).

What is measured, over the simulation's metric window:

* ``idle_gpu_hours``: GPU-hours held by pods while idle (what governance can give back);
* ``idle_gpu_hours_beyond_grace``: the part of it past the pool's idle period plus grace (what
  any rule that warns after the idle period and waits the grace could give back), and
  ``reclaimed_beyond_grace_pct``: the share of that the reclaims gave back;
* ``idle_gpu_hours_reclaimed``: GPU-hours given back by idle reclaims (to when the pod would have
  ended by itself);
* ``false_reclaims``: pods reclaimed for idleness while they still had work to do (must be 0),
  and ``false_reclaims_by_kind``;
* ``gpu_hours_returned_to_waiting_pods``: GPU-hours freed by reclaims and duration evictions at
  moments when pods were waiting (capacity handed to the queue rather than to nobody);
* ``accounting_error_pct``: :mod:`gpupool.governance.accounting`'s total over the allocations
  this model saw start and end, against the simulator's own integral of allocated units; a gap
  means a start or an end was missed.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from gpupool.governance.accounting import Interval, Window, total
from gpupool.governance.decisions import Reclaim, Rule, Warn
from gpupool.governance.rules import Limits, PodFacts
from gpupool.governance.usage import UsageHistory
from gpupool.policy.units import MILLI_UNITS
from gpupool.sim.dynamic.usage_model import AgentView, Timeline, UsageModel, phases
from gpupool.sim.governing import WarnedPods

SIM_LIMITS = Limits(
    idle_threshold_percent=5.0, idle_period=600.0, grace=300.0, max_share_duration=6 * 3600.0
)
"""The pool settings the simulation applies: idle under 5 % for 10 min, 5 min grace, 6 h."""


@dataclass(frozen=True, slots=True)
class IdleRule:
    """One idle rule as a whole: what the agent publishes and what the pool's limits read.

    Attributes:
        publication: ``peak`` or ``latest`` (:mod:`gpupool.sim.dynamic.usage_model`).
        limits: The pool's governance settings with the rule's options.
    """

    publication: str
    limits: Limits


_NO_HISTORY = replace(SIM_LIMITS, quiet_history_factor=0.0, quiet_age_fraction=0.0)

IDLE_RULES = {
    "old": IdleRule("latest", replace(_NO_HISTORY, memory_busy_percent=None)),
    "memory": IdleRule("peak", _NO_HISTORY),
    "longest": IdleRule("peak", replace(SIM_LIMITS, quiet_age_fraction=0.0)),
    "history": IdleRule("peak", SIM_LIMITS),
}
"""The idle rules compared: ``old`` is the rule and agent before memory busy and the quiet-phase
history (the last sample's SM and memory held); ``memory`` adds the period's highest sample and
memory busy; ``longest`` adds the idle period learned from the longest quiet phase the pod
resumed from; ``history`` (the default everywhere) also gives a pod that resumed at least a
part of its age (:attr:`~gpupool.governance.rules.Limits.quiet_age_fraction`), since a bursty
pod's pauses grow faster than its longest one foretells (issue 30: an endpoint whose gaps grew
from 5 to 17 minutes between two of them was reclaimed under ``longest``)."""


@dataclass(frozen=True, slots=True)
class GovernanceModel:
    """Which pods misbehave, how pods use their GPUs and whether governance acts.

    Attributes:
        idle_share: Fraction of arrivals that linger idle after their work.
        overrun_share: Fraction of arrivals that hold their share past ``maxShareDuration``.
        enforce: Apply the rules (reclaim); off: measure only.
        rule: The idle rule, a key of :data:`IDLE_RULES`.
        idle_linger_mean: Mean idle linger, seconds.
        check_period: Seconds between two applications of the rules (the live controller's
            pass is 5 s; the simulator's scheduling tick is 20 s).
        usage: How working pods use their GPUs.
    """

    idle_share: float = 0.0
    overrun_share: float = 0.0
    enforce: bool = True
    rule: str = "history"
    idle_linger_mean: float = 3600.0
    check_period: float = 20.0
    usage: UsageModel = field(default_factory=UsageModel)

    def __post_init__(self) -> None:
        for name in ("idle_share", "overrun_share"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{name}: must be in [0, 1], got {value}")
        if self.idle_share + self.overrun_share > 1:
            raise ValueError("idle_share: idle_share + overrun_share must be at most 1")
        if self.rule not in IDLE_RULES:
            raise ValueError(f"rule: one of {', '.join(IDLE_RULES)}, got {self.rule!r}")
        if self.overrun_share and self.limits.max_share_duration is None:
            raise ValueError("overrun_share: needs a maxShareDuration")

    @property
    def limits(self) -> Limits:
        """The pool's governance settings under :attr:`rule`."""
        return IDLE_RULES[self.rule].limits


@dataclass(frozen=True, slots=True)
class _Plan:
    """A pod's behaviour, drawn at arrival (so every rule and restart sees the same pod)."""

    work: float
    linger: float | None
    kind: str
    seed: int


@dataclass
class _Run:
    start: float
    units: int
    plan: _Plan
    agent: AgentView
    usage: UsageHistory = field(default_factory=UsageHistory)
    reclaimed_at: float | None = None

    @property
    def idle_from(self) -> float | None:
        return self.start + self.plan.work if self.plan.linger is not None else None

    @property
    def planned_end(self) -> float:
        return self.start + self.plan.work + (self.plan.linger or 0.0)


@dataclass
class _Totals:
    idle_seconds_units: float = 0.0
    beyond_grace_seconds_units: float = 0.0
    reclaimed_seconds_units: float = 0.0
    returned_seconds_units: float = 0.0
    false_reclaims: Counter[str] = field(default_factory=Counter)
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
    _plans: dict[str, _Plan] = field(default_factory=dict)
    _runs: dict[str, _Run] = field(default_factory=dict)
    _intervals: list[Interval] = field(default_factory=list)
    _totals: _Totals = field(default_factory=_Totals)
    _next_check: float = 0.0
    _warned: WarnedPods = field(default_factory=WarnedPods)

    def hold_time(self, name: str, work: float) -> float:
        """How long pod ``name`` holds its GPUs once started (drawn once, at arrival)."""
        model = self.model
        draw, kind_draw = (float(x) for x in self.rng.random(2))
        kind = model.usage.kind(kind_draw)
        seed = int(self.rng.integers(2**63))
        linger = None
        if draw < model.idle_share:
            linger = float(self.rng.exponential(model.idle_linger_mean))
        elif draw < model.idle_share + model.overrun_share:
            limit = model.limits.max_share_duration
            assert limit is not None  # checked by GovernanceModel
            work = limit * float(self.rng.uniform(1.5, 3.0))
        plan = _Plan(work, linger, kind, seed)
        self._plans[name] = plan
        return work + (linger or 0.0)

    def started(self, name: str, now: float, units: int) -> None:
        """Pod ``name`` was given ``units`` milli-units at ``now``."""
        plan = self._plans[name]
        rng = random.Random(plan.seed)  # the same usage after a restart and under every rule
        sample_phase, publish_phase = rng.uniform(0.0, 5.0), rng.uniform(0.0, 60.0)
        timeline = Timeline(now, now + plan.work, phases(plan.kind, rng, self.model.usage.ramp))
        publication = IDLE_RULES[self.model.rule].publication
        agent = AgentView(timeline, sample_phase, publish_phase, publication)
        self._runs[name] = _Run(now, units, plan, agent)

    def ended(self, name: str, now: float) -> None:
        """Pod ``name`` released its GPUs at ``now`` (completed, preempted or evicted)."""
        run = self._runs.pop(name, None)
        self._warned.forget(name)
        if run is None:
            return
        self._intervals.append(
            Interval(name, "", name, "", "", run.units / MILLI_UNITS, 0.0, run.start, now)
        )
        idle_from = run.idle_from
        if idle_from is None:
            return
        totals = self._totals
        totals.idle_seconds_units += run.units * self._clipped(idle_from, now)
        held_until = run.planned_end if run.reclaimed_at is not None else now
        limits = self.model.limits
        allowed = idle_from + limits.idle_period + limits.grace
        totals.beyond_grace_seconds_units += run.units * self._clipped(allowed, held_until)
        if run.reclaimed_at is not None:
            given_back = self._clipped(max(run.reclaimed_at, allowed), run.planned_end)
            totals.reclaimed_seconds_units += run.units * given_back

    def _clipped(self, start: float, end: float) -> float:
        low, high = self.window
        return max(0.0, min(end, high) - max(start, low))

    def tick(self, now: float, waiting: int) -> list[str]:
        """Apply the rules to every running pod (once per check period); the pods to evict."""
        if not self.model.enforce or now < self._next_check:
            return []
        self._next_check = now + self.model.check_period
        limits = self.model.limits
        activity = limits.activity
        evict = []
        for name, run in self._runs.items():
            agent = run.agent
            if agent.next_publication <= now:
                for point in agent.due(now):
                    run.usage = run.usage.observe(point, activity)
            facts = PodFacts(
                uid=name,
                allocated_at=run.start,
                usage=run.usage,
                last_active=agent.last_active,
            )
            decision = self._warned.review(facts, limits, now)
            if isinstance(decision, Warn):
                self._totals.warnings += 1
            elif isinstance(decision, Reclaim):
                evict.append(name)
                self._count(run, decision.rule, now, waiting)
        return evict

    def _count(self, run: _Run, rule: Rule, now: float, waiting: int) -> None:
        totals = self._totals
        if rule is Rule.IDLE:
            totals.idle_reclaims += 1
            run.reclaimed_at = now
            idle_from = run.idle_from
            if idle_from is None or now < idle_from:
                totals.false_reclaims[run.plan.kind] += 1
        else:
            totals.duration_evictions += 1
        if waiting:
            totals.returned_seconds_units += run.units * self._clipped(now, run.planned_end)

    def report(self, end: float, allocated_gpu_hours: float) -> dict[str, object]:
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
        beyond = totals.beyond_grace_seconds_units
        return {
            "idle_share": self.model.idle_share,
            "overrun_share": self.model.overrun_share,
            "governance": self.model.enforce,
            "idle_rule": self.model.rule,
            "quiet_ramp_s": self.model.usage.ramp,
            "idle_gpu_hours": totals.idle_seconds_units / hours,
            "idle_gpu_hours_beyond_grace": beyond / hours,
            "idle_gpu_hours_reclaimed": totals.reclaimed_seconds_units / hours,
            "reclaimed_beyond_grace_pct": (
                totals.reclaimed_seconds_units / beyond * 100.0 if beyond > 0 else None
            ),
            "false_reclaims": sum(totals.false_reclaims.values()),
            "false_reclaims_by_kind": dict(sorted(totals.false_reclaims.items())),
            "idle_reclaims": totals.idle_reclaims,
            "duration_evictions": totals.duration_evictions,
            "governance_warnings": totals.warnings,
            "gpu_hours_returned_to_waiting_pods": totals.returned_seconds_units / hours,
            "accounting_gpu_hours": accounted,
            "accounting_error_pct": error,
        }
