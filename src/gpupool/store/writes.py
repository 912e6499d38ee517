"""The idempotent statements: a batch written twice leaves the tables as if written once.

Audit events and usage samples are ``INSERT ... ON CONFLICT (key) DO NOTHING``. An allocation
is ``INSERT ... ON CONFLICT (key) DO UPDATE SET end = excluded.end WHERE end IS NULL``: its start
inserts the row, its end inserts the whole row if the start never arrived (the writer started
after the bind) or else only closes the open row, and a replayed start or end changes nothing.
The end carries the whole allocation for that reason.

Both SQLite (3.24+) and PostgreSQL speak this dialect of upsert; SQLAlchemy's per-dialect
``insert`` renders it. A batch is written as one statement per table, in the caller's
transaction, with the same effect as writing its records one by one in the order they were
queued (:func:`rows_by_table`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from gpupool.store.records import Allocation, AuditEvent, Record, UsageSample, to_micros
from gpupool.store.tables import allocations, audit_events, usage_samples

Row = dict[str, Any]


def audit_row(event: AuditEvent) -> Row:
    """The ``audit_events`` row of an event."""
    return {
        "key": event.key,
        "time_us": to_micros(event.time),
        "action": event.action.value,
        "object_kind": event.kind,
        "namespace": event.namespace,
        "name": event.name,
        "uid": event.uid,
        "tenant": event.tenant,
        "pool": event.pool,
        "reason": event.reason,
        "decision_values": dict(event.values),
        "actor": event.actor,
    }


def allocation_row(allocation: Allocation) -> Row:
    """The ``allocations`` row of an allocation."""
    return {
        "key": allocation.key,
        "pod_uid": allocation.pod_uid,
        "namespace": allocation.namespace,
        "name": allocation.name,
        "queue": allocation.queue,
        "pool": allocation.pool,
        "node": allocation.node,
        "kind": allocation.kind,
        "units": allocation.units,
        "memory_gib": allocation.memory_gib,
        "start_us": to_micros(allocation.start),
        "end_us": None if allocation.end is None else to_micros(allocation.end),
    }


def usage_row(sample: UsageSample) -> Row:
    """The ``usage_samples`` row of a sample."""
    return {
        "key": sample.key,
        "pod_uid": sample.pod_uid,
        "time_us": to_micros(sample.time),
        "sm_percent": sample.sm_percent,
        "memory_used_gib": sample.memory_used_gib,
    }


@functools.cache
def _statement(dialect: str, table: sa.Table) -> sa.Executable:
    insert: Any = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
    if table is not allocations:
        return insert.on_conflict_do_nothing(index_elements=["key"])  # type: ignore[no-any-return]
    return insert.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=["key"],
        set_={"end_us": insert.excluded.end_us},
        where=allocations.c.end_us.is_(None),
    )


_TABLES: dict[type, tuple[sa.Table, Callable[[Any], Row]]] = {
    AuditEvent: (audit_events, audit_row),
    Allocation: (allocations, allocation_row),
    UsageSample: (usage_samples, usage_row),
}


def rows_by_table(records: Sequence[Record]) -> list[tuple[sa.Table, list[Row]]]:
    """One list of rows per table, one row per key: the effect of writing the records in order.

    The first record of a key wins (what ``DO NOTHING`` does), except that an allocation's first
    end replaces its start (what the guarded update does). One statement per table keeps a batch
    to three round trips, where a scheduler's interleaved bind events and allocation starts
    would otherwise cost one statement each; and PostgreSQL refuses an upsert that touches the
    same row twice in one statement, which a start and an end in one batch would do.
    """
    by_table: dict[sa.Table, dict[str, Row]] = {}
    for record in records:
        table, to_row = _TABLES[type(record)]
        row = to_row(record)
        kept = by_table.setdefault(table, {}).get(row["key"])
        ends_it = kept is not None and kept.get("end_us") is None and row.get("end_us") is not None
        if kept is None or ends_it:
            by_table[table][row["key"]] = row
    return [(table, list(rows.values())) for table, rows in by_table.items()]


async def write_batch(connection: AsyncConnection, records: Sequence[Record]) -> None:
    """Write ``records`` in order, idempotently, in the connection's transaction."""
    dialect = connection.dialect.name
    for table, rows in rows_by_table(records):
        await connection.execute(_statement(dialect, table), rows)
