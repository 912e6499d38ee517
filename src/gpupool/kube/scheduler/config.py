"""How a live scheduler replica runs, and what it counts.

Kept apart from the loop (:mod:`gpupool.kube.scheduler.live`) so the processes that configure or
read a scheduler (the control-plane command, metrics, tests) need none of its machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.vocabulary import SCHEDULER_NAME
from gpupool.scheduling.decisions import BACKFILL_MODES

LIVE_POLICIES = ("default", "bestfit", "packing", "dotprod", "clustering", "random")
"""Policies that need no workload known in advance (FGD's typical pods come from a trace)."""

DecisionHook = Callable[[PodRecord, str, str], None]
"""Called as ``hook(pod, "bind" | "reject" | "preempt", detail)`` after a bind lands, a pod is
reported unschedulable with a new reason, or a preemption victim leaves (the governance
controller audits these)."""


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """How the live scheduler runs.

    Attributes:
        identity: This replica's name (Lease holder, Event reporter, allocation ``scheduler``).
        scheduler_name: ``spec.schedulerName`` of the pods to schedule.
        policy: Placement policy name (one of :data:`LIVE_POLICIES`).
        bind_concurrency: Bindings in flight at once.
        seed: Seed for randomised policies.
        backfill: The engine's backfill mode, a key of
            :data:`~gpupool.scheduling.decisions.BACKFILL_MODES` (``large-pods``: up to 16
            reservations per pool for pods above one GPU).
        claims: Whether to place pods with DRA claims of gpupool's driver (watches
            ResourceClaims, their templates, DeviceClasses and ResourceSlices; needs
            resource.k8s.io/v1, Kubernetes 1.34 or later). Off by default until an
            intermittent stall after a replica becomes leader with these watches on, seen
            only on a heavily loaded machine, is understood.
    """

    identity: str
    scheduler_name: str = SCHEDULER_NAME
    policy: str = "default"
    bind_concurrency: int = 64
    seed: int = 0
    backfill: str = "large-pods"
    claims: bool = False

    def __post_init__(self) -> None:
        if self.policy not in LIVE_POLICIES:
            raise ValueError(f"policy: {self.policy!r} is not one of {', '.join(LIVE_POLICIES)}")
        if self.bind_concurrency < 1:
            raise ValueError("bind_concurrency: must be >= 1")
        if self.backfill not in BACKFILL_MODES:
            modes = ", ".join(BACKFILL_MODES)
            raise ValueError(f"backfill: {self.backfill!r} is not one of {modes}")


@dataclass
class LiveStats:
    """Counters for metrics and tests.

    Attempts by result, bind errors by reason and decision latency are in
    :class:`~gpupool.kube.scheduler.observe.SchedulingMetrics`.

    Attributes:
        cycles: Scheduling cycles run.
        binds: Bindings the API server accepted.
        bind_unknown: Bindings whose outcome had to be looked up.
        invalid_pods: Attempts on pods whose request cannot be read.
        cycle_errors: Cycles that failed as a whole (and were retried).
        preemptions: Preemption decisions carried out (each with one or more victims).
    """

    cycles: int = 0
    binds: int = 0
    bind_unknown: int = 0
    invalid_pods: int = 0
    cycle_errors: int = 0
    preemptions: int = 0
