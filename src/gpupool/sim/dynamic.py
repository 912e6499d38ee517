"""The dynamic simulation: arrivals, completions, preemptions, under pools and queues.

A discrete-event loop (a heap of arrivals, completions and scheduling ticks) over a
:class:`~gpupool.core.snapshot.ClusterSnapshot`, which this module mutates by applying the
decisions of :class:`~gpupool.scheduling.engine.PolicyEngine`, the same pure call the live
scheduler makes. The workload process is :mod:`gpupool.sim.workload_process`.

* The scheduler runs a cycle every :data:`CYCLE_SECONDS` of simulated time when something
  changed (as a live scheduler loops), over every pending pod; a cycle that preempted runs
  again at once, so the nominated pod starts when its victims are gone (eviction is immediate
  here; a live cluster waits for graceful termination, which is what nomination covers).
* A preempted pod goes back to pending with its original arrival time and its whole duration
  (its work is lost, and counted in ``gpu_hours_lost_to_preemption``).
* Metrics cover ``[warmup, hours]``; queue delays include the pods still pending at the end,
  counted up to the end (a lower bound), so overload is not flattered by leaving them out.
  Delays are also split by request size and by urgency (pod priority above 0), and
  ``guarantee_shortfall_gpu_hours`` integrates, over queues that still have pending pods after
  a scheduling cycle, how far they are below their guarantee in pools where some queue borrows
  above its own: what reclaim is there to remove (measured after cycles, so a pod waiting for
  the next cycle does not count).
* With ``governance`` set, a stated share of pods lingers idle or overruns, and the governance
  rules act on them each sample period (:mod:`gpupool.sim.governance_model`); it draws from a
  stream of its own, so the other draws are those of the same seed without it.
* The cluster is every ``1/scale``-th node of the openb list (name order). Each node is
  labelled ``sim.gpupool.io/group``: ``shared`` for nodes with fewer than 8 GPUs and every 8th
  node with 8 (by name), ``exclusive`` for the rest, which puts about 30% of the GPUs in the
  group the bundled Shared pool selects, close to the trace's share of GPU demand in fractions
  (28%).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpupool.core.framework import Scheduler
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.backfill import Reservation
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.runtime import RuntimeEstimator
from gpupool.policy.spec import PolicyConfig
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.engine import Admit, CycleRequest, EngineOptions, PolicyEngine, Preempt
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.sim.governance_model import GovernanceModel, GovernanceSim
from gpupool.sim.workload_process import Arrival, ArrivalProcess

CYCLE_SECONDS = 20.0
GROUP_LABEL = "sim.gpupool.io/group"
SHARED_EVERY = 8
SMALL_UNITS = 500
"""Pods of at most half a GPU (and more than none) count as small in the delay breakdown."""
_ARRIVAL, _COMPLETION, _TICK = 0, 1, 2


@dataclass(frozen=True, slots=True)
class DynamicSettings:
    """One run's knobs.

    Attributes:
        rho: Offered load, fraction of GPU capacity.
        hours: Simulated hours.
        seed: Seed of every draw.
        backfill: EASY backfill on.
        preemption: Preemption and reclaim on.
        warmup_hours: Hours left out of the metrics.
        scale: Fraction of the node list simulated (every ``1/scale``-th node).
        policy: Placement policy name.
        governance: Pods that go idle or overrun, and the governance rules (None: neither).
    """

    rho: float
    hours: float
    seed: int
    backfill: bool = True
    preemption: bool = True
    warmup_hours: float = 3.0
    scale: float = 0.25
    policy: str = "default"
    governance: GovernanceModel | None = None

    def __post_init__(self) -> None:
        checks = (
            ("rho", self.rho > 0),
            ("hours", self.hours > 0),
            ("warmup_hours", 0 <= self.warmup_hours < self.hours),
            ("scale", 0 < self.scale <= 1),
        )
        for name, ok in checks:
            if not ok:
                raise ValueError(f"{name}: out of range ({getattr(self, name)})")


def scaled_nodes(nodes: Sequence[NodeSpec], scale: float) -> list[NodeSpec]:
    """Every ``1/scale``-th node by name, labelled with its group (module docstring)."""
    ordered = sorted(nodes, key=lambda node: node.name)
    step = max(1, round(1 / scale))
    labelled = []
    big = 0
    for node in ordered[::step]:
        group = "shared"
        if node.gpu_count >= 8:
            group = "shared" if big % SHARED_EVERY == SHARED_EVERY - 1 else "exclusive"
            big += 1
        labelled.append(replace(node, labels=(*node.labels, (GROUP_LABEL, group))))
    return labelled


@dataclass
class _Tally:
    """Time integrals and counters over the measured window."""

    start: float
    end: float
    last: float = 0.0
    used_integral: float = 0.0
    queue_integral: Any = None
    delays: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    delays_by_size: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    delays_by_priority: defaultdict[str, list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    shortfall_integral: float = 0.0
    preemptions: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    gpu_seconds_lost: float = 0.0
    overrun: int = 0
    backfilled: int = 0
    started: int = 0

    def advance(self, now: float, used_per_queue: Any, shortfall: float) -> None:
        low, high = max(self.last, self.start), min(now, self.end)
        if high > low:
            span = high - low
            self.used_integral += float(used_per_queue.sum()) * span
            self.queue_integral = self.queue_integral + used_per_queue * span
            self.shortfall_integral += shortfall * span
        self.last = now


def _size(units: int) -> str:
    if units == 0:
        return "cpu_only"
    return "small" if units <= SMALL_UNITS else ("medium" if units <= MILLI_UNITS else "large")


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"p50": None, "p95": None, "count": 0}
    array = np.asarray(values)
    return {
        "p50": float(np.percentile(array, 50)),
        "p95": float(np.percentile(array, 95)),
        "count": len(values),
    }


def run_dynamic(
    nodes: Sequence[NodeSpec],
    shapes: Sequence[PodSpec],
    config: PolicyConfig,
    settings: DynamicSettings,
) -> dict[str, Any]:
    """Simulate ``settings.hours`` and return the metrics (see docs/benchmarks.md)."""
    started_wall = time.perf_counter()
    cluster = scaled_nodes(nodes, settings.scale)
    streams = np.random.SeedSequence(settings.seed).spawn(3)
    arrivals_rng, ranks_rng, policy_rng = (np.random.default_rng(s) for s in streams)
    snapshot = ClusterSnapshot(cluster)
    policy = ClusterPolicy.build(config, cluster)
    policy.prepare(snapshot)
    placement = build_policy(settings.policy, PolicyContext(policy_rng, shapes))
    scheduler = Scheduler(placement, ranks_rng.permutation(len(cluster)).astype(np.int64))
    engine = PolicyEngine(
        scheduler,
        policy,
        EngineOptions(backfill=settings.backfill, preemption=settings.preemption),
    )
    tables = policy.tables
    capacity_units = snapshot.total_gpus * MILLI_UNITS
    process = ArrivalProcess(shapes, snapshot.total_gpus, settings.rho, arrivals_rng)
    end = settings.hours * 3600.0
    tally = _Tally(start=settings.warmup_hours * 3600.0, end=end)
    governance = None
    if settings.governance is not None:  # its own stream: the other draws stay as they were
        governance_rng = np.random.default_rng(np.random.SeedSequence(settings.seed).spawn(4)[3])
        governance = GovernanceSim(settings.governance, governance_rng, (tally.start, end))
    tally.queue_integral = np.zeros(len(tables.queues))
    ledger = policy.new_ledger()
    runtimes = RuntimeEstimator()
    running: dict[str, Running] = {}
    run_token: dict[str, int] = {}
    pending: dict[str, Workload] = {}
    durations: dict[str, float] = {}
    first_start: dict[str, float] = {}
    arrived_queue: defaultdict[int, int] = defaultdict(int)
    nominations: dict[str, int] = {}
    reservations: dict[int, Reservation] = {}
    events: list[tuple[float, int, int, str, int]] = []
    sequence = 0

    def push(at: float, kind: int, name: str = "", token: int = 0) -> None:
        nonlocal sequence
        heapq.heappush(events, (at, sequence, kind, name, token))
        sequence += 1

    def record_delay(workload: Workload, queue: int, units: int, waited: float) -> None:
        if workload.created_at < tally.start:
            return
        tally.delays[tables.queues[queue].name].append(waited)
        tally.delays_by_size[_size(units)].append(waited)
        tally.delays_by_priority["urgent" if workload.priority else "normal"].append(waited)

    waiting = np.zeros(len(tables.queues), dtype=np.int64)

    def shortfall() -> float:
        """GPU units queues with pending pods lack to their guarantees while others borrow."""
        below = np.maximum(tables.guaranteed - ledger.used, 0)
        borrowing = np.any(ledger.used > tables.guaranteed, axis=0)
        lacking = below * borrowing.reshape(1, -1)
        return float(lacking[waiting > 0].sum()) / MILLI_UNITS

    lacking = 0.0
    first: Arrival = process.next()
    push(first.at, _ARRIVAL)
    upcoming = first
    push(CYCLE_SECONDS, _TICK)
    dirty = False
    while events:
        now, _, kind, name, token = heapq.heappop(events)
        if now > end:
            break
        tally.advance(now, ledger.used.sum(axis=1), lacking)
        if kind == _ARRIVAL:
            workload = upcoming.workload
            pending[workload.name] = workload
            durations[workload.name] = upcoming.duration
            if governance is not None:
                durations[workload.name] = governance.hold_time(workload.name, upcoming.duration)
            arrived_queue[tables.queue_of(workload.namespace)] += 1
            waiting[tables.queue_of(workload.namespace)] += 1
            engine.observe(workload)
            upcoming = process.next()
            push(upcoming.at, _ARRIVAL)
            dirty = True
        elif kind == _COMPLETION:
            if run_token.get(name) != token:
                continue  # preempted since; this completion is stale
            finished = running.pop(name)
            snapshot.release(name)
            ledger.remove(finished)
            if governance is not None:
                governance.ended(name, now)
            runtimes.observe_completion(
                finished.workload, tables.queues[finished.queue].name, now - finished.started_at
            )
            dirty = True
        else:
            push(now + CYCLE_SECONDS, _TICK)
            if governance is not None:
                for victim in governance.tick(now, len(pending)):
                    ledger.remove(running.pop(victim))
                    snapshot.release(victim)
                    run_token[victim] = run_token.get(victim, 0) + 1  # its completion is stale
                    governance.ended(victim, now)
                    dirty = True
            if not dirty or not pending:
                continue
            dirty = False
            for _ in range(4):
                result = engine.cycle(
                    CycleRequest(
                        snapshot=snapshot,
                        pending=list(pending.values()),
                        running=running,
                        ledger=ledger,
                        now=now,
                        nominations=nominations,
                        runtimes=runtimes,
                        reservations=reservations,
                    )
                )
                nominations = result.nominations
                reservations = result.reservations
                preempted = False
                for decision in result.decisions:
                    if isinstance(decision, Admit):
                        workload = decision.workload
                        bind = decision.bind
                        snapshot.bind(workload.pod, bind.node, bind.gpus)
                        record = decision.running(now)
                        running[workload.name] = record
                        ledger.add(record)
                        del pending[workload.name]
                        waiting[decision.queue] -= 1
                        if governance is not None:
                            governance.started(workload.name, now, decision.units)
                        token_value = run_token.get(workload.name, 0) + 1
                        run_token[workload.name] = token_value
                        push(
                            now + durations[workload.name], _COMPLETION, workload.name, token_value
                        )
                        if workload.name not in first_start:
                            first_start[workload.name] = now
                            record_delay(
                                workload, decision.queue, decision.units, now - workload.created_at
                            )
                        if now >= tally.start:
                            tally.started += 1
                            tally.backfilled += decision.backfilled
                    elif isinstance(decision, Preempt):
                        preempted = True
                        for victim in decision.victims:
                            evicted = running.pop(victim)
                            snapshot.release(victim)
                            ledger.remove(evicted)
                            run_token[victim] = run_token.get(victim, 0) + 1
                            if governance is not None:
                                governance.ended(victim, now)
                            pending[victim] = evicted.workload
                            waiting[evicted.queue] += 1
                            if now >= tally.start:
                                tally.preemptions[decision.rule.value] += 1
                                tally.gpu_seconds_lost += (
                                    evicted.units / MILLI_UNITS * (now - evicted.started_at)
                                )
                tally.overrun = max(tally.overrun, ledger.overrun(tables))
                if not preempted:
                    break
            lacking = shortfall()  # measured after a cycle: pods it could not start
    tally.advance(end, ledger.used.sum(axis=1), lacking)
    for workload in pending.values():
        if workload.name in first_start:
            continue
        queue = tables.queue_of(workload.namespace)
        units = policy.pending_units(workload.pod, 0)
        record_delay(workload, queue, units, end - workload.created_at)
    window = end - tally.start
    shares = {}
    for q, queue_spec in enumerate(tables.queues):
        if arrived_queue.get(q):
            average = float(tally.queue_integral[q]) / window / capacity_units
            shares[queue_spec.name] = average / float(tables.weight[q])
    values = np.array(list(shares.values()))
    jain = float(values.sum() ** 2 / (len(values) * (values**2).sum())) if values.any() else None
    report: dict[str, Any] = {
        "rho": settings.rho,
        "hours": settings.hours,
        "warmup_hours": settings.warmup_hours,
        "seed": settings.seed,
        "backfill": settings.backfill,
        "preemption": settings.preemption,
        "policy": settings.policy,
        "nodes": len(cluster),
        "gpus": snapshot.total_gpus,
        "arrivals": process.count,
        "arrival_rate_per_hour": process.rate * 3600,
        "gpu_utilisation": 100.0 * tally.used_integral / window / capacity_units,
        "queue_delay_s": {name: _percentiles(v) for name, v in sorted(tally.delays.items())},
        "queue_delay_s_by_size": {
            size: _percentiles(v) for size, v in sorted(tally.delays_by_size.items())
        },
        "queue_delay_s_by_priority": {
            level: _percentiles(v) for level, v in sorted(tally.delays_by_priority.items())
        },
        "guarantee_shortfall_gpu_hours": tally.shortfall_integral / 3600.0,
        "jain_fairness": jain,
        "weighted_dominant_share": shares,
        "preemptions": sum(tally.preemptions.values()),
        "preemptions_by_rule": dict(tally.preemptions),
        "gpu_hours_lost_to_preemption": tally.gpu_seconds_lost / 3600.0,
        "quota_overrun_max": tally.overrun / MILLI_UNITS,
        "started": tally.started,
        "backfilled": tally.backfilled,
        "pending_at_end": len(pending),
        "pool_conflicts": [list(conflict) for conflict in policy.layout.conflicts],
        "wall_seconds": time.perf_counter() - started_wall,
        "seeds": [settings.seed],
    }
    if governance is not None:
        allocated_gpu_hours = tally.used_integral / MILLI_UNITS / 3600.0
        report.update(governance.report(end, allocated_gpu_hours))
    return report


def mean_or_none(values: Sequence[float | None]) -> float | None:
    """Mean of the values that are not ``None``."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.mean(present)) if present else None
