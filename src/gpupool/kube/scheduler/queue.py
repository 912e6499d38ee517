"""The scheduling queue: which pending pods to try now, which wait, and for how long.

kube-scheduler's shape, three sub-queues:

* **active**: pods to try in the next cycle (new pods, pods whose wait is over);
* **backoff**: pods that failed recently wait ``initial * 2**(attempts-1)`` seconds, capped
  (1 s doubling to 10 s, kube-scheduler's defaults), before they are active again;
* **unschedulable**: pods no node could take wait for something that could make them fit (the
  cache's capacity epoch moves: a pod released its GPUs, the nodes changed), and then still for
  the rest of their backoff; after ``flush_after`` seconds they are retried anyway, as
  kube-scheduler flushes its unschedulable pods, so a missed event cannot strand a pod.

Without the backoff, a pod whose Binding the API server keeps refusing (an admission policy, a
quota) is retried in a hot loop, and each retry releases and re-takes capacity, which reopened
every rejected pod in turn. Pods in flight (assumed, their Binding not yet answered) keep their
entry, so a refused bind counts as another attempt instead of starting over.

Pure and synchronous: callers pass ``now`` (seconds on a monotonic clock).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Container, Hashable, Iterable
from dataclasses import dataclass

from gpupool.retry import Backoff
from gpupool.scheduling.wait_cause import WaitKind

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 10.0
FLUSH_UNSCHEDULABLE_AFTER = 300.0


class Where(enum.Enum):
    """Which sub-queue a pod is in."""

    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    IN_FLIGHT = "in-flight"


@dataclass(slots=True)
class Entry:
    """One pending pod's place in the queue.

    Attributes:
        where: Its sub-queue.
        attempts: Scheduling attempts so far (decisions that did not end in a bind).
        ready_at: When its backoff ends.
        since: When it entered its current sub-queue.
        epoch: For unschedulable pods, the capacity epoch they were rejected at.
        reason: The last reason it is pending, as reported to users.
        kind: What holds it, for counting (``None`` until a decision was made for it).
    """

    where: Where
    attempts: int = 0
    ready_at: float = 0.0
    since: float = 0.0
    epoch: int = 0
    reason: str = ""
    kind: WaitKind | None = None


class SchedulingQueue:
    """Active, backoff and unschedulable pods, keyed by pod uid.

    Args:
        initial_backoff: Wait after the first failed attempt, seconds.
        max_backoff: Longest wait, seconds.
        flush_after: Seconds after which an unschedulable pod is retried without an event.
    """

    def __init__(
        self,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        flush_after: float = FLUSH_UNSCHEDULABLE_AFTER,
    ) -> None:
        if not 0 < initial_backoff <= max_backoff:
            raise ValueError("backoff: need 0 < initial_backoff <= max_backoff")
        self.backoff = Backoff(initial_backoff, max_backoff)
        self.flush_after = flush_after
        self.entries: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        """Forget every pod (a leader term begins or ends: the cache is rebuilt from records)."""
        self.entries.clear()

    def backoff_for(self, attempts: int) -> float:
        """Seconds a pod waits after ``attempts`` failed attempts (any number of them)."""
        return self.backoff.delay(attempts)

    def update(self, changed: Iterable[str], pending: Container[str], now: float) -> None:
        """Follow the cache's pending set for the pods in ``changed``.

        A pod that became pending is active; one no longer pending leaves, unless its Binding is
        in flight (its outcome decides). Only the changed pods are looked at, so a cycle that
        syncs after every decision does not walk thousands of waiting pods each time.
        """
        entries = self.entries
        for uid in changed:
            entry = entries.get(uid)
            if uid in pending:
                if entry is None:
                    entries[uid] = Entry(Where.ACTIVE, since=now)
                elif entry.where is Where.IN_FLIGHT:  # pending again: its bind was undone
                    self._wait(entry, now)
            elif entry is not None and entry.where is not Where.IN_FLIGHT:
                del entries[uid]

    def pop_active(
        self, now: float, capacity_epoch: int, order: Callable[[str], Hashable]
    ) -> list[str]:
        """The pods to try now, in ``order``; they leave the active queue.

        Backoffs that ended become active; unschedulable pods become active once the capacity
        epoch moved past the one they were rejected at (or after ``flush_after``) and their
        backoff ended.
        """
        ready: list[str] = []
        for uid, entry in self.entries.items():
            where = entry.where
            if where is Where.UNSCHEDULABLE:
                moved = entry.epoch != capacity_epoch or now - entry.since >= self.flush_after
                if not moved:
                    continue
                where = Where.BACKOFF
            if where is Where.BACKOFF and entry.ready_at > now:
                entry.where = Where.BACKOFF
                continue
            if where is not Where.IN_FLIGHT:
                entry.where = Where.ACTIVE
                ready.append(uid)
        ready.sort(key=order)  # type: ignore[arg-type]
        for uid in ready:
            self.entries[uid].where = Where.BACKOFF  # until the attempt's outcome is recorded
            self.entries[uid].ready_at = now
        return ready

    def unschedulable(
        self, uid: str, now: float, capacity_epoch: int, reason: str, kind: WaitKind
    ) -> bool:
        """No node could take the pod; returns whether its reason changed."""
        entry = self.entries.get(uid)
        if entry is None:
            return False
        entry.attempts += 1
        entry.where = Where.UNSCHEDULABLE
        entry.ready_at = now + self.backoff_for(entry.attempts)
        entry.since = now
        entry.epoch = capacity_epoch
        return _reason(entry, reason, kind)

    def failed(self, uid: str, now: float, reason: str, kind: WaitKind) -> bool:
        """An attempt failed (bind refused, an error): back off. Did the reason change?"""
        entry = self.entries.get(uid)
        if entry is None:
            return False
        entry.attempts += 1
        self._wait(entry, now)
        return _reason(entry, reason, kind)

    def deferred(self, uid: str, reason: str) -> bool:
        """The pod waited behind others: active again, no attempt. Did the reason change?"""
        entry = self.entries.get(uid)
        if entry is None:
            return False
        entry.where = Where.ACTIVE
        return _reason(entry, reason, WaitKind.BEHIND)

    def in_flight(self, uid: str) -> None:
        """The pod was assumed and its Binding sent."""
        entry = self.entries.get(uid)
        if entry is not None:
            entry.where = Where.IN_FLIGHT

    def bound(self, uid: str) -> None:
        """The pod is bound (or gone): it leaves the queue."""
        self.entries.pop(uid, None)

    def discard(self, uid: str) -> None:
        """The pod is no longer pending: it leaves the queue unless its Binding is in flight."""
        entry = self.entries.get(uid)
        if entry is not None and entry.where is not Where.IN_FLIGHT:
            del self.entries[uid]

    def next_ready(self, now: float) -> float | None:
        """Seconds until the earliest backoff ends (None: nothing is backing off)."""
        waits = [
            e.ready_at - now
            for e in self.entries.values()
            if e.where is Where.BACKOFF and e.ready_at > now
        ]
        return max(0.0, min(waits)) if waits else None

    def counts(self) -> dict[str, int]:
        """Pods per sub-queue."""
        result = {where.value: 0 for where in Where}
        for entry in self.entries.values():
            result[entry.where.value] += 1
        return result

    def _wait(self, entry: Entry, now: float) -> None:
        entry.where = Where.BACKOFF
        entry.ready_at = now + self.backoff_for(entry.attempts)
        entry.since = now


def _reason(entry: Entry, reason: str, kind: WaitKind) -> bool:
    """Record the entry's reason and kind; returns whether the reason changed."""
    changed = entry.reason != reason
    entry.reason, entry.kind = reason, kind
    return changed
