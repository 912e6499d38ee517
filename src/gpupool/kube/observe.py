"""What the scheduling loop records for ``/metrics``: attempts, decision latency, bind errors.

Plain counters that :mod:`gpupool.kube.live` updates in a few nanoseconds and
:mod:`gpupool.kube.metrics` reads at scrape time; neither the loop nor its tests import
prometheus-client. Every label value comes from a fixed set (:data:`ATTEMPT_RESULTS`,
:data:`BIND_ERROR_REASONS`): a label made from an error message or a pod name would grow the
series without bound and take the metrics backend down with the scheduler's cardinality.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import httpx2

from gpupool.kube.api import ApiError

ATTEMPT_RESULTS = ("scheduled", "unschedulable", "error")
"""``scheduled``: bound; ``unschedulable``: left pending with a reason; ``error``: bind failed."""

BIND_ERROR_REASONS = (
    "conflict",
    "gone",
    "forbidden",
    "invalid",
    "admission",
    "server",
    "transport",
    "unknown",
)

_ADMISSION_MARKERS = ("ValidatingAdmissionPolicy '", 'admission webhook "', "admission plugin")
"""How the API server words an admission denial (names in Kubernetes never hold quotes)."""

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


def bind_error_reason(error: BaseException) -> str:
    """The bounded category of a failed Binding (one of :data:`BIND_ERROR_REASONS`).

    An admission denial (a ValidatingAdmissionPolicy or webhook) is told apart from an RBAC
    refusal by the API server's message, because both answer 403 (or 422 for a policy without
    a reason); which one it is decides who must act: the operator, or the policy's author.
    """
    if not isinstance(error, ApiError):
        transport = isinstance(error, httpx2.TransportError | OSError | TimeoutError)
        return "transport" if transport else "unknown"
    if any(marker in error.message for marker in _ADMISSION_MARKERS):
        return "admission"
    by_status = {409: "conflict", 404: "gone", 410: "gone", 403: "forbidden", 401: "forbidden"}
    if error.status in by_status:
        return by_status[error.status]
    if error.status in (400, 422):
        return "invalid"
    if error.status >= 500 or error.status == 429:
        return "server"
    return "unknown"


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

    def bind_failed(self, error: BaseException) -> None:
        """Count one failed Binding by :func:`bind_error_reason`."""
        self.bind_errors[bind_error_reason(error)] += 1
