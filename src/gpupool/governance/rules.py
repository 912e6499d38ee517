"""The governance rules: idle reclaim, time limits, abnormal pods, phantom shares.

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

A declared runtime (``gpupool.io/expected-runtime``) is a time limit, as a batch system's is: the
scheduler lets a pod start ahead of a reserved head on the strength of it (backfill), so a pod
that overran it unpunished would have bought its slot with a lie and delayed the head by the
overrun. Past its runtime it is warned, and reclaimed after the pool's grace (``reclaimGrace``).
Unlike the share-duration limit, ``exemptClasses`` do not exempt it: the limit is the pod's own
promise, not the pool's. A pod that declares nothing is never limited by an estimate. An
exemption holds only for a class the pod's queue lists in ``allowedClasses``
(:meth:`Limits.with_queue_classes`).

A pod bound without a trusted allocation record (placed past the scheduler, or with a forged
record) is given no GPU by the node agent and holds the scheduler's capacity as foreign: it is
cleaned up by the not-running rule once it is older than the timeout, whatever its phase.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace

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
from gpupool.governance.idleness import idle_period, idle_since
from gpupool.governance.usage import Activity, UsageHistory
from gpupool.policy.spec import GovernanceSpec

CRASH_LOOP_REASON = "CrashLoopBackOff"


class GovernanceSettingsError(FieldValueError):
    """A governance setting that cannot be used; the message names the field."""


def _check(condition: bool, name: str, message: str) -> None:
    if not condition:
        raise GovernanceSettingsError(name, message)


@dataclass(frozen=True, slots=True)
class Limits(GovernanceSpec):
    """One pool's (and its queue's) governance settings, in seconds and percent.

    The fields of a GPUPool's ``spec.governance`` (:class:`~gpupool.policy.spec.GovernanceSpec`,
    parsed by :mod:`gpupool.policy.config`, the reader every process shares), checked, plus:

    Attributes:
        memory_activity_mib: A change of GPU memory held by more than this between two samples
            counts as activity (a pod loading a model is not idle even at 0 % SM).
        memory_busy_percent: Memory-controller utilisation at or above this counts as activity
            (a checkpoint copied to the host, weights streamed in: SM near 0, memory busy);
            ``None``: SM and memory held only, as before the agent published it.
        quiet_history_factor: A pod that resumed after a quiet phase of ``q`` seconds gets an
            idle period of this times ``q`` when that is longer than the pool's (0: off). One
            quiet phase of that length was work, so the next one of about that length may be.
        quiet_age_fraction: A pod that resumed from a quiet phase gets at least this times the
            age of its share when its current quiet phase began (0: off). Its pauses grow as it
            ages (an endpoint's traffic thins after its launch, a session slows), faster than
            the longest one it came back from foretells: a service pausing 5 minutes an hour ago
            may pause 25 now.
        quiet_history_cap: The learned idle period is at most this many times the pool's: a pod
            cannot earn an unbounded hold by having paused once or by being old, and an
            abandoned pod that used to pause is still given back (later).
    """

    memory_activity_mib: float = 256.0
    memory_busy_percent: float | None = 1.0
    quiet_history_factor: float = 2.0
    quiet_age_fraction: float = 0.4
    quiet_history_cap: float = 3.0

    def __post_init__(self) -> None:
        threshold = self.idle_threshold_percent
        if threshold is not None:
            _check(0 <= threshold <= 100, "idleThreshold.gpuUtilPercent", "must be 0..100")
        busy = self.memory_busy_percent
        if busy is not None:
            _check(0 < busy <= 100, "memoryBusyPercent", f"must be in (0, 100], got {busy}")
        for name, value in (
            ("idlePeriod", self.idle_period),
            ("grace", self.grace),
            ("memoryActivityMiB", self.memory_activity_mib),
            ("quietHistoryFactor", self.quiet_history_factor),
            ("quietAgeFraction", self.quiet_age_fraction),
        ):
            _check(math.isfinite(value) and value >= 0, name, f"must be >= 0, got {value}")
        cap = self.quiet_history_cap
        _check(math.isfinite(cap) and cap >= 1, "quietHistoryCap", f"must be >= 1, got {cap}")
        if self.max_share_duration is not None:
            _check(self.max_share_duration > 0, "maxShareDuration", "must be > 0")

    @classmethod
    def of_pool(cls, spec: GovernanceSpec, queue_limit: float | None = None) -> Limits:
        """The limits of a GPUPool's ``spec.governance`` and its queue's share-duration limit."""
        settings = {f.name: getattr(spec, f.name) for f in fields(GovernanceSpec)}
        return cls(**settings).with_queue_limit(queue_limit)

    def with_queue_classes(self, allowed_classes: frozenset[str]) -> Limits:
        """These limits for a pod of a queue whose ``spec.allowedClasses`` is ``allowed_classes``.

        A pool's ``exemptClasses`` exempt only the classes the pod's queue lists: a class label
        is a tenant's to write, and a queue that restricts no class (empty: every class) lets
        each of its tenants name any class, so an exemption open to it would be open to anyone.
        An administrator grants an exemption to a team by listing the class in its queue.
        """
        return replace(self, exempt_classes=self.exempt_classes & allowed_classes)

    def with_queue_limit(self, queue_limit: float | None) -> Limits:
        """These limits with the shorter of the pool's and the queue's maxShareDuration."""
        if queue_limit is None:
            return self
        pool_limit = self.max_share_duration
        shortest = queue_limit if pool_limit is None else min(pool_limit, queue_limit)
        return replace(self, max_share_duration=shortest)

    @property
    def activity(self) -> Activity:
        """When a usage sample counts as activity under these limits (usage in the pod's terms)."""
        return self.activity_for(1.0)

    def activity_for(self, compute_fraction: float) -> Activity:
        """The same for SM utilisation measured against the whole GPU, as NVML reports it.

        ``compute_fraction`` is the part of the GPU's compute the pod was given
        (:func:`gpupool.policy.units.compute_fraction`): a 10 % share working flat out reads
        about 10 %, so it is active at ``idleThreshold`` times 0.1.
        """
        threshold = self.idle_threshold_percent
        return Activity(
            0.0 if threshold is None else threshold * compute_fraction,
            self.memory_busy_percent,
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
        allocated_at: When its share started (the allocation record's time), seconds; ``None``
            for a pod without a trusted record.
        declared_runtime: Its ``gpupool.io/expected-runtime``, seconds; ``None`` if undeclared.
        unplaced_since: For a bound pod without a trusted allocation record (it bypassed the
            scheduler, or its record is forged): when it was created; ``None`` otherwise.
        phase: ``status.phase``.
        restarts: The most restarts of any of its containers.
        waiting_reason: A container's waiting reason (``CrashLoopBackOff``, ...), "" if none.
        node_not_ready_since: Since when its node is NotReady; ``None`` while Ready.
        usage: Its usage so far (folded sample by sample under the pool's :attr:`Limits.activity`).
        last_active: The agent's last time the pod used the GPU (SM > 0); ``None`` unknown.
        compute_fraction: The part of its GPUs' compute the pod was given
            (:meth:`Limits.activity_for`), so its audit shows the threshold it was judged by.
        warning: The warning it carries, if any.
        deleting: Whether its deletion is under way.
    """

    uid: str
    pod_class: str = ""
    allocated_at: float | None = None
    declared_runtime: float | None = None
    unplaced_since: float | None = None
    phase: str = "Running"
    restarts: int = 0
    waiting_reason: str = ""
    node_not_ready_since: float | None = None
    usage: UsageHistory = field(default_factory=UsageHistory)
    last_active: float | None = None
    compute_fraction: float = 1.0
    warning: PodWarning | None = None
    deleting: bool = False


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
    if pod.unplaced_since is not None and pod.phase not in ("Succeeded", "Failed"):
        seconds = now - pod.unplaced_since
        if seconds >= limits.not_running_timeout:
            why = "bound without a trusted allocation record"
            values = {"bound_seconds": seconds, "timeout": limits.not_running_timeout, "why": why}
            return Cleanup(pod.uid, Rule.NOT_RUNNING, values)
    return None


def _time_limit(pod: PodFacts, limits: Limits) -> tuple[float, Rule, str] | None:
    """The shorter of the pod's declared runtime and its share-duration limit, if any.

    The shorter one fires first and, time only growing, keeps firing: the rule a pod was warned
    under never switches to the other, which would warn it again and push its reclaim back.
    """
    candidates: list[tuple[float, Rule, str]] = []
    if pod.declared_runtime is not None:
        candidates.append((pod.declared_runtime, Rule.DECLARED_RUNTIME, "expected_runtime"))
    exempt = bool(pod.pod_class) and pod.pod_class in limits.exempt_classes
    if limits.max_share_duration is not None and not exempt:
        limit = limits.max_share_duration
        candidates.append((limit, Rule.MAX_SHARE_DURATION, "max_share_duration"))
    return min(candidates) if candidates else None


def _firing(pod: PodFacts, limits: Limits, now: float) -> tuple[Rule, dict[str, float]] | None:
    """The reclaim rule that fires on a running pod now (time limits first), with its values."""
    if pod.phase != "Running":
        return None
    limit = _time_limit(pod, limits)
    if limit is not None and pod.allocated_at is not None:
        seconds, rule, name = limit
        held = now - pod.allocated_at
        if held >= seconds:
            return rule, {"held_seconds": held, name: seconds}
    if pod.pod_class and pod.pod_class in limits.exempt_classes:
        return None
    threshold = limits.idle_threshold_percent
    if threshold is None:
        return None
    since = idle_since(pod.usage, pod.last_active, pod.allocated_at)
    last = pod.usage.last
    if since is None or last is None:
        return None
    quiet_age = None if pod.allocated_at is None else since - pod.allocated_at
    period = idle_period(pod.usage, limits, quiet_age)
    if now - since < period:
        return None
    values = {
        "idle_seconds": now - since,
        "idle_period": period,
        "longest_quiet_seconds": pod.usage.longest_quiet,
        "threshold_percent": threshold * pod.compute_fraction,
        "pool_threshold_percent": threshold,
        "sm_percent": last.sm_percent,
        "memory_busy_percent": last.memory_busy_percent,
    }
    if quiet_age is not None:
        values["share_age_at_quiet_seconds"] = quiet_age
    return Rule.IDLE, values


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
