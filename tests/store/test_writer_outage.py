"""No record lost, none written twice: the database goes away in the middle of a stream.

PostgreSQL is really restarted (``pg_ctl stop -m immediate``, a crash without a checkpoint,
then a start with recovery) while a writer streams 5,000 records. SQLite has no server to
restart: it is a file inside the process, and what an embedded database does under a running
writer is refuse it the lock, because another process holds it (a backup, a migration, a
``sqlite3`` shell). The SQLite test holds an exclusive lock from another connection for the
same stretch of the stream; the writer sees ``database is locked`` and must ride it out the same
way.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gpupool.store.engine import open_store
from gpupool.store.queries import count_rows
from gpupool.store.records import Allocation, AuditAction, AuditEvent
from gpupool.store.tables import allocations, audit_events
from gpupool.store.writer import StoreWriter, WriterClosedError

T0 = datetime(2026, 11, 1, tzinfo=UTC)
RECORDS = 5_000


def bind_event(i: int) -> AuditEvent:
    return AuditEvent(
        time=T0 + timedelta(seconds=i), action=AuditAction.BIND, kind="Pod", namespace="ml",
        name=f"p{i}", uid=f"uid-{i}", tenant=f"team-{i % 3}", values={"i": i},
        key=f"bind/uid-{i}",
    )  # fmt: skip


def record(i: int) -> AuditEvent | Allocation:
    """Mostly audit events; every fifth record an allocation (start, and later its end)."""
    when = T0 + timedelta(seconds=i)
    if i % 5:
        return bind_event(i)
    return Allocation(
        pod_uid=f"uid-{i}", namespace="ml", name=f"p{i}", queue=f"team-{i % 3}", pool="a100",
        node="n1", kind="whole", units=1.0, memory_gib=80.0, start=when,
    )  # fmt: skip


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


async def stream_through_outage(
    engine: Any, go_down: Callable[[], Awaitable[None]], come_back: Callable[[], Awaitable[None]]
) -> StoreWriter:
    writer = StoreWriter(
        engine, batch_size=100, flush_interval=0.02, retry_initial=0.05, retry_max=0.5
    )
    writer.start()
    ended: list[Allocation] = []
    for i in range(RECORDS):
        item = record(i)
        if isinstance(item, Allocation):
            await writer.allocation_started(item)
            ended.append(item)
        else:
            await writer.audit(item)
        if i % 10 == 0 and len(ended) > 20:  # end the allocations, in the same stream
            first = ended.pop(0)
            await writer.allocation_ended(first, end=first.start + timedelta(hours=1))
        if i % 50 == 0:
            await asyncio.sleep(0.001)  # a producer that makes records over time
        if i == 1500:
            await wait_until(lambda: writer.stats.written >= 1000, "records land before")
            await go_down()
        if i == 3000:
            await wait_until(lambda: writer.stats.failed_attempts >= 3, "the writer saw it")
            await come_back()
    assert await writer.close(timeout=120) == 0
    return writer


async def assert_everything_once(engine: Any, writer: StoreWriter) -> None:
    allocation_count = len(range(0, RECORDS, 5))
    assert await count_rows(engine, audit_events) == (RECORDS - allocation_count,) * 2
    assert await count_rows(engine, allocations) == (allocation_count,) * 2
    async with engine.connect() as connection:
        keys = set((await connection.execute(sa.select(audit_events.c.key))).scalars())
        ended = (
            await connection.execute(
                sa.select(sa.func.count()).where(allocations.c.end_us.is_not(None))
            )
        ).scalar_one()
    assert keys == {f"bind/uid-{i}" for i in range(RECORDS) if i % 5}
    assert ended == writer.stats.queued - RECORDS  # every end landed, none lost
    assert writer.stats.written == writer.stats.queued
    assert writer.stats.failed_attempts >= 3


async def test_postgres_restart_in_the_middle_of_a_stream(postgres: Any) -> None:
    engine = await open_store(postgres.url(postgres.create_database()))
    try:
        writer = await stream_through_outage(
            engine,
            lambda: asyncio.to_thread(postgres.stop, "immediate"),
            lambda: asyncio.to_thread(postgres.start),
        )
        await assert_everything_once(engine, writer)
    finally:
        await engine.dispose()


async def test_sqlite_locked_in_the_middle_of_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "gpupool.db"
    engine = await open_store(f"sqlite+aiosqlite:///{path}", busy_timeout_ms=20)
    other = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)

    async def lock() -> None:  # waits (in a thread) for the writer's transaction to end
        await asyncio.to_thread(other.execute, "BEGIN EXCLUSIVE")

    async def unlock() -> None:
        other.execute("COMMIT")

    try:
        writer = await stream_through_outage(engine, lock, unlock)
        await assert_everything_once(engine, writer)
    finally:
        other.close()
        await engine.dispose()


async def test_a_full_buffer_makes_the_producer_wait_not_drop(tmp_path: Path) -> None:
    path = tmp_path / "gpupool.db"
    engine = await open_store(f"sqlite+aiosqlite:///{path}", busy_timeout_ms=20)
    other = sqlite3.connect(path, isolation_level=None, timeout=0.1)
    writer = StoreWriter(engine, capacity=50, batch_size=10, flush_interval=0.01, retry_max=0.1)
    try:
        writer.start()
        other.execute("BEGIN EXCLUSIVE")
        for i in range(50):
            await writer.audit(bind_event(i * 5 + 1))
        blocked = asyncio.create_task(writer.audit(bind_event(999)))
        await asyncio.sleep(0.5)
        assert not blocked.done()  # waits while the database is away and the buffer is full
        assert writer.stats.pending == 50
        other.execute("COMMIT")
        await asyncio.wait_for(blocked, 30)
        assert await writer.close() == 0
        assert await count_rows(engine, audit_events) == (51, 51)
        with pytest.raises(WriterClosedError):
            await writer.audit(bind_event(2))
    finally:
        other.close()
        await engine.dispose()


async def test_close_flushes_so_a_restarted_control_plane_finds_everything(
    store_url: str,
) -> None:
    engine = await open_store(store_url)
    writer = StoreWriter(engine, flush_interval=3600)  # nothing would land on its own
    writer.start()
    for i in range(1, 300, 5):
        await writer.audit(bind_event(i))
    assert writer.stats.written == 0
    assert await writer.close() == 0  # what SIGTERM does
    await engine.dispose()
    restarted = await open_store(store_url)
    try:
        assert await count_rows(restarted, audit_events) == (60, 60)
    finally:
        await restarted.dispose()


async def test_a_commit_whose_answer_was_lost_is_not_written_twice(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch commits, then the connection drops before the answer: the writer retries."""
    from gpupool.store import writer as writer_module

    engine = await open_store(store_url)
    real_write = writer_module.write_batch
    answers_to_lose = 3

    async def commit_then_lose_the_answer(connection: Any, records: Any) -> None:
        nonlocal answers_to_lose
        if not answers_to_lose:
            await real_write(connection, records)
            return
        answers_to_lose -= 1
        async with engine.begin() as other:  # the commit reaches the database...
            await real_write(other, records)
        raise ConnectionResetError("connection lost before the commit's answer")  # ...no answer

    monkeypatch.setattr(writer_module, "write_batch", commit_then_lose_the_answer)
    try:
        writer = StoreWriter(engine, batch_size=40, flush_interval=0.01, retry_initial=0.01)
        async with writer:
            for i in range(200):
                item = record(i)
                if isinstance(item, Allocation):
                    await writer.allocation_started(item)
                    await writer.allocation_ended(item, end=item.start + timedelta(minutes=5))
                else:
                    await writer.audit(item)
        assert writer.stats.failed_attempts == 3
        assert await count_rows(engine, audit_events) == (160, 160)
        assert await count_rows(engine, allocations) == (40, 40)
        async with engine.connect() as connection:
            open_rows = (
                await connection.execute(
                    sa.select(sa.func.count()).where(allocations.c.end_us.is_(None))
                )
            ).scalar_one()
        assert open_rows == 0
    finally:
        await engine.dispose()


async def test_records_handed_over_before_start_land_at_close(tmp_path: Path) -> None:
    engine = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'gpupool.db'}")
    try:
        writer = StoreWriter(engine)
        await writer.audit(bind_event(1))
        assert await writer.close() == 0
        assert await count_rows(engine, audit_events) == (1, 1)
    finally:
        await engine.dispose()


async def test_close_says_how_many_records_did_not_land(tmp_path: Path) -> None:
    path = tmp_path / "gpupool.db"
    engine = await open_store(f"sqlite+aiosqlite:///{path}", busy_timeout_ms=20)
    other = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        other.execute("BEGIN EXCLUSIVE")  # the database stays away past the shutdown deadline
        writer = StoreWriter(engine, batch_size=10, flush_interval=0.01, retry_max=0.05)
        writer.start()
        for i in range(25):
            await writer.audit(bind_event(i))
        assert await writer.close(timeout=0.5) == 25
        assert writer.stats.failed_attempts >= 1
    finally:
        other.close()
        await engine.dispose()


async def test_something_that_is_not_a_record_is_refused_at_once(tmp_path: Path) -> None:
    engine = await open_store(f"sqlite+aiosqlite:///{tmp_path / 'gpupool.db'}")
    try:
        async with StoreWriter(engine) as writer:
            with pytest.raises(TypeError, match="not a store record: dict"):
                await writer.put({"action": "bind"})  # type: ignore[arg-type]
            assert writer.stats.queued == 0
    finally:
        await engine.dispose()
