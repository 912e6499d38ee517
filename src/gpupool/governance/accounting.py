"""GPU-hours, GPU memory GiB-hours and efficiency, per pod, namespace, queue or pool.

An allocation is an interval ``[start, end)`` during which a pod held ``units`` GPU units and
``memory_gib`` GiB of GPU memory (:mod:`gpupool.policy.units`); an open interval (no end
yet) runs to the end of the window. Cost over a window is the integral of what was held,
clipped to the window exactly, so that the sum over any partition of a window equals the total
over the window and the groups add up to the whole: a report split by day or by team can never
disagree with the monthly total (a rounding-per-piece scheme, such as counting whole hours per
allocation, would).

Efficiency is used over requested. Usage samples are optional and per pod (summed over its
GPUs): each sample holds from its time until the pod's next sample or the end of the allocation,
whichever comes first (sample and hold). Efficiency is measured only over the time samples cover,
so a pod whose agent started reporting late is not charged as idle for the time before; the
covered requested hours are reported next to the efficiency so a reader can see how much of the
bill it speaks for.

Times are plain seconds (any epoch); the caller owns the clock. The work is vectorised with
numpy: a month of a large cluster is hundreds of thousands of intervals.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.governance.errors import FieldValueError

SECONDS_PER_HOUR = 3600.0

FloatArray = npt.NDArray[np.float64]

_SAMPLED_FIELDS = (
    "sampled_gpu_hours",
    "used_gpu_hours",
    "sampled_memory_gib_hours",
    "used_memory_gib_hours",
)
HOUR_FIELDS = ("gpu_hours", "memory_gib_hours", *_SAMPLED_FIELDS)
"""The fields of :class:`Usage` that are integrals over time, in hours."""


NO_GROUP = "(none)"
"""The group of an allocation with no queue, pool or namespace."""


class AccountingError(FieldValueError):
    """An interval, sample or window cannot be accounted; the message names the field."""


class GroupBy(enum.Enum):
    """What the report adds up by."""

    POD = "pod"
    NAMESPACE = "namespace"
    QUEUE = "queue"
    POOL = "pool"


def _require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise AccountingError(field_name, message)


@dataclass(frozen=True, slots=True)
class Interval:
    """One allocation of one pod.

    Attributes:
        pod_uid: The pod's uid (one allocation per pod).
        namespace: The pod's namespace.
        name: The pod's name.
        queue: The queue (tenant) it was admitted through.
        pool: The GPU pool it ran in.
        units: GPU units held.
        memory_gib: GPU memory held, in GiB.
        start: When the allocation started, in seconds.
        end: When it ended, in seconds; ``None`` while it runs.
    """

    pod_uid: str
    namespace: str
    name: str
    queue: str
    pool: str
    units: float
    memory_gib: float
    start: float
    end: float | None = None

    def __post_init__(self) -> None:
        _require(bool(self.pod_uid), "pod_uid", "must not be empty")
        for name in ("units", "memory_gib"):
            value = getattr(self, name)
            _require(math.isfinite(value) and value >= 0, name, f"must be >= 0, got {value}")
        _require(math.isfinite(self.start), "start", f"must be finite, got {self.start}")
        if self.end is not None:
            _require(self.end >= self.start, "end", f"{self.end} is before start {self.start}")

    def group(self, by: GroupBy) -> str:
        """The name of the group this interval counts in."""
        if by is GroupBy.POD:
            return f"{self.namespace}/{self.name}"
        return str(getattr(self, by.value)) or NO_GROUP


@dataclass(frozen=True, slots=True)
class Sample:
    """What one pod used at one moment, summed over its GPUs.

    Attributes:
        pod_uid: The pod's uid.
        time: When it was measured, in seconds.
        sm_percent: SM (compute) utilisation in percent of one whole GPU, summed over the pod's
            GPUs (a pod using two GPUs fully reports 200).
        memory_used_gib: GPU memory used, in GiB, summed over its GPUs.
    """

    pod_uid: str
    time: float
    sm_percent: float
    memory_used_gib: float

    def __post_init__(self) -> None:
        _require(math.isfinite(self.time), "time", f"must be finite, got {self.time}")
        for name in ("sm_percent", "memory_used_gib"):
            value = getattr(self, name)
            _require(math.isfinite(value) and value >= 0, name, f"must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class Window:
    """The time range a report covers, ``[start, end)`` in seconds."""

    start: float
    end: float

    def __post_init__(self) -> None:
        _require(
            math.isfinite(self.start) and math.isfinite(self.end) and self.end >= self.start,
            "window",
            f"end {self.end} must be finite and not before start {self.start}",
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """What one group held and used over a window.

    Attributes:
        group: The group's name (``namespace/name`` for a pod).
        pods: Allocations that overlap the window.
        gpu_hours: GPU units held, integrated over time, in hours.
        memory_gib_hours: GPU memory held, in GiB-hours.
        sampled_gpu_hours: The part of ``gpu_hours`` covered by usage samples.
        used_gpu_hours: GPU units used over that covered time (SM utilisation), in hours.
        sampled_memory_gib_hours: The part of ``memory_gib_hours`` covered by usage samples.
        used_memory_gib_hours: GPU memory used over that covered time, in GiB-hours.
    """

    group: str
    pods: int
    gpu_hours: float
    memory_gib_hours: float
    sampled_gpu_hours: float = 0.0
    used_gpu_hours: float = 0.0
    sampled_memory_gib_hours: float = 0.0
    used_memory_gib_hours: float = 0.0

    @property
    def gpu_efficiency(self) -> float | None:
        """Used over requested GPU-hours where samples exist; ``None`` without samples."""
        return _ratio(self.used_gpu_hours, self.sampled_gpu_hours)

    @property
    def memory_efficiency(self) -> float | None:
        """Used over requested GPU memory GiB-hours where samples exist; ``None`` without."""
        return _ratio(self.used_memory_gib_hours, self.sampled_memory_gib_hours)


def _ratio(used: float, requested: float) -> float | None:
    return used / requested if requested > 0 else None


def account(
    intervals: Sequence[Interval],
    window: Window,
    by: GroupBy,
    samples: Sequence[Sample] = (),
) -> tuple[Usage, ...]:
    """Cost and efficiency per group over ``window``, sorted by group name.

    Only groups with an allocation that overlaps the window for a positive time appear.
    """
    if not intervals:
        return ()
    start = np.array([i.start for i in intervals], dtype=np.float64)
    end = np.array([math.inf if i.end is None else i.end for i in intervals], dtype=np.float64)
    seconds = _overlap(start, end, window.start, window.end)
    held = seconds > 0
    if not held.any():
        return ()
    names, group_of = np.unique(np.array([i.group(by) for i in intervals]), return_inverse=True)
    units = np.array([i.units for i in intervals], dtype=np.float64)
    memory = np.array([i.memory_gib for i in intervals], dtype=np.float64)
    sums = {
        "pods": _by_group(group_of, held.astype(np.float64), len(names)),
        "gpu_hours": _by_group(group_of, units * seconds, len(names)),
        "memory_gib_hours": _by_group(group_of, memory * seconds, len(names)),
    }
    sums.update(_sampled(intervals, start, end, units, memory, window, samples, group_of, names))
    return tuple(
        Usage(
            group=str(names[g]),
            pods=round(sums["pods"][g]),
            **{key: float(sums[key][g]) / SECONDS_PER_HOUR for key in HOUR_FIELDS},
        )
        for g in range(len(names))
        if sums["pods"][g] > 0
    )


def total(intervals: Sequence[Interval], window: Window, samples: Sequence[Sample] = ()) -> Usage:
    """Cost and efficiency of everything over ``window``, as one group named ``total``."""
    parts = account(intervals, window, GroupBy.POOL, samples)
    return Usage(
        group="total",
        pods=sum(part.pods for part in parts),
        **{name: math.fsum(getattr(part, name) for part in parts) for name in HOUR_FIELDS},
    )


def _overlap(start: FloatArray, end: FloatArray, lo: float, hi: float) -> FloatArray:
    """Seconds of each ``[start, end)`` inside ``[lo, hi)``."""
    overlap: FloatArray = np.maximum(np.minimum(end, hi) - np.maximum(start, lo), 0.0)
    return overlap


def _by_group(group_of: npt.NDArray[np.intp], weights: FloatArray, groups: int) -> FloatArray:
    return np.bincount(group_of, weights=weights, minlength=groups).astype(np.float64)


def _sampled(
    intervals: Sequence[Interval],
    start: FloatArray,
    end: FloatArray,
    units: FloatArray,
    memory: FloatArray,
    window: Window,
    samples: Sequence[Sample],
    group_of: npt.NDArray[np.intp],
    names: npt.NDArray[np.str_],
) -> dict[str, FloatArray]:
    """Requested and used seconds-weighted sums over the time samples cover, per group."""
    zero = {key: np.zeros(len(names)) for key in _SAMPLED_FIELDS}
    if not samples:
        return zero
    uids = np.array([i.pod_uid for i in intervals])
    order = np.argsort(uids, kind="stable")
    sample_uid = np.array([s.pod_uid for s in samples])
    time = np.array([s.time for s in samples], dtype=np.float64)
    position = np.minimum(np.searchsorted(uids[order], sample_uid), len(uids) - 1)
    owner = order[position]
    known = uids[owner] == sample_uid
    if not known.any():
        return zero
    owner, time, sample_uid = owner[known], time[known], sample_uid[known]
    sm = np.array([s.sm_percent for s in samples], dtype=np.float64)[known] / 100.0
    used_memory = np.array([s.memory_used_gib for s in samples], dtype=np.float64)[known]
    by_pod_time = np.lexsort((time, owner))
    owner, time = owner[by_pod_time], time[by_pod_time]
    sm, used_memory = sm[by_pod_time], used_memory[by_pod_time]
    next_time = np.full(len(time), math.inf)
    same_pod = owner[1:] == owner[:-1]
    next_time[:-1][same_pod] = time[1:][same_pod]
    hold_start = np.maximum(time, start[owner])
    hold_end = np.minimum(next_time, end[owner])
    seconds = _overlap(hold_start, hold_end, window.start, window.end)
    group = group_of[owner]
    return {
        "sampled_gpu_hours": _by_group(group, units[owner] * seconds, len(names)),
        "used_gpu_hours": _by_group(group, sm * seconds, len(names)),
        "sampled_memory_gib_hours": _by_group(group, memory[owner] * seconds, len(names)),
        "used_memory_gib_hours": _by_group(group, used_memory * seconds, len(names)),
    }


def ended_at(start: float, finished_at: float | None, last_seen: float | None) -> float:
    """When an allocation ended whose pod ended while no leader watched it.

    The pod's own finish time (its containers' ``finishedAt``) when the API server still has it;
    else the last moment anything shows it alive (its latest usage sample); else its start.
    Never "now": the next leader may start hours later, and billing up to its start would
    charge the tenant for the outage. Never before the start.

    Args:
        start: When the allocation started.
        finished_at: When the pod finished, if known.
        last_seen: When it was last seen alive (a usage sample), if ever.
    """
    known = finished_at if finished_at is not None else last_seen
    return start if known is None else max(start, known)
