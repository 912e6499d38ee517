"""The live control plane's records: governance actions, audit and cost read from its store.

The same store the scheduler and the governance controller write (:mod:`gpupool.store`), read
with the queries the CLI uses, filtered in the database by the reader's namespaces, so a tenant's
"latest 100" are its own latest 100 and nothing of another namespace is ever loaded for it.

The namespaces the store mentions (what a tenant's permissions are checked against) are read
with one DISTINCT query per request, not kept: a kept list misses the namespace of a bind
written since, so a tenant whose first pod was just bound saw no records at all until the list
was read again (and the live API test caught it as a flake).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from gpupool.api.model import CostBucket, CostLine, Record
from gpupool.api.records import Namespaces
from gpupool.governance.accounting import GroupBy
from gpupool.store.cost import cost_report
from gpupool.store.queries import AuditQuery, audit_events_matching, namespaces_recorded
from gpupool.store.records import AuditAction, AuditEvent

COST_WINDOW = timedelta(days=30)
"""The window ``/api/v1/cost`` accounts: the last 30 days."""
GOVERNANCE_ACTIONS = (
    AuditAction.PREEMPT,
    AuditAction.RECLAIM,
    AuditAction.CLEANUP,
    AuditAction.TIME_LIMIT,
)


def _record(event: AuditEvent) -> Record:
    subject = f"{event.namespace}/{event.name}" if event.namespace else event.name
    return Record(
        at=event.time.isoformat(), kind=event.action.value, subject=subject, detail=event.reason
    )


def _chosen(namespaces: Namespaces) -> list[str] | None:
    return None if namespaces is None else sorted(namespaces)


@dataclass
class StoreRecords:
    """A :class:`~gpupool.api.records.RecordSource` over the audit and accounting store.

    Args:
        engine: The store.
        now: The present (the cost window ends there).
    """

    engine: AsyncEngine
    now: Callable[[], datetime] = lambda: datetime.now(UTC)

    async def namespaces(self) -> set[str]:
        """Every namespace the audit trail or the allocations name, as of now."""
        return await namespaces_recorded(self.engine)

    async def _events(
        self, limit: int, namespaces: Namespaces, actions: tuple[AuditAction, ...] = ()
    ) -> list[Record]:
        query = AuditQuery(
            actions=actions, namespaces=_chosen(namespaces), limit=limit, newest_first=True
        )
        return [_record(event) for event in await audit_events_matching(self.engine, query)]

    async def actions(self, limit: int, namespaces: Namespaces) -> list[Record]:
        """Preemptions, reclaims, cleanups and time limits, newest first."""
        return await self._events(limit, namespaces, GOVERNANCE_ACTIONS)

    async def audit(self, limit: int, namespaces: Namespaces) -> list[Record]:
        """Every audit event, newest first."""
        return await self._events(limit, namespaces)

    async def cost(self, namespaces: Namespaces) -> tuple[list[CostLine], list[CostBucket]]:
        """GPU-hours per queue over the last :data:`COST_WINDOW`, in total and per day.

        The days are the report's own buckets (:func:`gpupool.store.cost.cost_report`), so the
        dashboard's chart adds up to the table's totals.
        """
        now = self.now()
        report = await cost_report(
            self.engine, now - COST_WINDOW, now, GroupBy.QUEUE, now, _chosen(namespaces)
        )
        lines = [
            CostLine(team=usage.group, gpu_hours=round(usage.gpu_hours, 3))
            for usage in report.groups
        ]
        buckets = [
            CostBucket(
                start=bucket.start.isoformat(),
                end=bucket.end.isoformat(),
                gpu_hours={team: round(use.gpu_hours, 3) for team, use in bucket.usage.items()},
            )
            for bucket in report.buckets
        ]
        return lines, buckets
