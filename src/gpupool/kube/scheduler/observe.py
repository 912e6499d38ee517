"""What the scheduling loop records for ``/metrics``: attempts, decision latency, bind errors.

Plain counters that :mod:`gpupool.kube.scheduler.live` updates in a few nanoseconds and
:mod:`gpupool.kube.controlplane.metrics` reads at scrape time; neither the loop nor its tests import
prometheus-client. Every label value comes from a fixed set (:data:`ATTEMPT_RESULTS`,
:data:`BIND_ERROR_REASONS`): a label made from an error message or a pod name would grow the
series without bound and take the metrics backend down with the scheduler's cardinality.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

ATTEMPT_RESULTS = ("scheduled", "unschedulable", "error")
"""``scheduled``: a node was chosen; ``unschedulable``: no node fits, or the request cannot be
read; ``error``: deciding raised."""

BIND_ERROR_REASONS = (
    "conflict",
    "gone",
    "forbidden",
    "invalid",
    "admission",
    "throttled",
    "server",
    "transport",
    "volumes",
)
"""The categories :func:`gpupool.kube.scheduler.writes.classify` sorts a failed Binding into,
and ``volumes``: the pod's claims could not be reserved, provisioned or bound in time."""

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
"""Upper bounds in seconds of one pod's decision (the core takes about 1 ms on 1,000 nodes)."""


@dataclass
class LatencyHistogram:
    """Cumulative-ready bucket counts, sum and count of observed seconds."""

    bounds: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        """Record one duration (the last bucket is +Inf)."""
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, observations <= bound)`` pairs, ending with ``+Inf``."""
        pairs: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            pairs.append((bound, running))
        return pairs


@dataclass
class SchedulingMetrics:
    """What one replica's scheduling loop has done, by bounded category."""

    attempts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ATTEMPT_RESULTS, 0))
    bind_errors: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(BIND_ERROR_REASONS, 0)
    )
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)

    def attempt(self, result: str) -> None:
        """Count one attempt with ``result`` (one of :data:`ATTEMPT_RESULTS`)."""
        self.attempts[result] += 1

    def bind_failed(self, reason: str) -> None:
        """Count one failed Binding (``reason``: one of :data:`BIND_ERROR_REASONS`)."""
        self.bind_errors[reason] += 1
