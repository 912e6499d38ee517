"""A pod's published GPU usage, and what the idle rule remembers of it.

The node agent publishes one sample per pod per period (``gpupool.io/gpu-usage``, every 60 s):
the most SM and memory-controller utilisation any of its 5-second NVML samples saw in the
period, and the memory its processes hold. The idle rule needs two things from the samples seen
so far: since when the pod has been quiet, and the longest quiet phase it came back from (a pod
that has paused that long and resumed is not idle after a shorter pause: a checkpoint written to
slow storage, an endpoint between bursts of requests, a notebook whose user is reading). Both are
kept by folding each new sample into a :class:`UsageHistory`, so the controller and the simulator
keep four values per pod instead of a window of samples, and the rule reads them in constant
time (a 256-sample window scanned per pod per pass was the alternative; the longest resumed
quiet phase would need the whole window every time).

What counts as activity is the pool's (:class:`Activity`, from its limits); a history folded
under one pool's settings is kept if the settings change (the next samples use the new ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UsagePoint:
    """One published usage sample of a pod (over its GPUs).

    Attributes:
        time: When it was taken, in seconds.
        sm_percent: SM utilisation, percent (the period's highest 5-second sample).
        memory_mib: GPU memory held, MiB.
        memory_busy_percent: Memory-controller utilisation of its processes, percent (NVML's
            per-process ``memUtil``; the period's highest sample): a checkpoint being copied to
            the host or weights being loaded keep it up while SM stays near 0.
    """

    time: float
    sm_percent: float
    memory_mib: float = 0.0
    memory_busy_percent: float = 0.0


@dataclass(frozen=True, slots=True)
class Activity:
    """When a sample counts as the pod using its GPU (any one of the three suffices).

    Attributes:
        sm_percent: SM utilisation at or above this (0: every sample is active).
        memory_busy_percent: Memory-controller utilisation at or above this; ``None``: not used.
        memory_moved_mib: The memory held changed by more than this since the sample before.
    """

    sm_percent: float
    memory_busy_percent: float | None
    memory_moved_mib: float

    def active(self, point: UsagePoint, previous: UsagePoint | None) -> bool:
        """Whether ``point`` (after ``previous``, if any) shows the pod using its GPU."""
        if point.sm_percent >= self.sm_percent:
            return True
        busy = self.memory_busy_percent
        if busy is not None and point.memory_busy_percent >= busy:
            return True
        return previous is not None and (
            abs(point.memory_mib - previous.memory_mib) > self.memory_moved_mib
        )


@dataclass(frozen=True, slots=True)
class UsageHistory:
    """A pod's usage so far, as the idle rule needs it.

    Attributes:
        last: The latest sample (``None`` before the first).
        quiet_since: The first sample of the quiet run that is still going on; ``None`` while
            the latest sample is active.
        active_seen: Whether any sample was active (if not, the agent's ``lastActive`` may say
            more than the samples do: a controller that restarted has seen little).
        longest_quiet: The longest quiet run that activity ended, seconds from its first quiet
            sample to the active one.
    """

    last: UsagePoint | None = None
    quiet_since: float | None = None
    active_seen: bool = False
    longest_quiet: float = 0.0

    def observe(self, point: UsagePoint, activity: Activity) -> UsageHistory:
        """This history with ``point`` added; a sample not newer than the latest is ignored."""
        last = self.last
        if last is not None and point.time <= last.time:
            return self
        if activity.active(point, last):
            longest = self.longest_quiet
            if self.quiet_since is not None:
                longest = max(longest, point.time - self.quiet_since)
            return UsageHistory(point, None, True, longest)
        since = point.time if self.quiet_since is None else self.quiet_since
        return UsageHistory(point, since, self.active_seen, self.longest_quiet)

    @classmethod
    def of(cls, points: Iterable[UsagePoint], activity: Activity) -> UsageHistory:
        """The history of ``points``, oldest first."""
        history = cls()
        for point in points:
            history = history.observe(point, activity)
        return history
