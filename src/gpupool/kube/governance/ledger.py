"""GPU-hours per queue for ``/metrics``, and allocation records for the cost report.

Each governance pass opens an interval for every bound pod the scheduler holds with a trusted
allocation record (from the record's time, with its GPU units, the count its quota was charged:
:func:`gpupool.policy.units.allocation_size`; in the queue and pool the scheduler charged it to,
:mod:`gpupool.policy.membership`) and closes the intervals of pods that are gone. Open and closed
intervals are integrated by :mod:`gpupool.governance.accounting`, the same code the cost report
runs, so the metric and ``gpupool report cost`` cannot disagree by method. With a store, the same
intervals become allocation rows (``allocation_started`` / ``allocation_ended``, idempotent by pod
uid), so cost reports work from the live cluster. Closed intervals are folded into per-queue totals
and dropped: memory stays bounded by the pods running now.

Open intervals live in the leader's memory, so a pod that ends while no leader runs (a failover,
an upgrade) would stay open in the store and be billed "up to now" for ever. A new leader
therefore reconciles first (:meth:`QueueLedger.reconcile`): every stored allocation still open
whose pod no longer runs is closed at its end (:func:`gpupool.governance.accounting.ended_at`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime

from gpupool.governance.accounting import GroupBy, Interval, Window, account, ended_at, total
from gpupool.kube.client.api import ApiError, JsonObject, KubeAPI
from gpupool.kube.governance.facts import GovernanceSettings, allocation_units, claim_units
from gpupool.kube.objects.allocation import AllocationRecord
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.timestamps import parse_time
from gpupool.kube.scheduler.governance_port import GovernanceReading
from gpupool.store.queries import last_sample_time, open_allocations
from gpupool.store.records import Allocation
from gpupool.store.writer import StoreWriter

log = logging.getLogger(__name__)

TrustedRecord = Callable[[PodRecord], AllocationRecord | None]


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def finished_at(pod: JsonObject) -> float | None:
    """When a finished pod's last container ended (``None``: not finished, or not said)."""
    status = pod.get("status") or {}
    if status.get("phase") not in ("Succeeded", "Failed"):
        return None
    ends = [
        parse_time(((container.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for container in status.get("containerStatuses") or []
    ]
    known = [end for end in ends if end is not None]
    return max(known) if known else None


class QueueLedger:
    """Allocation intervals of the pods running now, and the hours of those that ended."""

    def __init__(self, writer: StoreWriter | None) -> None:
        self.writer = writer
        self._open: dict[str, tuple[Interval, Allocation]] = {}
        self._closed: defaultdict[str, float] = defaultdict(float)
        self.reconciled = False
        """Whether :meth:`reconcile` ran in this leadership term (the controller resets it)."""

    async def reconcile(self, api: KubeAPI, pods: Mapping[str, PodRecord]) -> None:
        """Close the stored intervals of pods that ended while no leader ran.

        A pod still running (in the scheduler's cache) keeps its interval: :meth:`update`
        takes it over from its allocation record. Any other open one is closed at the pod's
        finish time as the API server reports it, else at its last stored usage sample. A store
        still migrating or down, or an API error, must not hold up governance: it is logged
        and tried again on the next pass (the writer buffers meanwhile).
        """
        if self.writer is None:
            self.reconciled = True
            return
        try:
            closed = await self._close_ended(api, pods, self.writer)
        except Exception as error:
            log.warning("ledger reconciliation failed, tried again next pass: %r", error)
            return
        self.reconciled = True
        if closed:
            log.info("closed %d allocations of pods that ended while no leader ran", closed)

    async def _close_ended(
        self, api: KubeAPI, pods: Mapping[str, PodRecord], writer: StoreWriter
    ) -> int:
        engine = writer.engine
        closed = 0
        for stored in await open_allocations(engine):
            if stored.pod_uid in pods:
                continue
            path = f"/api/v1/namespaces/{stored.namespace}/pods/{stored.name}"
            try:
                pod: JsonObject | None = await api.get(path)
            except ApiError as error:
                if error.status != 404:
                    raise
                pod = None
            same = pod is not None and pod.get("metadata", {}).get("uid") == stored.pod_uid
            finished = finished_at(pod) if pod is not None and same else None
            if same and finished is None:
                continue  # not finished: not ours to close (it is unbound, or not cached yet)
            seen = await last_sample_time(engine, stored.pod_uid)
            start = stored.start.timestamp()
            end = ended_at(start, finished, seen.timestamp() if seen is not None else None)
            interval = Interval(
                stored.pod_uid, stored.namespace, stored.name, stored.queue, stored.pool,
                stored.units, stored.memory_gib, start, end,
            )  # fmt: skip
            self._closed[stored.queue] += total([interval], Window(start, end)).gpu_hours
            await writer.allocation_ended(stored, _moment(end))
            closed += 1
        return closed

    async def update(
        self,
        reading: GovernanceReading,
        settings: GovernanceSettings,
        trusted: TrustedRecord,
        now: float,
    ) -> dict[str, float]:
        """Open and close intervals for this pass; GPU-hours per queue up to ``now``."""
        for uid, (interval, stored) in list(self._open.items()):
            if uid in reading.pods:
                continue
            del self._open[uid]
            end = max(now, interval.start)
            closed = replace(interval, end=end)
            self._closed[interval.queue] += total([closed], Window(interval.start, end)).gpu_hours
            if self.writer is not None:
                await self.writer.allocation_ended(stored, _moment(end))
        charges = reading.claim_charges
        for uid, pod in reading.pods.items():
            if uid in self._open or not pod.spec.node_name:
                continue
            record = trusted(pod)
            start = parse_time(record.time) if record is not None else None
            if record is None or start is None:
                continue
            node = reading.nodes.get(pod.spec.node_name)
            claimed = charges.get(uid)
            if pod.spec.resource_claims and claimed is None:
                continue  # its claim is not seen yet, or another of its pods is charged for it
            size = allocation_units(record, node) if claimed is None else claim_units(claimed, node)
            kind = record.kind if claimed is None else claimed.kind.value
            meta = pod.metadata
            queue = settings.queue_of(pod)
            pool = settings.pool_of(node)
            pool_name = pool.name if pool is not None else ""
            interval = Interval(
                uid, meta.namespace, meta.name, queue, pool_name, size.units, size.memory_gib, start
            )
            stored = Allocation(
                uid, meta.namespace, meta.name, queue, pool_name, record.node, kind,
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
