"""Buffer and retry: the scheduler hands records over and goes on; they land when they can.

A decision must not wait for a database round trip, and a database restart must not lose the
record of a decision. So records go into an in-memory buffer, a background task writes them in
batches (up to ``batch_size`` records, or whatever is there once the oldest has waited
``flush_interval``), and a batch that fails is kept, in place and in order, and retried with
exponential backoff until it lands. Every write is idempotent (:mod:`gpupool.store.writes`), so
a retry after an ambiguous failure (the commit reached the server but its answer did not come
back) never writes a record twice.

When the buffer is full the producer waits (backpressure) rather than a record being dropped:
an audit trail with holes, or a bill that misses allocations, is worse than a scheduler that
slows down while its database is away. The default capacity, 100,000 records (tens of MB),
rides out several minutes of outage at hundreds of binds per second before anyone waits.

What a crash can lose: :meth:`StoreWriter.close` (on SIGTERM) writes everything before it
returns; a SIGKILL or a power cut loses what was still in the buffer: at most the records of the
last ``flush_interval`` (1 s by default), plus whatever piled up while the database was away.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from gpupool.retry import Backoff, retry
from gpupool.store.records import Allocation, AuditEvent, Record, RecordError, UsageSample
from gpupool.store.writes import write_batch

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WriterStats:
    """What a writer has done so far.

    Attributes:
        queued: Records accepted.
        written: Records that landed (each counted once, however many tries it took).
        pending: Records in the buffer, not yet landed.
        failed_attempts: Batch writes that failed and were retried.
    """

    queued: int
    written: int
    pending: int
    failed_attempts: int


class WriterClosedError(RuntimeError):
    """A record was handed to a writer that is closing or closed."""


class StoreWriter:
    """Buffers audit and accounting records and writes them, in order, until they land.

    Usage::

        engine = await open_store(url)
        async with StoreWriter(engine) as writer:
            await writer.audit(AuditEvent(time=now, action=AuditAction.BIND, kind="Pod",
                                          namespace="ml", name="train-0", uid=uid,
                                          tenant="team-a", pool="a100", reason="best score",
                                          values={"score": 42}, actor="gpupool-0",
                                          key=f"bind/{uid}"))
            await writer.allocation_started(allocation)
            ...
            await writer.allocation_ended(allocation, end=later)

    Each call returns once the record is in the buffer (at once, unless the buffer is full);
    :meth:`flush` waits until everything handed over so far has landed; leaving the ``async
    with`` block (or :meth:`close`) flushes and stops the background task.

    Args:
        engine: The store's engine (:func:`gpupool.store.engine.open_store`).
        capacity: Most records buffered; beyond it the producer waits.
        batch_size: Most records per transaction.
        flush_interval: Seconds the oldest buffered record waits for a fuller batch.
        retry_initial: First wait after a failed batch, in seconds; doubles per failure.
        retry_max: Longest wait between tries.
        attempt_timeout: Longest one try may take before it counts as failed (a hung server).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        capacity: int = 100_000,
        batch_size: int = 500,
        flush_interval: float = 1.0,
        retry_initial: float = 0.05,
        retry_max: float = 5.0,
        attempt_timeout: float = 30.0,
    ) -> None:
        if capacity < batch_size or batch_size < 1:
            raise ValueError(f"need 1 <= batch_size ({batch_size}) <= capacity ({capacity})")
        self._engine = engine
        self._capacity = capacity
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._retry = Backoff(retry_initial, retry_max)
        self._attempt_timeout = attempt_timeout
        self._buffer: deque[Record] = deque()
        self._queued = 0
        self._written = 0
        self._failed_attempts = 0
        self._changed = asyncio.Condition()
        self._has_records = asyncio.Event()
        self._due = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The store it writes to (for the reads a writer's owner needs, such as reconciling)."""
        return self._engine

    async def __aenter__(self) -> StoreWriter:
        self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def start(self) -> None:
        """Start the background task that writes the buffer."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="gpupool-store-writer")

    @property
    def stats(self) -> WriterStats:
        """Counts so far."""
        return WriterStats(self._queued, self._written, len(self._buffer), self._failed_attempts)

    async def audit(self, event: AuditEvent) -> None:
        """Queue an audit event."""
        await self.put(event)

    async def allocation_started(self, allocation: Allocation) -> None:
        """Queue the start of an allocation (its ``end`` must be ``None``)."""
        if allocation.end is not None:
            raise RecordError("end", "a started allocation has no end yet")
        await self.put(allocation)

    async def allocation_ended(self, allocation: Allocation, end: datetime) -> None:
        """Queue the end of an allocation: the whole allocation, so it lands even alone."""
        await self.put(replace(allocation, end=end))

    async def usage(self, sample: UsageSample) -> None:
        """Queue a usage sample."""
        await self.put(sample)

    async def put(self, record: Record) -> None:
        """Queue any record; waits while the buffer is full.

        Raises:
            WriterClosedError: The writer is closing.
            TypeError: ``record`` is not a record the store keeps (it would never land).
        """
        if not isinstance(record, AuditEvent | Allocation | UsageSample):
            raise TypeError(f"not a store record: {type(record).__name__}")
        async with self._changed:
            await self._changed.wait_for(
                lambda: self._closing or len(self._buffer) < self._capacity
            )
            if self._closing:
                raise WriterClosedError("the store writer is closed")
            self._buffer.append(record)
            self._queued += 1
        self._has_records.set()
        if len(self._buffer) >= self._batch_size:
            self._due.set()

    async def flush(self) -> None:
        """Wait until every record queued before this call has landed."""
        target = self._queued
        self._due.set()
        async with self._changed:
            await self._changed.wait_for(lambda: self._written >= target)

    async def close(self, timeout: float | None = 60.0) -> int:
        """Write what is buffered, stop, and return how many records did not land (0 = all).

        Args:
            timeout: Seconds to keep trying; ``None`` tries until everything lands.
        """
        async with self._changed:
            self._closing = True
            self._changed.notify_all()
        if self._buffer:
            self.start()  # records handed over before start() still land
        self._due.set()
        self._has_records.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        lost = len(self._buffer)
        if lost:
            _log.error("store writer closed with %d records not written", lost)
        return lost

    async def _run(self) -> None:
        while True:
            await self._has_records.wait()
            if not self._due.is_set() and not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._due.wait(), self._flush_interval)
            self._due.clear()
            while self._buffer:
                batch = list(itertools.islice(self._buffer, self._batch_size))
                await self._land(batch)
                async with self._changed:
                    for _ in batch:
                        self._buffer.popleft()
                    self._written += len(batch)
                    self._changed.notify_all()
            self._has_records.clear()
            if self._closing:
                return

    async def _land(self, batch: list[Record]) -> None:
        """Write one batch, retrying with backoff until it lands."""

        async def attempt() -> None:
            async with asyncio.timeout(self._attempt_timeout), self._engine.begin() as conn:
                await write_batch(conn, batch)

        def failed(error: Exception, delay: float) -> None:  # any failure: keep the batch
            self._failed_attempts += 1
            _log.warning(
                "store write of %d records failed (%s: %s); retrying in %.2f s",
                len(batch),
                type(error).__name__,
                str(error).splitlines()[0] if str(error) else "",
                delay,
            )

        await retry(attempt, self._retry, failed)
