"""Reads for the audit command and the cost report.

Filters run in the database (indexed time, tenant, uid and action columns), so a query over a
month of a large cluster does not pull the whole table into memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from gpupool.store.records import (
    Allocation,
    AuditAction,
    AuditEvent,
    UsageSample,
    from_micros,
    to_micros,
)
from gpupool.store.tables import allocations, audit_events, usage_samples

_ALLOCATION_COLUMNS = (
    "pod_uid", "namespace", "name", "queue", "pool", "node", "kind", "units", "memory_gib",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Which audit events to read; every filter is optional.

    Attributes:
        since: Events at or after this time.
        until: Events before this time.
        tenant: Events of this tenant (queue).
        pod: Events about this pod: its uid, its name or ``namespace/name``.
        actions: Events of these actions.
        limit: Most events returned (the oldest first).
    """

    since: datetime | None = None
    until: datetime | None = None
    tenant: str | None = None
    pod: str | None = None
    actions: Sequence[AuditAction] = ()
    limit: int = 10_000


async def audit_events_matching(engine: AsyncEngine, query: AuditQuery) -> list[AuditEvent]:
    """The audit events that match ``query``, oldest first."""
    table = audit_events.c
    statement = sa.select(audit_events).order_by(table.time_us, table.id).limit(query.limit)
    if query.since is not None:
        statement = statement.where(table.time_us >= to_micros(query.since))
    if query.until is not None:
        statement = statement.where(table.time_us < to_micros(query.until))
    if query.tenant is not None:
        statement = statement.where(table.tenant == query.tenant)
    if query.actions:
        statement = statement.where(table.action.in_([a.value for a in query.actions]))
    if query.pod is not None:
        matches = [table.uid == query.pod, table.name == query.pod]
        namespace, slash, name = query.pod.partition("/")
        if slash:
            matches.append(sa.and_(table.namespace == namespace, table.name == name))
        statement = statement.where(sa.or_(*matches))
    return [
        AuditEvent(
            time=from_micros(row["time_us"]),
            action=AuditAction(row["action"]),
            kind=row["object_kind"],
            namespace=row["namespace"],
            name=row["name"],
            reason=row["reason"],
            values=row["decision_values"],
            uid=row["uid"],
            tenant=row["tenant"],
            pool=row["pool"],
            actor=row["actor"],
            key=row["key"],
        )
        for row in await _rows(engine, statement)
    ]


async def allocations_overlapping(
    engine: AsyncEngine, start: datetime, end: datetime
) -> list[Allocation]:
    """Allocations held for some time inside ``[start, end)``, oldest first."""
    table = allocations.c
    statement = (
        sa.select(allocations)
        .where(table.start_us < to_micros(end))
        .where(sa.or_(table.end_us.is_(None), table.end_us > to_micros(start)))
        .order_by(table.start_us, table.id)
    )
    return [
        Allocation(
            **{name: row[name] for name in _ALLOCATION_COLUMNS},
            start=from_micros(row["start_us"]),
            end=None if row["end_us"] is None else from_micros(row["end_us"]),
        )
        for row in await _rows(engine, statement)
    ]


async def usage_samples_between(
    engine: AsyncEngine, start: datetime, end: datetime
) -> list[UsageSample]:
    """Usage samples taken in ``[start, end)``, oldest first."""
    table = usage_samples.c
    statement = (
        sa.select(usage_samples)
        .where(table.time_us >= to_micros(start), table.time_us < to_micros(end))
        .order_by(table.time_us, table.id)
    )
    return [
        UsageSample(
            pod_uid=row["pod_uid"],
            time=from_micros(row["time_us"]),
            sm_percent=row["sm_percent"],
            memory_used_gib=row["memory_used_gib"],
        )
        for row in await _rows(engine, statement)
    ]


async def _rows(engine: AsyncEngine, statement: sa.Select[Any]) -> Sequence[sa.RowMapping]:
    async with engine.connect() as connection:
        rows: Sequence[sa.RowMapping] = (await connection.execute(statement)).mappings().all()
    return rows


async def count_rows(engine: AsyncEngine, table: sa.Table) -> tuple[int, int]:
    """Rows in ``table`` and distinct idempotency keys among them."""
    statement = sa.select(sa.func.count(), sa.func.count(sa.distinct(table.c.key)))
    async with engine.connect() as connection:
        rows, keys = (await connection.execute(statement)).one()
    return int(rows), int(keys)
