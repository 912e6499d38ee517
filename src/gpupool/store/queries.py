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
        namespaces: Events about objects in these namespaces (None: any, cluster-scoped
            objects included; the API's per-namespace readers pass theirs).
        limit: Most events returned.
        newest_first: Return the newest ``limit`` events, newest first (default: the oldest,
            oldest first).
    """

    since: datetime | None = None
    until: datetime | None = None
    tenant: str | None = None
    pod: str | None = None
    actions: Sequence[AuditAction] = ()
    namespaces: Sequence[str] | None = None
    limit: int = 10_000
    newest_first: bool = False


async def audit_events_matching(engine: AsyncEngine, query: AuditQuery) -> list[AuditEvent]:
    """The audit events that match ``query``, oldest first (or newest first, if asked)."""
    table = audit_events.c
    order = (
        (table.time_us.desc(), table.id.desc()) if query.newest_first else (table.time_us, table.id)
    )
    statement = sa.select(audit_events).order_by(*order).limit(query.limit)
    if query.namespaces is not None:
        statement = statement.where(table.namespace.in_(list(query.namespaces)))
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
    engine: AsyncEngine, start: datetime, end: datetime, namespaces: Sequence[str] | None = None
) -> list[Allocation]:
    """Allocations held for some time inside ``[start, end)``, oldest first.

    ``namespaces``: only pods of these namespaces (None: all).
    """
    table = allocations.c
    statement = (
        sa.select(allocations)
        .where(table.start_us < to_micros(end))
        .where(sa.or_(table.end_us.is_(None), table.end_us > to_micros(start)))
        .order_by(table.start_us, table.id)
    )
    if namespaces is not None:
        statement = statement.where(table.namespace.in_(list(namespaces)))
    return [_allocation(row) for row in await _rows(engine, statement)]


def _allocation(row: sa.RowMapping) -> Allocation:
    return Allocation(
        **{name: row[name] for name in _ALLOCATION_COLUMNS},
        start=from_micros(row["start_us"]),
        end=None if row["end_us"] is None else from_micros(row["end_us"]),
    )


async def open_allocations(engine: AsyncEngine) -> list[Allocation]:
    """Allocations with no end yet, oldest first (a leader reconciles them when it starts)."""
    statement = (
        sa.select(allocations)
        .where(allocations.c.end_us.is_(None))
        .order_by(allocations.c.start_us, allocations.c.id)
    )
    return [_allocation(row) for row in await _rows(engine, statement)]


async def last_sample_time(engine: AsyncEngine, pod_uid: str) -> datetime | None:
    """When the pod's latest stored usage sample was taken; ``None`` without any."""
    statement = sa.select(sa.func.max(usage_samples.c.time_us)).where(
        usage_samples.c.pod_uid == pod_uid
    )
    async with engine.connect() as connection:
        latest = (await connection.execute(statement)).scalar()
    return None if latest is None else from_micros(int(latest))


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


async def namespaces_recorded(engine: AsyncEngine) -> set[str]:
    """Every namespace an audit event or an allocation names ("" for cluster-scoped objects)."""
    statement = sa.union(
        sa.select(audit_events.c.namespace).distinct(),
        sa.select(allocations.c.namespace).distinct(),
    )
    async with engine.connect() as connection:
        return {row[0] for row in await connection.execute(statement)}


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
