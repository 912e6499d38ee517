"""``/metrics`` of ``gpupool control-plane``: one custom Collector, read at scrape time.

Nothing in the scheduling loop touches prometheus-client: the loop keeps plain counters
(:class:`~gpupool.kube.scheduler.config.LiveStats`,
:class:`~gpupool.kube.scheduler.observe.SchedulingMetrics`, the informers' and the state's stats)
and :class:`SchedulerCollector` turns them into metric families when Prometheus asks. Updating
thousands of labelled gauges on every watch event is what makes exporters slow; reading a few
integers per scrape costs nothing. Pending pods are counted by reason *category*, never by pod: a
label per pod would give every pod its own time series. The one per-pod family, governance's
``pod_idle_seconds``, has series only for the pods idle now (the issue asks for it per pod), so its
size follows the idle pods, not all pods.

Each process has its own :class:`~prometheus_client.CollectorRegistry` (not the global one), so
two schedulers in one test process, or a later REST API on the same server, never mix series.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gpupool.governance.congestion_ledger import CongestionLedger
from gpupool.governance.decisions import CLEANUP_RULES, RECLAIM_RULES, Rule
from gpupool.kube.controlplane.contention_metrics import contention_families
from gpupool.kube.governance.controller import GovernanceController
from gpupool.kube.scheduler.congestion_reading import settled_congestion
from gpupool.kube.scheduler.contention_view import live_contention
from gpupool.kube.scheduler.live import LiveScheduler
from gpupool.scheduling.wait_cause import PENDING_CATEGORIES

Family = TypeVar("Family", CounterMetricFamily, GaugeMetricFamily)

PREFIX = "gpupool_scheduler_"


def _by_label(family: Family, values: Mapping[str, int]) -> Family:
    """``family`` with one sample per (label value, value), every value of the fixed set."""
    for label, value in values.items():
        family.add_metric([label], value)
    return family


class SchedulerCollector(Collector):
    """Metric families of one scheduler replica, computed from its state at each scrape.

    Args:
        scheduler: The replica's scheduler (leader or standby).
        leading: Whether this replica holds the Lease now.
    """

    def __init__(
        self,
        scheduler: LiveScheduler,
        leading: Callable[[], bool],
        governance: GovernanceController | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.leading = leading
        self.governance = governance

    def collect(self) -> Iterator[Metric]:
        """Yield every family (called by the registry on each scrape)."""
        scheduler = self.scheduler
        metrics = scheduler.metrics
        yield _by_label(
            CounterMetricFamily(
                f"{PREFIX}schedule_attempts",
                "Scheduling attempts by result: scheduled (bound), unschedulable (left pending "
                "with a reason), error (the Binding failed).",
                labels=["result"],
            ),
            metrics.attempts,
        )

        latency = HistogramMetricFamily(
            f"{PREFIX}scheduling_duration_seconds",
            "Time the placement policy took to decide for one pod.",
        )
        latency.add_metric([], metrics.latency.cumulative(), metrics.latency.total)
        yield latency

        yield CounterMetricFamily(
            f"{PREFIX}binds", "Pods bound by this replica.", value=scheduler.stats.binds
        )
        yield _by_label(
            CounterMetricFamily(
                f"{PREFIX}bind_errors",
                "Failed Bindings by reason (conflict, gone, forbidden, invalid, admission, "
                "server, transport, unknown).",
                labels=["reason"],
            ),
            metrics.bind_errors,
        )
        by_reason = Counter(scheduler.pending_categories())
        yield _by_label(
            GaugeMetricFamily(
                f"{PREFIX}pending_pods",
                "Pods of this scheduler waiting to be bound, by reason category.",
                labels=["reason"],
            ),
            {reason: by_reason[reason] for reason in PENDING_CATEGORIES},
        )

        yield GaugeMetricFamily(
            f"{PREFIX}leader",
            "1 while this replica holds the Lease and schedules, 0 on standby.",
            value=1 if self.leading() else 0,
        )
        relists = CounterMetricFamily(
            f"{PREFIX}relists",
            "LISTs after an informer's first one (410 Gone, reconnects, a new term as leader).",
            labels=["resource"],
        )
        for resource, informer in (("pods", scheduler.pods), ("nodes", scheduler.nodes)):
            relists.add_metric([resource], max(informer.stats.lists - 1, 0))
        yield relists

        yield CounterMetricFamily(
            f"{PREFIX}allocation_conflicts",
            "Bound pods whose allocation could not be held: GPUs already taken, or a bad record.",
            value=scheduler.state.stats.conflicts,
        )
        yield CounterMetricFamily(
            f"{PREFIX}deleted_past_budget_wait",
            "Pods deleted after their evictions were refused (a PodDisruptionBudget) for their "
            "pool's disruptionBudgetWait: preemption victims and governance reclaims.",
            value=scheduler.departures.deleted,
        )
        yield from congestion_families(settled_congestion(scheduler))
        if self.governance is not None:
            yield from _governance_families(self.governance)
        yield from contention_families(live_contention(scheduler))


def congestion_families(ledger: CongestionLedger) -> Iterator[Metric]:
    """Pending seconds each class and queue imposed on other classes and queues, by cause.

    Labels are bounded: classes and queues come from policy, causes from the wait kinds.
    """
    totals = ledger.totals
    imposed = CounterMetricFamily(
        "gpupool_pending_seconds_imposed",
        "Seconds other classes' pods waited because of this class and queue, by cause "
        "(gpupool.governance.congestion: a reservation's holder, the pods waited behind, the "
        "GPUs' holders in proportion, preemption victims' lost run time).",
        labels=["class", "queue", "cause"],
    )
    for (party, cause), seconds in sorted(totals.imposed.items()):
        imposed.add_metric([party.workload_class, party.queue, cause], seconds)
    yield imposed


GOVERNANCE_PREFIX = "gpupool_governance_"


def _governance_families(controller: GovernanceController) -> Iterator[Metric]:
    """Governance's families.

    Idle seconds are per pod, but only for pods idle *now*: a pod that is active or gone has no
    series, so the number of series is bounded by the idle pods.
    """
    stats = controller.stats
    idle = GaugeMetricFamily(
        f"{GOVERNANCE_PREFIX}pod_idle_seconds",
        "Seconds a pod's GPU use has stayed under its pool's idle threshold (idle pods only).",
        labels=["namespace", "pod"],
    )
    for (namespace, pod), seconds in sorted(stats.idle_seconds.items()):
        idle.add_metric([namespace, pod], seconds)
    yield idle
    for name, counts, rules, what in (
        ("warnings", stats.warnings, RECLAIM_RULES, "Warnings given before a reclaim"),
        ("reclaims", stats.reclaims, RECLAIM_RULES, "Pods evicted after their warning"),
        ("cleanups", stats.cleanups, CLEANUP_RULES, "Abnormal pods evicted"),
    ):
        yield _by_label(
            CounterMetricFamily(f"{GOVERNANCE_PREFIX}{name}", f"{what}, by rule.", labels=["rule"]),
            {rule.value: counts[rule.value] for rule in rules},
        )
    yield _by_label(
        CounterMetricFamily(
            f"{GOVERNANCE_PREFIX}releases",
            "Phantom allocations released (pods gone, finished or bound elsewhere), by rule.",
            labels=["rule"],
        ),
        {Rule.PHANTOM.value: stats.releases},
    )
    yield GaugeMetricFamily(
        f"{GOVERNANCE_PREFIX}stale_usage_nodes",
        "Nodes whose agent's last usage sample is stale (older than a few publication periods): "
        "their pods count as neither idle nor active.",
        value=stats.stale_usage_nodes,
    )
    yield CounterMetricFamily(
        f"{GOVERNANCE_PREFIX}evictions_blocked",
        "Evictions refused for now (a PodDisruptionBudget, 429) and tried again later.",
        value=stats.evictions_blocked,
    )
    # Prometheus' base unit of time is the second (promtool refuses "_hours"); dashboards divide
    # by 3600 to show GPU-hours.
    gpu_seconds = CounterMetricFamily(
        f"{GOVERNANCE_PREFIX}queue_gpu_seconds",
        "GPU-seconds held per queue since this replica started counting (gpupool.governance "
        "accounting of the allocations it saw); divide by 3600 for GPU-hours.",
        labels=["queue"],
    )
    for queue, value in sorted(stats.queue_gpu_hours.items()):
        gpu_seconds.add_metric([queue], value * 3600)
    yield gpu_seconds
    yield from _consolidation_families(controller)


def _consolidation_families(controller: GovernanceController) -> Iterator[Metric]:
    """Consolidation's plans and moves, by pool (and mode): pools are few, set by the admin."""
    consolidation = controller.consolidation
    yield _by_label(
        CounterMetricFamily(
            f"{GOVERNANCE_PREFIX}consolidation_moves",
            "Pods moved (evicted to be placed again) so that a pod waiting on fragments fits.",
            labels=["pool"],
        ),
        dict(sorted(consolidation.moves.items())),
    )
    plans = CounterMetricFamily(
        f"{GOVERNANCE_PREFIX}consolidation_plans",
        "Consolidation plans carried out (mode Enabled) or told (ReportOnly), by pool and mode.",
        labels=["pool", "mode"],
    )
    for (pool, mode), count in sorted(consolidation.plans.items()):
        plans.add_metric([pool, mode], count)
    yield plans


def scheduler_registry(
    scheduler: LiveScheduler,
    leading: Callable[[], bool],
    governance: GovernanceController | None = None,
) -> CollectorRegistry:
    """A registry of its own holding only the scheduler's (and governance's) collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(scheduler, leading, governance))
    return registry
