"""The store on SQLite and on a real PostgreSQL: schema, round trips, queries, idempotency."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine

from gpupool.store.engine import (
    StoreURLError,
    create_engine,
    current_revision,
    head_revision,
    open_store,
    store_url,
)
from gpupool.store.queries import (
    AuditQuery,
    allocations_overlapping,
    audit_events_matching,
    count_rows,
    last_sample_time,
    open_allocations,
    usage_samples_between,
)
from gpupool.store.records import (
    Allocation,
    AuditAction,
    AuditEvent,
    RecordError,
    UsageSample,
    from_micros,
    to_micros,
)
from gpupool.store.tables import allocations, audit_events, metadata, usage_samples
from gpupool.store.writer import StoreWriter
from gpupool.store.writes import allocation_row, audit_row, rows_by_table, write_batch

T0 = datetime(2026, 11, 1, 8, 0, 0, 123456, tzinfo=UTC)


def event(i: int, *, action: AuditAction = AuditAction.BIND, tenant: str = "team-a") -> AuditEvent:
    return AuditEvent(
        time=T0 + timedelta(minutes=i),
        action=action,
        kind="Pod",
        namespace="ml",
        name=f"train-{i}",
        uid=f"uid-{i}",
        tenant=tenant,
        pool="a100",
        reason=f"score {i} was the best of 3 nodes",
        values={"score": i, "node": f"n{i % 3}", "candidates": [1.5, 2.0], "ok": True},
        actor="gpupool-0",
        key=f"{action.value}/uid-{i}",
    )


def allocation(i: int, start_min: int, end_min: int | None) -> Allocation:
    return Allocation(
        pod_uid=f"uid-{i}", namespace="ml", name=f"train-{i}", queue="team-a", pool="a100",
        node="n1", kind="share", units=0.5, memory_gib=40.0,
        start=T0 + timedelta(minutes=start_min),
        end=None if end_min is None else T0 + timedelta(minutes=end_min),
    )  # fmt: skip


async def test_migrations_build_the_schema_from_empty(store_url: str) -> None:
    empty = create_engine(store_url)
    try:
        assert await current_revision(empty) is None
    finally:
        await empty.dispose()
    engine = await open_store(store_url)
    try:
        assert await current_revision(engine) == head_revision() == "0001"
        async with engine.connect() as connection:

            def differences(sync: sa.Connection) -> list[object]:
                return list(compare_metadata(MigrationContext.configure(sync), metadata))

            assert await connection.run_sync(differences) == []
        # upgrading again (the automatic upgrade at every start) changes nothing
        again = await open_store(store_url)
        await again.dispose()
        assert await current_revision(engine) == "0001"
    finally:
        await engine.dispose()


async def test_audit_events_round_trip_exactly(engine: AsyncEngine) -> None:
    events = [event(i) for i in range(20)]
    async with StoreWriter(engine, flush_interval=0.01) as writer:
        for e in events:
            await writer.audit(e)
        await writer.flush()
        assert writer.stats.written == 20
    assert await audit_events_matching(engine, AuditQuery()) == events


async def test_audit_queries_by_time_tenant_pod_and_action(engine: AsyncEngine) -> None:
    events = [
        event(0),
        event(1, tenant="team-b"),
        event(2, action=AuditAction.PREEMPT),
        event(3, action=AuditAction.REJECT, tenant="team-b"),
        event(4, action=AuditAction.POLICY_CHANGE, tenant=""),
    ]
    async with engine.begin() as connection:
        await write_batch(connection, events)

    async def names(**query: object) -> list[str]:
        found = await audit_events_matching(engine, AuditQuery(**query))  # type: ignore[arg-type]
        return [e.name for e in found]

    assert await names(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=3)) == [
        "train-1",
        "train-2",
    ]
    assert await names(tenant="team-b") == ["train-1", "train-3"]
    assert await names(pod="uid-2") == ["train-2"]
    assert await names(pod="train-3") == ["train-3"]
    assert await names(pod="ml/train-4") == ["train-4"]
    assert await names(pod="other/train-4") == []
    assert await names(actions=[AuditAction.PREEMPT, AuditAction.REJECT]) == ["train-2", "train-3"]
    assert await names(tenant="team-b", actions=[AuditAction.BIND]) == ["train-1"]
    assert await names(limit=2) == ["train-0", "train-1"]


async def test_writes_are_idempotent(engine: AsyncEngine) -> None:
    batch = [event(i) for i in range(10)]
    batch += [allocation(i, 0, None) for i in range(5)]
    batch += [UsageSample(f"uid-{i}", T0, 50.0, 10.0) for i in range(5)]
    for _ in range(3):  # a retry after an ambiguous failure replays a batch that had landed
        async with engine.begin() as connection:
            await write_batch(connection, batch)
    assert await count_rows(engine, audit_events) == (10, 10)
    assert await count_rows(engine, allocations) == (5, 5)
    assert await count_rows(engine, usage_samples) == (5, 5)
    # the same event made again with the same key is the same record
    async with StoreWriter(engine, flush_interval=0.01) as writer:
        await writer.audit(event(3))
    assert await count_rows(engine, audit_events) == (10, 10)


async def test_allocation_start_and_end(engine: AsyncEngine) -> None:
    started = allocation(1, 0, None)
    async with StoreWriter(engine, flush_interval=0.01) as writer:
        await writer.allocation_started(started)
        await writer.allocation_ended(started, end=T0 + timedelta(minutes=90))
        await writer.allocation_started(started)  # a replayed start does not reopen it
        await writer.allocation_ended(started, end=T0 + timedelta(minutes=95))  # first end wins
        # an end whose start never reached the store still lands, whole
        await writer.allocation_ended(allocation(2, 10, None), end=T0 + timedelta(minutes=20))
        await writer.allocation_started(allocation(3, 30, None))
        with pytest.raises(RecordError, match=r"^end:"):
            await writer.allocation_started(allocation(4, 0, 5))
    window = (T0, T0 + timedelta(days=1))
    assert await allocations_overlapping(engine, *window) == [
        allocation(1, 0, 90),
        allocation(2, 10, 20),
        allocation(3, 30, None),
    ]
    # overlap: [start, end) against [from, to)
    later = await allocations_overlapping(
        engine, T0 + timedelta(minutes=20), T0 + timedelta(minutes=31)
    )
    assert [a.pod_uid for a in later] == ["uid-1", "uid-3"]
    assert await count_rows(engine, allocations) == (3, 3)


async def test_usage_samples_round_trip(engine: AsyncEngine) -> None:
    samples = [UsageSample("uid-1", T0 + timedelta(seconds=s), 12.5 * s, 3.25) for s in range(4)]
    async with StoreWriter(engine, flush_interval=0.01) as writer:
        for sample in samples:
            await writer.usage(sample)
    assert await usage_samples_between(engine, T0, T0 + timedelta(seconds=3)) == samples[:3]


async def test_open_allocations_and_a_pods_last_sample(engine: AsyncEngine) -> None:
    """What a new leader reads to close the intervals of pods that ended with no leader."""
    async with StoreWriter(engine, flush_interval=0.01) as writer:
        await writer.allocation_started(allocation(1, 0, None))
        await writer.allocation_started(allocation(2, 10, None))
        await writer.allocation_ended(allocation(2, 10, None), end=T0 + timedelta(minutes=20))
        await writer.allocation_started(allocation(3, 5, None))
        for seconds in (30, 90, 60):
            await writer.usage(UsageSample("uid-1", T0 + timedelta(seconds=seconds), 50, 1))
    assert [a.pod_uid for a in await open_allocations(engine)] == ["uid-1", "uid-3"]
    assert await last_sample_time(engine, "uid-1") == T0 + timedelta(seconds=90)
    assert await last_sample_time(engine, "uid-3") is None


def test_times_are_kept_to_the_microsecond() -> None:
    assert from_micros(to_micros(T0)) == T0
    assert to_micros(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert from_micros(to_micros(T0)).tzinfo is UTC


def bind(**changes: object) -> AuditEvent:
    fields: dict[str, object] = {
        "time": T0, "action": AuditAction.BIND, "kind": "Pod", "namespace": "ns", "name": "p",
    }  # fmt: skip
    return AuditEvent(**{**fields, **changes})  # type: ignore[arg-type]


def whole(**changes: object) -> Allocation:
    fields: dict[str, object] = {
        "pod_uid": "u", "namespace": "ns", "name": "p", "queue": "q", "pool": "pool",
        "node": "n", "kind": "whole", "units": 1.0, "memory_gib": 80.0, "start": T0,
    }  # fmt: skip
    return Allocation(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: bind(time=datetime(2026, 1, 1)), "time"),
        (lambda: bind(action="explode"), "action"),
        (lambda: bind(name=""), "name"),
        (lambda: bind(values={"x": object()}), "values"),
        (lambda: bind(values={"x": float("nan")}), "values"),
        (lambda: bind(namespace="x" * 300), "namespace"),
        (lambda: bind(key=""), "key"),
        (lambda: whole(units=-1.0), "units"),
        (lambda: whole(end=T0 - timedelta(seconds=1)), "end"),
        (lambda: UsageSample("u", T0, float("inf"), 0.0), "sm_percent"),
    ],
)
def test_records_refuse_what_the_database_would_refuse(build: object, field: str) -> None:
    with pytest.raises(RecordError, match=f"^{field}:"):
        build()  # type: ignore[operator]


def test_a_string_action_is_read_as_the_enum() -> None:
    assert bind(action="reclaim").action is AuditAction.RECLAIM


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "not supported"),
        ("not a url", "cannot read"),
        ("sqlite://", "needs a file"),
    ],
)
def test_bad_urls_say_why(url: str, message: str) -> None:
    with pytest.raises(StoreURLError, match=message):
        store_url(url)


def test_plain_urls_get_the_async_driver() -> None:
    assert store_url("sqlite:///x.db").drivername == "sqlite+aiosqlite"
    assert store_url("postgresql://u@h/db").drivername == "postgresql+asyncpg"


def test_a_batch_is_one_row_per_key_with_the_effect_of_writing_in_order() -> None:
    start = allocation(1, 0, None)
    first_end, second_end = allocation(1, 0, 10), allocation(1, 0, 20)
    assert rows_by_table([start, first_end, start, second_end]) == [
        (allocations, [allocation_row(first_end)])
    ]
    assert rows_by_table([first_end, start]) == [(allocations, [allocation_row(first_end)])]
    bind_twice = [event(1), event(2), replace(event(1), reason="again")]
    tables = rows_by_table([*bind_twice, start])
    assert tables == [
        (audit_events, [audit_row(event(1)), audit_row(event(2))]),
        (allocations, [allocation_row(start)]),
    ]


async def test_replicas_starting_together_upgrade_once(postgres: object) -> None:
    url = postgres.url(postgres.create_database())  # type: ignore[attr-defined]
    engines = await asyncio.gather(*(open_store(url) for _ in range(4)))
    try:
        assert {await current_revision(e) for e in engines} == {"0001"}
    finally:
        for engine in engines:
            await engine.dispose()
