"""What the dynamic simulation measures, over its metric window ``[warmup, hours]``.

* GPU utilisation and each queue's weighted dominant share are time integrals of what the
  ledger charges (Jain's index over the shares of queues that saw arrivals).
* Queue delays include the pods still pending at the end, counted up to the end (a lower
  bound), so overload is not flattered by leaving them out. Delays are also split by request
  size and by urgency (pod priority above 0).
* ``guarantee_shortfall_gpu_hours`` integrates, over queues that still have pending pods after a
  scheduling cycle, how far they are below their guarantee in pools where some queue borrows
  above its own: what reclaim is there to remove (measured after cycles, so a pod waiting for
  the next cycle does not count).
* A preempted pod's work is lost, and counted in ``gpu_hours_lost_to_preemption``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.quota import Ledger
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.decisions import Admit, Preempt

SMALL_UNITS = 500
"""Pods of at most half a GPU (and more than none) count as small in the delay breakdown."""

Delays = defaultdict[str, list[float]]


def _delays() -> Delays:
    return defaultdict(list)


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


@dataclass
class DynamicMetrics:
    """Time integrals and counters of one run.

    Args:
        policy: The compiled pools and queues.
        capacity_units: The cluster's GPUs in milli-units.
        start: Start of the metric window, seconds.
        end: End of the run and of the window, seconds.
    """

    policy: ClusterPolicy
    capacity_units: int
    start: float
    end: float
    last: float = 0.0
    used_integral: float = 0.0
    queue_integral: Any = None
    shortfall_integral: float = 0.0
    lacking: float = 0.0
    """GPU units short of guarantees after the last cycle (see the module docstring)."""
    delays: Delays = field(default_factory=_delays)
    delays_by_size: Delays = field(default_factory=_delays)
    delays_by_priority: Delays = field(default_factory=_delays)
    preemptions: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    gpu_seconds_lost: float = 0.0
    overrun: int = 0
    backfilled: int = 0
    started: int = 0
    arrived: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))
    waiting: Any = None
    """Pending pods per queue."""
    first_start: set[str] = field(default_factory=set)
    never_started_by_size: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Pods of the window, by size, still pending at the end: under overload a p95 delay is
    often the end of the run less the arrival of a pod that never started, and moves only once
    most of those start; this count says whether a variant serves more of them."""

    def __post_init__(self) -> None:
        queues = len(self.policy.tables.queues)
        self.queue_integral = np.zeros(queues)
        self.waiting = np.zeros(queues, dtype=np.int64)

    def advance(self, now: float, ledger: Ledger) -> None:
        """Integrate what the ledger charged from the last event to ``now``."""
        used_per_queue = ledger.used.sum(axis=1)
        low, high = max(self.last, self.start), min(now, self.end)
        if high > low:
            span = high - low
            self.used_integral += float(used_per_queue.sum()) * span
            self.queue_integral = self.queue_integral + used_per_queue * span
            self.shortfall_integral += self.lacking * span
        self.last = now

    def pod_arrived(self, workload: Workload) -> None:
        """A pod joined its queue's pending pods."""
        queue = self.policy.tables.queue_of(workload.namespace)
        self.arrived[queue] += 1
        self.waiting[queue] += 1

    def pod_started(self, decision: Admit, now: float) -> None:
        """A pod started; its delay counts at its first start only."""
        workload = decision.workload
        self.waiting[decision.queue] -= 1
        if workload.name not in self.first_start:
            self.first_start.add(workload.name)
            self._delay(workload, decision.queue, decision.units, now - workload.created_at)
        if now >= self.start:
            self.started += 1
            self.backfilled += decision.backfilled

    def pod_evicted(self, record: Running, decision: Preempt, now: float) -> None:
        """A pod was preempted: pending again, its work so far lost."""
        self.waiting[record.queue] += 1
        if now >= self.start:
            self.preemptions[decision.rule.value] += 1
            self.gpu_seconds_lost += record.units / MILLI_UNITS * (now - record.started_at)

    def pod_moved(self, record: Running) -> None:
        """A pod was moved by consolidation: pending again (its moves are counted there)."""
        self.waiting[record.queue] += 1

    def cycle_done(self, ledger: Ledger) -> None:
        """Track the largest quota overrun (a bug if ever above 0)."""
        self.overrun = max(self.overrun, ledger.overrun(self.policy.tables))

    def cycles_done(self, ledger: Ledger) -> None:
        """Measure the guarantee shortfall: what the cycles could not start stays lacking."""
        tables = self.policy.tables
        below = np.maximum(tables.guaranteed - ledger.used, 0)
        borrowing = np.any(ledger.used > tables.guaranteed, axis=0)
        lacking = below * borrowing.reshape(1, -1)
        self.lacking = float(lacking[self.waiting > 0].sum()) / MILLI_UNITS

    def still_waiting(self, pending: Iterable[Workload]) -> None:
        """Count the delays of pods that never started, up to the end (a lower bound)."""
        for workload in pending:
            if workload.name in self.first_start:
                continue
            queue = self.policy.tables.queue_of(workload.namespace)
            units = self.policy.pending_units(workload.pod, 0)
            self._delay(workload, queue, units, self.end - workload.created_at)
            if workload.created_at >= self.start:
                self.never_started_by_size[_size(units)] += 1

    def _delay(self, workload: Workload, queue: int, units: int, waited: float) -> None:
        if workload.created_at < self.start:
            return
        self.delays[self.policy.tables.queues[queue].name].append(waited)
        self.delays_by_size[_size(units)].append(waited)
        self.delays_by_priority["urgent" if workload.priority else "normal"].append(waited)

    def allocated_gpu_hours(self) -> float:
        """GPU-hours charged over the window."""
        return self.used_integral / MILLI_UNITS / 3600.0

    def report(self) -> dict[str, Any]:
        """The metrics, in the report's order (docs/benchmarks.md)."""
        window = self.end - self.start
        shares = self._shares(window)
        values = np.array(list(shares.values()))
        jain = None
        if values.any():
            jain = float(values.sum() ** 2 / (len(values) * (values**2).sum()))
        return {
            "gpu_utilisation": 100.0 * self.used_integral / window / self.capacity_units,
            "queue_delay_s": {name: _percentiles(v) for name, v in sorted(self.delays.items())},
            "queue_delay_s_by_size": {
                size: _percentiles(v) for size, v in sorted(self.delays_by_size.items())
            },
            "never_started_by_size": dict(sorted(self.never_started_by_size.items())),
            "queue_delay_s_by_priority": {
                level: _percentiles(v) for level, v in sorted(self.delays_by_priority.items())
            },
            "guarantee_shortfall_gpu_hours": self.shortfall_integral / 3600.0,
            "jain_fairness": jain,
            "weighted_dominant_share": shares,
            "preemptions": sum(self.preemptions.values()),
            "preemptions_by_rule": dict(self.preemptions),
            "gpu_hours_lost_to_preemption": self.gpu_seconds_lost / 3600.0,
            "quota_overrun_max": self.overrun / MILLI_UNITS,
            "started": self.started,
            "backfilled": self.backfilled,
        }

    def _shares(self, window: float) -> dict[str, float]:
        """Weighted dominant share of each queue that saw arrivals, averaged over the window."""
        tables = self.policy.tables
        shares = {}
        for q, queue_spec in enumerate(tables.queues):
            if self.arrived.get(q):
                average = float(self.queue_integral[q]) / window / self.capacity_units
                shares[queue_spec.name] = average / float(tables.weight[q])
        return shares
