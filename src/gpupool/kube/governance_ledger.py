"""GPU-hours per queue for ``/metrics``, and allocation records for the cost report.

Each governance pass opens an interval for every bound pod the scheduler holds with a trusted
allocation record (from the record's time, with its units) and closes the intervals of pods that
are gone. Open and closed intervals are integrated by :mod:`gpupool.governance.accounting`, the
same code the cost report runs, so the metric and ``gpupool report cost`` cannot disagree by
method. With a store, the same intervals become allocation rows (``allocation_started`` /
``allocation_ended``, idempotent by pod uid), so cost reports work from the live cluster.
Closed intervals are folded into per-queue totals and dropped: memory stays bounded by the pods
running now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from gpupool.governance.accounting import GroupBy, Interval, Window, account, total
from gpupool.kube.allocation import AllocationRecord
from gpupool.kube.governance_facts import GovernanceSettings, allocation_units, parse_time
from gpupool.kube.records import PodRecord
from gpupool.kube.state import ClusterState
from gpupool.store.records import Allocation
from gpupool.store.writer import StoreWriter

TrustedRecord = Callable[[PodRecord], AllocationRecord | None]


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class QueueLedger:
    """Allocation intervals of the pods running now, and the hours of those that ended."""

    def __init__(self, writer: StoreWriter | None) -> None:
        self.writer = writer
        self._open: dict[str, tuple[Interval, Allocation]] = {}
        self._closed: defaultdict[str, float] = defaultdict(float)

    async def update(
        self,
        state: ClusterState,
        settings: GovernanceSettings,
        trusted: TrustedRecord,
        now: float,
    ) -> dict[str, float]:
        """Open and close intervals for this pass; GPU-hours per queue up to ``now``."""
        for uid, (interval, stored) in list(self._open.items()):
            if uid in state.pods:
                continue
            del self._open[uid]
            end = max(now, interval.start)
            closed = replace(interval, end=end)
            self._closed[interval.queue] += total([closed], Window(interval.start, end)).gpu_hours
            if self.writer is not None:
                await self.writer.allocation_ended(stored, _moment(end))
        for uid, pod in state.pods.items():
            if uid in self._open or not pod.spec.node_name:
                continue
            record = trusted(pod)
            start = parse_time(record.time) if record is not None else None
            if record is None or start is None:
                continue
            node = state.nodes.get(pod.spec.node_name)
            size = allocation_units(record, node)
            meta = pod.metadata
            queue = settings.queue_of_namespace.get(meta.namespace, "")
            pool = settings.pool_of(node)
            pool_name = pool.name if pool is not None else ""
            interval = Interval(
                uid, meta.namespace, meta.name, queue, pool_name, size.units, size.memory_gib, start
            )
            stored = Allocation(
                uid, meta.namespace, meta.name, queue, pool_name, record.node, record.kind,
                size.units, size.memory_gib, _moment(start),
            )  # fmt: skip
            self._open[uid] = (interval, stored)
            if self.writer is not None:
                await self.writer.allocation_started(stored)
        totals = defaultdict(float, self._closed)
        running = [interval for interval, _ in self._open.values() if interval.start <= now]
        if running:
            window = Window(min(i.start for i in running), now)
            for usage in account(running, window, GroupBy.QUEUE):
                totals[usage.group] += usage.gpu_hours
        return dict(totals)
