"""What the scheduler tells about a pod it decided: pending with a reason, or bound.

Every outcome a user or an operator sees goes through :class:`Verdicts`: the scheduling queue
learns it (backoff, unschedulable, bound), the attempt is counted for ``/metrics``, and a pending
reason is written as a ``PodScheduled=False`` condition and a ``FailedScheduling`` Event **only
when it changes** (the queue says so), so a pod retried every cycle does not send a write per
cycle. The decision hook (the governance controller's audit) sees the same outcomes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gpupool.core.decisions import Bind
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.config import DecisionHook
from gpupool.kube.scheduler.observe import SchedulingMetrics
from gpupool.kube.scheduler.queue import SchedulingQueue
from gpupool.kube.scheduler.state import ClusterState
from gpupool.kube.scheduler.writes import PodReporter
from gpupool.scheduling.wait_cause import WaitKind


@dataclass
class Verdicts:
    """Queue, counters, conditions, Events and the hook, for one replica.

    Attributes:
        state: The cache (its capacity epoch dates an unschedulable verdict).
        queue: The scheduling queue.
        reports: Where conditions and Events are written.
        metrics: Attempt counters.
        on_decision: Called after a bind lands or a new pending reason is written.
    """

    state: ClusterState
    queue: SchedulingQueue
    reports: PodReporter
    metrics: SchedulingMetrics
    on_decision: DecisionHook | None = None

    def unschedulable(self, pod: PodRecord, message: str, kind: WaitKind) -> None:
        """No node can take the pod now: it waits for capacity to change."""
        self.metrics.attempt("unschedulable")
        uid, epoch = pod.metadata.uid, self.state.capacity_epoch
        if self.queue.unschedulable(uid, time.monotonic(), epoch, message, kind):
            self.report(pod, message)

    def deferred(self, pod: PodRecord, message: str) -> None:
        """The pod waited behind others this cycle: tried again in the next, told why now.

        The condition only: no attempt was made, so no ``FailedScheduling`` Event and nothing
        for the decision hook (a burst deeper than the backfill depth would double both).
        """
        if self.queue.deferred(pod.metadata.uid, message):
            self.reports.unschedulable(pod, message)

    def failed(self, pod: PodRecord, message: str, result: str, kind: WaitKind) -> None:
        """Deciding for the pod failed (``result``: unschedulable or error): it backs off."""
        self.metrics.attempt(result)
        self.refused(pod, message, kind)

    def refused(self, pod: PodRecord, message: str, kind: WaitKind) -> None:
        """The pod backs off with ``message`` as its reason (its attempt is counted already)."""
        if self.queue.failed(pod.metadata.uid, time.monotonic(), message, kind):
            self.report(pod, message)

    def bound(self, pod: PodRecord, decision: Bind) -> None:
        """The API server accepted the pod's Binding."""
        self.queue.bound(pod.metadata.uid)
        gpus = ",".join(str(g) for g in decision.gpus) or "none"
        self.reports.event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {pod.key} to {decision.node_name} (GPUs {gpus})",
        )
        if self.on_decision is not None:
            self.on_decision(pod, "bind", f"node={decision.node_name} gpus={gpus}")

    def report(self, pod: PodRecord, message: str) -> None:
        """Write the pod's new pending reason (condition, Event, hook)."""
        if self.on_decision is not None:
            self.on_decision(pod, "reject", message)
        self.reports.event(pod, "Warning", "FailedScheduling", message)
        self.reports.unschedulable(pod, message)
