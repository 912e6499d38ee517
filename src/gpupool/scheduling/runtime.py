"""Expected runtimes for backfill: declared where the pod says, learned where it does not.

A pod may declare ``gpupool.io/expected-runtime``; otherwise the estimate is the mean observed
runtime of finished pods of the same queue and request shape (whole/share/MIG/CPU and GPU
count), then of the queue, then of everything, then :data:`DEFAULT_RUNTIME`. Learning is a
separate call (:meth:`RuntimeEstimator.observe_completion`), made by the caller once per finished
pod, so asking for an estimate never changes one. A declared runtime is trusted only for
ordering a backfill, never for preempting: a tenant gains nothing by lying except a backfill
slot it will overrun, which EASY backfill tolerates (the reservation moves, nobody is evicted).

:meth:`RuntimeEstimator.remaining` answers a second question, how long a pod that has already
run for a while still has to go, from the same completions. GPU job runtimes are heavy-tailed
(lognormal-like in the Philly, Helios and PAI studies), so a pod that has outlived the mean is
most likely a long one: assuming it ends "now" (start plus mean, clipped at now) made a
reservation pick the node with the longest-running pod as the one that drains first.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence

import numpy as np

from gpupool.policy.workload import Running, Workload

DEFAULT_RUNTIME = 3600.0
"""Seconds assumed before anything has finished."""

WINDOW = 2048
"""Recent completions per key kept for :meth:`RuntimeEstimator.remaining` (bounded memory;
recent ones, so a workload that changes is followed)."""

MIN_TAIL = 8
"""Completions longer than a pod's age that a key needs before its tail is believed; fewer
(a rare shape, a very old pod) fall through to the coarser key."""

Key = tuple[object, ...]


def _shape(workload: Workload) -> tuple[str, int]:
    return (workload.pod.kind.value, workload.pod.gpu_count)


def _keys(workload: Workload, queue: str) -> tuple[Key, Key, Key]:
    return ((queue, *_shape(workload)), (queue,), ())


class RuntimeEstimator:
    """Learns mean runtimes per (queue, shape), per queue and overall, and their tails."""

    def __init__(self) -> None:
        self._sums: defaultdict[Key, list[float]] = defaultdict(lambda: [0.0, 0])
        self._recent: defaultdict[Key, deque[float]] = defaultdict(lambda: deque(maxlen=WINDOW))
        self._tails: dict[Key, tuple[np.ndarray, np.ndarray]] = {}
        """Per key, its recent completions sorted and their suffix sums; rebuilt when asked
        after a completion (completions come between cycles, questions once per cycle)."""

    def observe_completion(self, workload: Workload, queue: str, seconds: float) -> None:
        """Learn from a pod that ran to completion for ``seconds``."""
        for key in _keys(workload, queue):
            entry = self._sums[key]
            entry[0] += seconds
            entry[1] += 1
            self._recent[key].append(seconds)
            self._tails.pop(key, None)

    def estimate(self, workload: Workload, queue: str) -> float:
        """Expected runtime of ``workload`` in seconds."""
        if workload.expected_runtime is not None:
            return workload.expected_runtime
        for key in _keys(workload, queue):
            entry = self._sums.get(key)
            if entry is not None and entry[1]:
                return entry[0] / entry[1]
        return DEFAULT_RUNTIME

    def remaining(self, workload: Workload, queue: str, age: float) -> float:
        """Expected seconds left for ``workload`` once it has run ``age`` seconds.

        Declared: what is left of the declared runtime (0 once past it: the declaration is a
        limit, :mod:`gpupool.governance`). Learned: the mean residual life among recent
        completions of the finest key that has :data:`MIN_TAIL` completions longer than
        ``age``; a pod older than nearly everything seen is expected to run as long again
        (the median residual life of a heavy tail grows about linearly with age). Nothing
        learned yet: what is left of :data:`DEFAULT_RUNTIME`.
        """
        if workload.expected_runtime is not None:
            return max(workload.expected_runtime - age, 0.0)
        learned = False
        for key in _keys(workload, queue):
            recent = self._recent.get(key)
            if not recent:
                continue
            learned = True
            ordered, suffix = self._tail(key, recent)
            first = int(np.searchsorted(ordered, age, side="right"))
            longer = len(ordered) - first
            if longer >= MIN_TAIL:
                return float(suffix[first]) / longer - age
        return max(age, 0.0) if learned else max(DEFAULT_RUNTIME - age, 0.0)

    def quantile(self, workload: Workload, queue: str, q: float) -> float:
        """The ``q`` quantile of ``workload``'s runtime: how long it runs at most, ``q`` sure.

        Declared: the declared runtime (a limit). Learned: the quantile of the recent
        completions of the finest key with at least :data:`MIN_TAIL` of them, else
        :meth:`estimate`. Backfill asks this of a pod it would start on a reserved node: the
        mean is a poor bound under a heavy tail (a lognormal of sigma 1.2 runs past its mean
        27% of the time), and each overrun delays the reserved start.
        """
        if workload.expected_runtime is not None:
            return workload.expected_runtime
        for key in _keys(workload, queue):
            recent = self._recent.get(key)
            if recent is not None and len(recent) >= MIN_TAIL:
                ordered, _ = self._tail(key, recent)
                return float(ordered[min(int(q * len(ordered)), len(ordered) - 1)])
        return self.estimate(workload, queue)

    def bound(self, workload: Workload, queue: str, q: float | None) -> float:
        """The runtime backfill checks against a reserved start (``q`` None: the mean)."""
        return self.estimate(workload, queue) if q is None else self.quantile(workload, queue, q)

    def _tail(self, key: Key, recent: deque[float]) -> tuple[np.ndarray, np.ndarray]:
        tail = self._tails.get(key)
        if tail is None:
            ordered = np.sort(np.fromiter(recent, dtype=np.float64, count=len(recent)))
            suffix = np.cumsum(ordered[::-1])[::-1]
            tail = self._tails[key] = (ordered, suffix)
        return tail


def expected_ends(
    running: Mapping[str, Running],
    now: float,
    runtimes: RuntimeEstimator,
    queue_names: Sequence[str],
    by_age: bool,
) -> list[tuple[float, str]]:
    """(expected end, snapshot name) of running pods and companions: at start, or by age.

    With ``by_age``: ``now`` plus what :meth:`RuntimeEstimator.remaining` expects of their age.
    A pod's companions (the DRA claims only it reserves) end when it does.
    """
    ends: list[tuple[float, str]] = []
    for record in running.values():
        if by_age:
            queue = queue_names[record.queue]
            end = now + runtimes.remaining(record.workload, queue, now - record.started_at)
        else:
            end = record.expected_end
        ends.extend((end, name) for name in record.holdings)
    return ends
