"""The cost report: stored allocations and samples, accounted by :mod:`gpupool.governance`.

The report's totals and its per-bucket series (the charts) come from the same accounting over
a partition of the window, so the bars of a team's chart add up to the team's line in the table.
An allocation still open is counted up to ``now``, never beyond: a report whose window ends in
the future does not bill hours that have not happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from gpupool.governance.accounting import GroupBy, Interval, Sample, Usage, Window, account, total
from gpupool.store.queries import allocations_overlapping, usage_samples_between
from gpupool.store.records import Allocation, to_micros

MICROS = 1e6
_BUCKETS = (
    (timedelta(days=2), timedelta(hours=1)),
    (timedelta(days=62), timedelta(days=1)),
)
_LONGEST_BUCKET = timedelta(weeks=1)


@dataclass(frozen=True, slots=True)
class Bucket:
    """One bar of the charts: what each group held and used in ``[start, end)``."""

    start: datetime
    end: datetime
    usage: dict[str, Usage]


@dataclass(frozen=True, slots=True)
class CostReport:
    """GPU-hours, GPU memory GiB-hours and efficiency over a window.

    Attributes:
        start: The window's start.
        end: The window's end.
        by: What the groups are.
        groups: One line per group, sorted by name.
        total: Everything in the window.
        buckets: The window cut into hours, days or weeks, for the charts.
    """

    start: datetime
    end: datetime
    by: GroupBy
    groups: tuple[Usage, ...]
    total: Usage
    buckets: tuple[Bucket, ...]


def bucket_length(start: datetime, end: datetime) -> timedelta:
    """Hours for a window of up to 2 days, days up to 62 days, weeks beyond."""
    for longest, length in _BUCKETS:
        if end - start <= longest:
            return length
    return _LONGEST_BUCKET


def _seconds(moment: datetime) -> float:
    return to_micros(moment) / MICROS


def _interval(allocation: Allocation, now: datetime) -> Interval:
    end = allocation.end if allocation.end is not None else max(now, allocation.start)
    return Interval(
        pod_uid=allocation.pod_uid,
        namespace=allocation.namespace,
        name=allocation.name,
        queue=allocation.queue,
        pool=allocation.pool,
        units=allocation.units,
        memory_gib=allocation.memory_gib,
        start=_seconds(allocation.start),
        end=_seconds(end),
    )


async def cost_report(
    engine: AsyncEngine,
    start: datetime,
    end: datetime,
    by: GroupBy,
    now: datetime,
    namespaces: Sequence[str] | None = None,
) -> CostReport:
    """Account the store's allocations over ``[start, end)`` by ``by``.

    Args:
        engine: The store.
        start: The window's start (aware).
        end: The window's end (aware), after ``start``.
        by: Group by queue, namespace, pool or pod.
        now: The present: open allocations are counted up to it.
        namespaces: Only pods of these namespaces (None: all), as a per-namespace reader of
            the API sees them.
    """
    stored = await allocations_overlapping(engine, start, end, namespaces)
    intervals = [_interval(a, now) for a in stored]
    samples: list[Sample] = []
    if stored:
        earliest = min(a.start for a in stored)  # a sample before the window holds into it
        samples = [
            Sample(s.pod_uid, _seconds(s.time), s.sm_percent, s.memory_used_gib)
            for s in await usage_samples_between(engine, earliest, end)
        ]
    window = Window(_seconds(start), _seconds(end))
    buckets: list[Bucket] = []
    length = bucket_length(start, end)
    edge = start
    while edge < end:
        upper = min(edge + length, end)
        piece = account(intervals, Window(_seconds(edge), _seconds(upper)), by, samples)
        buckets.append(Bucket(edge, upper, {usage.group: usage for usage in piece}))
        edge = upper
    return CostReport(
        start=start,
        end=end,
        by=by,
        groups=account(intervals, window, by, samples),
        total=total(intervals, window, samples),
        buckets=tuple(buckets),
    )
