"""How fast the store takes audit and accounting records, and how fast accounting adds them up.

Streams ``--records`` records (four audit events to one allocation start and its end) through
:class:`gpupool.store.writer.StoreWriter` into the store at ``--url`` (a fresh SQLite file by
default; pass a PostgreSQL URL to measure that) and reports records per second from the first
record handed over to the last one landed. Then times
:func:`gpupool.governance.accounting.account` over ``--intervals`` allocations with as many
usage samples, grouped by queue. The scheduler binds a few hundred pods per second, so the
writer must take well over that.

    .venv/bin/python bench/store_writes.py --json out/bench/store_writes.json
    .venv/bin/python bench/store_writes.py --url postgresql+asyncpg://gpupool@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.governance.accounting import GroupBy, Interval, Sample, Window, account
from gpupool.sim.provenance import provenance
from gpupool.store.engine import open_store
from gpupool.store.records import Allocation, AuditAction, AuditEvent
from gpupool.store.writer import StoreWriter

T0 = datetime(2026, 11, 1, tzinfo=UTC)


async def stream(url: str, records: int, batch_size: int) -> dict[str, Any]:
    engine = await open_store(url)
    try:
        writer = StoreWriter(engine, batch_size=batch_size, capacity=max(records, batch_size))
        started = time.perf_counter()
        async with writer:
            for i in range(records):
                when = T0 + timedelta(milliseconds=i)
                if i % 6 == 4:
                    allocation = Allocation(
                        f"uid-{i}", "ml", f"p{i}", f"team-{i % 7}", "a100", f"n{i % 100}",
                        "whole", 1.0, 80.0, when,
                    )  # fmt: skip
                    await writer.allocation_started(allocation)
                elif i % 6 == 5:
                    await writer.allocation_ended(allocation, when)
                else:
                    await writer.audit(
                        AuditEvent(
                            when, AuditAction.BIND, "Pod", "ml", f"p{i}", reason="best score",
                            values={"score": i, "node": f"n{i % 100}"}, uid=f"uid-{i}",
                            tenant=f"team-{i % 7}", pool="a100", actor="bench",
                        )
                    )  # fmt: skip
        seconds = time.perf_counter() - started
        return {
            "records": records,
            "batch_size": batch_size,
            "seconds": round(seconds, 3),
            "records_per_second": round(records / seconds, 1),
            "failed_attempts": writer.stats.failed_attempts,
        }
    finally:
        await engine.dispose()


def accounting_speed(count: int, seed: int = 42) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    starts = rng.uniform(0, 30 * 86400, count)
    lengths = rng.exponential(6 * 3600, count)
    intervals = [
        Interval(f"u{i}", f"ns{i % 50}", f"p{i}", f"q{i % 20}", f"pool{i % 4}", 1.0, 80.0,
                 float(starts[i]), float(starts[i] + lengths[i]))
        for i in range(count)
    ]  # fmt: skip
    samples = [Sample(f"u{i}", float(starts[i] + lengths[i] / 2), 50.0, 40.0) for i in range(count)]
    started = time.perf_counter()
    usage = account(intervals, Window(0, 30 * 86400), GroupBy.QUEUE, samples)
    seconds = time.perf_counter() - started
    return {
        "intervals": count,
        "samples": count,
        "groups": len(usage),
        "seconds": round(seconds, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="", help="store URL (default: a fresh SQLite file)")
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--intervals", type=int, default=200_000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        url = args.url or f"sqlite+aiosqlite:///{Path(scratch) / 'bench.db'}"
        writes = asyncio.run(stream(url, args.records, args.batch_size))
    backend = url.split(":", 1)[0]
    print(
        f"store writes ({backend}): {writes['records_per_second']:.0f} records/s "
        f"({writes['records']} records in {writes['seconds']:.2f} s, batches of {args.batch_size})"
    )
    accounting = accounting_speed(args.intervals)
    print(
        f"accounting: {accounting['intervals']} intervals and {accounting['samples']} samples "
        f"by queue in {accounting['seconds']:.2f} s"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "backend": backend,
            "writes": writes,
            "accounting": accounting,
            **provenance(),
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
