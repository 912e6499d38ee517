"""Congestion by class over time: pending seconds each class and queue imposes, idle GPU-hours.

Both drivers (the simulated cluster and the live scheduler) feed one :class:`CongestionLedger`
after each engine cycle with the pods that wait and why. A cause found at a cycle holds until the
next one: nothing the engine reads changes between cycles without a cycle following (an arrival,
an end, a bind, a node), so the interval ``[last cycle, this cycle)`` is charged under the causes
the *last* cycle gave, and :meth:`CongestionLedger.settle` charges the open interval up to a
reader's ``now`` without waiting for a cycle (a pod parked behind a reservation may see none for
minutes). A pod that arrived between cycles is charged from the first cycle that saw it: the time
before is pending time no cause explains yet, as ``not_tried`` counts it on ``/metrics``.

Charges are cut at bucket marks (a minute by default) so the dashboard plots them over time, and
also added to running totals that never shrink, which ``/metrics`` exports as counters. Only the
latest ``keep`` buckets are kept; the totals cover the ledger's whole life. Every charged second
lands in exactly one of imposed, self-imposed or unattributed, so they add up to the pending
seconds charged (the property tests check it).

The share of contention (a class's part in GPU compute contention, measured per GPU by the
interference work) is not measured here: :meth:`CongestionLedger.as_json` leaves each row's
``contention_share`` ``None`` until a driver supplies it through ``contention``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from gpupool.governance.accounting import SECONDS_PER_HOUR
from gpupool.governance.congestion import (
    PREEMPTION,
    Party,
    Share,
    eviction_shares,
    proportional,
    wait_shares,
)
from gpupool.governance.errors import FieldValueError
from gpupool.scheduling.wait_cause import WaitCause, WaitKind

K = TypeVar("K")

Charge = tuple[Party, str]
"""A culprit and the cause it is charged under."""


class CongestionError(FieldValueError):
    """A ledger setting or input cannot be used; the message names the field."""


@dataclass(slots=True)
class Bucket:
    """What was charged over one stretch of time (one bucket, or the ledger's whole life)."""

    imposed: dict[Charge, float] = field(default_factory=dict)
    """Pending seconds a party imposed on other parties, by cause."""
    self_imposed: dict[Charge, float] = field(default_factory=dict)
    """Pending seconds a party's pods spent held by the party itself, by cause."""
    unattributed: dict[str, float] = field(default_factory=dict)
    """Pending seconds no party could be named for, by cause."""
    idle_gpu_seconds: dict[Party, float] = field(default_factory=dict)
    """GPU-seconds a party held without using them."""
    pending_seconds: float = 0.0
    """Every pending second charged (imposed + self-imposed + unattributed, without evictions)."""

    def charge(self, waiter: Party, cause: str, share: Share, seconds: float) -> None:
        """File ``seconds`` of ``waiter``'s wait under ``share``'s culprit."""
        amount = seconds * share.fraction
        if share.culprit is None:
            _add(self.unattributed, cause, amount)
        elif share.imposed_on(waiter):
            _add(self.imposed, (share.culprit, cause), amount)
        else:
            _add(self.self_imposed, (share.culprit, cause), amount)


def _add(table: dict[K, float], key: K, amount: float) -> None:
    table[key] = table.get(key, 0.0) + amount


@dataclass(frozen=True, slots=True)
class _Held:
    waiter: Party
    cause: str
    shares: tuple[Share, ...]


class CongestionLedger:
    """Charges pending time to the classes and queues that cause it, per bucket and in total.

    Args:
        bucket_seconds: Width of one bucket of the series.
        keep: Buckets kept (the oldest go first).
    """

    def __init__(self, bucket_seconds: float = 60.0, keep: int = 1440) -> None:
        if not (math.isfinite(bucket_seconds) and bucket_seconds > 0):
            raise CongestionError("bucket_seconds", f"must be > 0, got {bucket_seconds}")
        if keep < 1:
            raise CongestionError("keep", f"must be at least 1, got {keep}")
        self.bucket_seconds = bucket_seconds
        self.keep = keep
        self.totals = Bucket()
        self.buckets: dict[int, Bucket] = {}
        self._held: dict[str, _Held] = {}
        self._groups: Counter[_Held] = Counter()
        self._since: float | None = None

    def cycle(
        self,
        now: float,
        waiting: Sequence[tuple[str, Party, WaitCause]],
        parties: Mapping[str, Party],
        holding: Mapping[Party, float],
        still_pending: Collection[str] | None = None,
    ) -> None:
        """A cycle left ``waiting`` pending: charge the time since the last, then hold these.

        Args:
            now: The cycle's time.
            waiting: Each waiting pod's name, party and cause.
            parties: The party of each pod a cause may name (pending and running).
            holding: GPU units held per party now.
            still_pending: The pods pending now, when the cycle decided for only some of them
                (the live scheduler leaves pods in backoff out): the others keep the cause they
                were held by. ``None``: the cycle decided for every pending pod.
        """
        self.settle(now)
        kept = {} if still_pending is None else self._held
        self._held = {name: held for name, held in kept.items() if name in (still_pending or ())}
        capacity = proportional(holding)
        alike: dict[tuple[Party, WaitKind, tuple[str, ...]], _Held] = {}  # most waits repeat
        for name, waiter, cause in waiting:
            key = (waiter, cause.kind, cause.pods)
            held = alike.get(key)
            if held is None:
                shares = wait_shares(waiter, cause, parties, capacity)
                held = alike[key] = _Held(waiter, cause.kind.value, shares)
            self._held[name] = held
        # pods held alike are charged alike: one pass per distinct hold, times how many
        self._groups = Counter(self._held.values())

    def settle(self, now: float) -> None:
        """Charge the pods held at the last cycle up to ``now`` (a clock that went back: none)."""
        since, self._since = self._since, now
        if since is None or now <= since:
            return
        for bucket, seconds in self._pieces(since, now):
            for target in (bucket, self.totals):
                for held, count in self._groups.items():
                    target.pending_seconds += seconds * count
                    for share in held.shares:
                        target.charge(held.waiter, held.cause, share, seconds * count)

    def stop(self, now: float) -> None:
        """Charge up to ``now``, then hold no pod: the driver stopped deciding (a lost term).

        The next :meth:`cycle` starts afresh, so the time nobody decided is charged to no one.
        """
        self.settle(now)
        self._held, self._groups, self._since = {}, Counter(), None

    def evicted(self, now: float, preemptor: Party, victims: Sequence[tuple[Party, float]]) -> None:
        """Victims lost these run seconds to ``preemptor``: charged to it under ``preemption``."""
        for culprit, victim, seconds in eviction_shares(preemptor, victims):
            for target in (self._bucket(math.floor(now / self.bucket_seconds)), self.totals):
                table = target.imposed if culprit != victim else target.self_imposed
                _add(table, (culprit, PREEMPTION), seconds)

    def idle(self, party: Party, gpus: float, start: float, end: float) -> None:
        """``party`` held ``gpus`` GPUs unused over ``[start, end)``."""
        if gpus < 0:
            raise CongestionError("gpus", f"must be >= 0, got {gpus}")
        if end <= start:
            return
        for bucket, seconds in self._pieces(start, end):
            for target in (bucket, self.totals):
                _add(target.idle_gpu_seconds, party, gpus * seconds)

    def _bucket(self, index: int) -> Bucket:
        bucket = self.buckets.get(index)
        if bucket is None:
            bucket = self.buckets[index] = Bucket()
            while len(self.buckets) > self.keep:
                del self.buckets[min(self.buckets)]
        return bucket

    def _pieces(self, start: float, end: float) -> Iterator[tuple[Bucket, float]]:
        """The buckets ``[start, end)`` crosses, with the seconds it spends in each."""
        at, index = start, math.floor(start / self.bucket_seconds)
        while at < end:
            upto = min(end, (index + 1) * self.bucket_seconds)
            if upto > at:  # a mark that rounds onto ``at`` has no width: the next bucket
                yield self._bucket(index), upto - at
                at = upto
            index += 1

    def summary(self, contention: Mapping[str, float] | None = None) -> dict[str, object]:
        """The totals: per class and queue (most imposed first), and what nobody caused.

        ``contention``: per workload class, its share of GPU contention
        (:func:`gpupool.core.contention.contention_share_by_class`), where measured: every queue's
        row of a class shows its class's share (contention is measured per GPU and class, not per
        queue); ``None``: not measured.
        """
        totals = self.totals
        parties = {party for table in (totals.imposed, totals.self_imposed) for party, _ in table}
        parties |= set(totals.idle_gpu_seconds)
        shares = None if contention is None else dict(contention)
        rows = [
            _row(totals, party, None if shares is None else shares.get(party.workload_class, 0.0))
            for party in sorted(parties)
        ]
        rows.sort(key=lambda row: -float(str(row["imposed_seconds"])))
        return {
            "pending_seconds": totals.pending_seconds,
            "unattributed_seconds": dict(sorted(totals.unattributed.items())),
            "classes": rows,
        }

    def as_json(
        self, contention: Mapping[str, float] | None = None, epoch: float = 0.0
    ) -> dict[str, object]:
        """:meth:`summary` and the series per bucket, stacked by causing class, oldest first.

        ``epoch``: added to each bucket's start (a clock that counts from 0, as the demo's).
        """
        return {
            "bucket_seconds": self.bucket_seconds,
            **self.summary(contention),
            "series": [
                _point(epoch + index * self.bucket_seconds, self.buckets[index])
                for index in sorted(self.buckets)
            ],
        }


def _row(totals: Bucket, party: Party, contention: float | None) -> dict[str, object]:
    imposed = {cause: s for (who, cause), s in sorted(totals.imposed.items()) if who == party}
    own = {cause: s for (who, cause), s in sorted(totals.self_imposed.items()) if who == party}
    return {
        "workload_class": party.workload_class,
        "queue": party.queue,
        "imposed_seconds": sum(imposed.values()),
        "imposed_by_cause": imposed,
        "self_imposed_seconds": sum(own.values()),
        "idle_gpu_hours": totals.idle_gpu_seconds.get(party, 0.0) / SECONDS_PER_HOUR,
        "contention_share": contention,
    }


def _point(start: float, bucket: Bucket) -> dict[str, object]:
    imposed: dict[str, float] = {}
    for (party, _), seconds in bucket.imposed.items():
        _add(imposed, party.workload_class, seconds)
    idle: dict[str, float] = {}
    for party, gpu_seconds in bucket.idle_gpu_seconds.items():
        _add(idle, party.workload_class, gpu_seconds / SECONDS_PER_HOUR)
    return {
        "start": start,
        "imposed_seconds": dict(sorted(imposed.items())),
        "idle_gpu_hours": dict(sorted(idle.items())),
        "pending_seconds": bucket.pending_seconds,
    }
