"""The governance rules: idle reclaim, share-duration limits, abnormal pods, phantom shares.

Every rule is a pure function of plain values and ``now`` (seconds, any epoch), so the live
controller and the simulator apply the same rules the same way, and a rule is tested by a
table of facts and the decision expected.

Rules are level-triggered: given a pod's facts they say what should happen *now*, whatever was
done before. The one piece of history a rule needs, when the pod was warned, is an input
(:class:`PodWarning`, kept on the pod by the controller), so a restarted controller continues where
the last one stopped rather than warning again or reclaiming early.

Reclaim rules warn first and act only after the grace period, and only if the rule still fires:
a pod that becomes active again after its warning gets a :class:`ClearWarning`, never a
reclaim. Cleanup rules act at once, because the pod they fire on does no useful work (a crash
loop past its restart limit, a pod bound but not running past a timeout, a pod on a node
NotReady past a timeout). A pod being deleted is left alone: its deletion is already under way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.governance.decisions import (
    Cleanup,
    ClearWarning,
    Decision,
    Reclaim,
    Release,
    Rule,
    Warn,
)
from gpupool.governance.errors import FieldValueError

CRASH_LOOP_REASON = "CrashLoopBackOff"


class GovernanceSettingsError(FieldValueError):
    """A governance setting that cannot be used; the message names the field."""


def _check(condition: bool, name: str, message: str) -> None:
    if not condition:
        raise GovernanceSettingsError(name, message)


@dataclass(frozen=True, slots=True)
class Limits:
    """One pool's (and its queue's) governance settings, in seconds and percent.

    Attributes:
        idle_threshold_percent: A pod whose SM utilisation stays below this is idle; ``None``
            turns idle reclaim off.
        idle_period: How long a pod must stay idle before it is warned.
        grace: Time between the warning and the reclaim.
        max_share_duration: The longest a share may be held; ``None`` for no limit.
        exempt_classes: ``gpupool.io/class`` values never reclaimed (idle or duration).
        memory_activity_mib: A change of GPU memory held by more than this between two samples
            counts as activity (a pod loading a model is not idle even at 0 % SM).
    """

    idle_threshold_percent: float | None = None
    idle_period: float = 1800.0
    grace: float = 300.0
    max_share_duration: float | None = None
    exempt_classes: frozenset[str] = field(default_factory=frozenset)
    memory_activity_mib: float = 256.0

    def __post_init__(self) -> None:
        threshold = self.idle_threshold_percent
        if threshold is not None:
            _check(0 <= threshold <= 100, "idleThreshold.gpuUtilPercent", "must be 0..100")
        for name, value in (
            ("idlePeriod", self.idle_period),
            ("grace", self.grace),
            ("memoryActivityMiB", self.memory_activity_mib),
        ):
            _check(math.isfinite(value) and value >= 0, name, f"must be >= 0, got {value}")
        if self.max_share_duration is not None:
            _check(self.max_share_duration > 0, "maxShareDuration", "must be > 0")

    def with_queue_limit(self, queue_limit: float | None) -> Limits:
        """These limits with the shorter of the pool's and the queue's maxShareDuration."""
        if queue_limit is None:
            return self
        pool_limit = self.max_share_duration
        shortest = queue_limit if pool_limit is None else min(pool_limit, queue_limit)
        return Limits(
            self.idle_threshold_percent,
            self.idle_period,
            self.grace,
            shortest,
            self.exempt_classes,
            self.memory_activity_mib,
        )


@dataclass(frozen=True, slots=True)
class CleanupLimits:
    """When a pod counts as abnormal.

    Attributes:
        crash_loop_restarts: Restarts after which a pod in CrashLoopBackOff is cleaned up.
        not_running_timeout: Seconds a bound pod may stay not Running (stuck image pull, failed
            device allocation) before it is cleaned up.
        node_not_ready_timeout: Seconds a pod's node may stay NotReady before it is cleaned up.
    """

    crash_loop_restarts: int = 5
    not_running_timeout: float = 900.0
    node_not_ready_timeout: float = 300.0

    def __post_init__(self) -> None:
        _check(self.crash_loop_restarts >= 1, "crashLoopRestarts", "must be >= 1")
        for name, value in (
            ("notRunningTimeout", self.not_running_timeout),
            ("nodeNotReadyTimeout", self.node_not_ready_timeout),
        ):
            _check(math.isfinite(value) and value > 0, name, f"must be > 0, got {value}")


@dataclass(frozen=True, slots=True)
class UsagePoint:
    """One usage sample of a pod (summed over its GPUs).

    Attributes:
        time: When it was taken, in seconds.
        sm_percent: SM utilisation, percent.
        memory_mib: GPU memory held, MiB.
    """

    time: float
    sm_percent: float
    memory_mib: float = 0.0


@dataclass(frozen=True, slots=True)
class PodWarning:
    """A warning already given to a pod: which rule and when (seconds)."""

    rule: Rule
    time: float


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the rules know about one bound pod.

    Attributes:
        uid: The pod.
        pod_class: Its ``gpupool.io/class`` ("" for none).
        allocated_at: When its share started (the allocation record's time), seconds.
        phase: ``status.phase``.
        restarts: The most restarts of any of its containers.
        waiting_reason: A container's waiting reason (``CrashLoopBackOff``, ...), "" if none.
        node_not_ready_since: Since when its node is NotReady; ``None`` while Ready.
        usage: Usage samples, oldest first (only those since the allocation count).
        last_active: The agent's last time the pod used the GPU (SM > 0); ``None`` unknown.
        warning: The warning it carries, if any.
        deleting: Whether its deletion is under way.
    """

    uid: str
    pod_class: str = ""
    allocated_at: float | None = None
    phase: str = "Running"
    restarts: int = 0
    waiting_reason: str = ""
    node_not_ready_since: float | None = None
    usage: Sequence[UsagePoint] = ()
    last_active: float | None = None
    warning: PodWarning | None = None
    deleting: bool = False


def idle_since(
    usage: Sequence[UsagePoint],
    threshold: float,
    memory_activity_mib: float,
    last_active: float | None = None,
    allocated_at: float | None = None,
) -> float | None:
    """Since when a pod has been idle, or ``None`` if it is active now or nothing is known.

    A sample is active when its SM utilisation is at or above ``threshold`` or its memory moved
    by more than ``memory_activity_mib`` since the sample before. The idle run is the trailing
    run of inactive samples. When no active sample is known (the controller restarted, history
    is short), the agent's ``last_active`` (the last time SM was above zero, hence the last
    time the pod could have been at or above any threshold > 0) may start the run earlier. A
    pod is never idle since before its allocation.
    """
    if not usage or threshold <= 0:
        return None
    start: float | None = None
    saw_active = False
    for index in range(len(usage) - 1, -1, -1):
        point = usage[index]
        moved = index > 0 and abs(point.memory_mib - usage[index - 1].memory_mib) > (
            memory_activity_mib
        )
        if point.sm_percent >= threshold or moved:
            saw_active = True
            break
        start = point.time
    if start is None:
        return None
    if not saw_active and last_active is not None and usage[-1].sm_percent == 0:
        start = min(start, last_active)
    if allocated_at is not None:
        start = max(start, allocated_at)
    return start


def _cleanup(pod: PodFacts, limits: CleanupLimits, now: float) -> Cleanup | None:
    values: dict[str, float | int | str]
    if pod.waiting_reason == CRASH_LOOP_REASON and pod.restarts >= limits.crash_loop_restarts:
        values = {"restarts": pod.restarts, "restart_limit": limits.crash_loop_restarts}
        return Cleanup(pod.uid, Rule.CRASH_LOOP, values)
    if pod.node_not_ready_since is not None:
        seconds = now - pod.node_not_ready_since
        if seconds >= limits.node_not_ready_timeout:
            values = {"not_ready_seconds": seconds, "timeout": limits.node_not_ready_timeout}
            return Cleanup(pod.uid, Rule.NODE_NOT_READY, values)
    if pod.phase == "Pending" and pod.allocated_at is not None:
        seconds = now - pod.allocated_at
        if seconds >= limits.not_running_timeout:
            values = {"bound_seconds": seconds, "timeout": limits.not_running_timeout}
            if pod.waiting_reason:
                values["waiting_reason"] = pod.waiting_reason
            return Cleanup(pod.uid, Rule.NOT_RUNNING, values)
    return None


def _firing(pod: PodFacts, limits: Limits, now: float) -> tuple[Rule, dict[str, float]] | None:
    """The reclaim rule that fires on a running pod now (duration first), with its values."""
    if pod.pod_class and pod.pod_class in limits.exempt_classes:
        return None
    if pod.phase != "Running":
        return None
    if limits.max_share_duration is not None and pod.allocated_at is not None:
        held = now - pod.allocated_at
        if held >= limits.max_share_duration:
            return Rule.MAX_SHARE_DURATION, {
                "held_seconds": held,
                "max_share_duration": limits.max_share_duration,
            }
    threshold = limits.idle_threshold_percent
    if threshold is not None:
        since = idle_since(
            pod.usage, threshold, limits.memory_activity_mib, pod.last_active, pod.allocated_at
        )
        if since is not None and now - since >= limits.idle_period:
            return Rule.IDLE, {
                "idle_seconds": now - since,
                "idle_period": limits.idle_period,
                "threshold_percent": threshold,
                "sm_percent": pod.usage[-1].sm_percent,
            }
    return None


def decide(pod: PodFacts, limits: Limits, cleanup: CleanupLimits, now: float) -> Decision | None:
    """What to do about one bound pod now; ``None``: nothing.

    Cleanup rules win over reclaim rules (an abnormal pod is removed at once). A reclaim rule
    warns first; once warned for that rule, the pod is reclaimed when the grace period has
    passed and the rule still fires. A warning whose rule no longer fires is cleared.
    """
    if pod.deleting:
        return None
    abnormal = _cleanup(pod, cleanup, now)
    if abnormal is not None:
        return abnormal
    firing = _firing(pod, limits, now)
    warning = pod.warning
    if firing is None:
        if warning is not None:
            return ClearWarning(pod.uid, warning.rule, {"warned_at": warning.time})
        return None
    rule, values = firing
    if warning is None or warning.rule is not rule:
        return Warn(pod.uid, rule, {**values, "grace": limits.grace})
    waited = now - min(warning.time, now)
    if waited >= limits.grace:
        return Reclaim(pod.uid, rule, {**values, "grace": limits.grace, "warned_seconds": waited})
    return None


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """Where the API server says a pod is.

    Attributes:
        node: ``spec.nodeName`` ("" when not bound).
        finished: Whether its phase is Succeeded or Failed.
    """

    node: str
    finished: bool = False


def phantoms(
    held: Mapping[str, str], actual: Mapping[str, PodPlacement], in_flight: Iterable[str] = ()
) -> list[Release]:
    """Allocations still counted for pods that are gone, finished or bound elsewhere.

    Args:
        held: Pod uid -> node, as the scheduler's cache holds allocations.
        actual: Pod uid -> placement, as the API server says (pods missing here are gone).
        in_flight: Pods whose Binding is in flight (held before the API shows them bound).
    """
    skip = set(in_flight)
    found: list[Release] = []
    for uid in sorted(held):
        if uid in skip:
            continue
        node = held[uid]
        placement = actual.get(uid)
        if placement is None:
            found.append(Release(uid, Rule.PHANTOM, {"held_on": node, "why": "deleted"}))
        elif placement.finished:
            found.append(Release(uid, Rule.PHANTOM, {"held_on": node, "why": "finished"}))
        elif placement.node != node:
            values = {"held_on": node, "bound_to": placement.node or "(none)", "why": "moved"}
            found.append(Release(uid, Rule.PHANTOM, values))
    return found
