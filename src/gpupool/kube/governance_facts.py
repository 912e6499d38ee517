"""From Kubernetes objects to the plain facts the governance rules read.

The rules (:mod:`gpupool.governance.rules`) know nothing of Kubernetes; this module reads what
they need out of the scheduler's cached records, the GPUPool and GPUQueue objects and the node
agent's usage annotation, and nothing else. What a tenant can write is not believed where it
matters:

* usage comes only from the Node annotation ``gpupool.io/gpu-usage``, which the node agent
  writes and tenants cannot (a pod annotation claiming activity would keep an idle pod forever);
* the share's start is the allocation record's time, and only for a pod the scheduler holds as
  trusted (signed record), not a time a tenant could set;
* a warning time on the pod (``gpupool.io/governance-warned``) can only make the controller act
  *sooner* than its own memory says, never later: a time in the future is ignored.

A malformed object is logged and skipped, never fatal: a bad pool turns governance off for that
pool's pods rather than stopping it for everyone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpupool.core.model import RequestKind
from gpupool.governance.decisions import Rule
from gpupool.governance.rules import CRASH_LOOP_REASON, GovernanceSettingsError, Limits, PodWarning
from gpupool.governance.units import AllocationSize, UnitsError, allocation_size
from gpupool.kube.allocation import AllocationRecord
from gpupool.kube.records import NodeRecord, PodRecord
from gpupool.kube.vocabulary import (
    ANNOTATION_GPU_USAGE,
    LABEL_GPU_MEMORY,
)
from gpupool.policy.config import parse_duration

log = logging.getLogger(__name__)

DEFAULT_GRACE = 300.0
"""Seconds between a warning and the reclaim when the pool sets no ``reclaimGrace``."""


def parse_time(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time; ``None`` when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def format_time(seconds: float) -> str:
    """RFC 3339 (UTC, whole seconds) of epoch seconds."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod's entry in a node's usage annotation (times in epoch seconds)."""

    sampled_at: float
    sm_percent: float
    memory_mib: float
    last_active: float | None


def node_usage(node: NodeRecord) -> dict[str, PodUsage]:
    """Per pod uid, the usage the node agent last published on ``node`` (empty if none)."""
    text = node.metadata.annotations.get(ANNOTATION_GPU_USAGE)
    if not text:
        return {}
    try:
        document = json.loads(text)
        sampled_at = parse_time(document["sampledAt"])
        pods = document["pods"]
        if sampled_at is None or not isinstance(pods, dict):
            raise ValueError("sampledAt or pods")
        found = {}
        for uid, entry in pods.items():
            sm = float(entry["smPercent"])
            memory = float(entry.get("memoryMib", 0))
            if not (0 <= sm <= 100 * 64 and memory >= 0):
                raise ValueError(f"pods.{uid}: smPercent or memoryMib out of range")
            found[str(uid)] = PodUsage(sampled_at, sm, memory, parse_time(entry.get("lastActive")))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        log.warning("node %s: %s unreadable: %s", node.key, ANNOTATION_GPU_USAGE, error)
        return {}
    return found


def not_ready_since(node: NodeRecord | None) -> float | None:
    """Since when ``node`` is NotReady (its Ready condition's last transition); ``None``: Ready.

    A node with no Ready condition, or whose transition time cannot be read, counts as not
    ready since the epoch only if it has said so explicitly; a node gpupool has not seen at all
    (``None``) is left to the scheduler's cache.
    """
    if node is None or node.ready:
        return None
    for condition in node.status.conditions:
        if condition.type == "Ready":
            return parse_time(condition.last_transition_time)
    return None


def parse_warning(text: str | None) -> PodWarning | None:
    """The ``<rule>@<time>`` warning annotation; ``None`` when absent or unreadable."""
    if not text or "@" not in text:
        return None
    rule_text, _, time_text = text.partition("@")
    moment = parse_time(time_text)
    try:
        rule = Rule(rule_text)
    except ValueError:
        return None
    return None if moment is None else PodWarning(rule, moment)


def format_warning(warning: PodWarning) -> str:
    """The annotation value of a warning."""
    return f"{warning.rule.value}@{format_time(warning.time)}"


def allocation_units(record: AllocationRecord, node: NodeRecord | None) -> AllocationSize:
    """GPU units and GiB of a trusted allocation record (zero when it cannot be counted)."""
    gpu_memory = 0
    if node is not None:
        text = node.metadata.labels.get(LABEL_GPU_MEMORY, "0")
        gpu_memory = int(text) if text.isdigit() else 0
    try:
        kind = RequestKind(record.kind)
        share = record.gpus[0] if record.gpus else None
        return allocation_size(
            kind,
            gpu_count=len(record.gpus),
            milli_per_gpu=share.milli if share else 0,
            memory_mib_per_gpu=share.memory_mib if share else 0,
            gpu_memory_mib=gpu_memory,
            mig_profile=record.mig_profile,
        )
    except (ValueError, UnitsError) as error:
        log.warning("allocation on %s cannot be counted: %s", record.node, error)
        return AllocationSize(0.0, 0.0)


@dataclass(frozen=True, slots=True)
class PoolGovernance:
    """One GPUPool's selector and governance limits."""

    name: str
    selector: tuple[tuple[str, str], ...]
    limits: Limits


@dataclass(frozen=True, slots=True)
class GovernanceSettings:
    """The governance settings of every pool and queue.

    Attributes:
        pools: Pools with their selectors and limits, by name.
        queue_of_namespace: The queue each namespace belongs to.
        queue_limits: Each queue's maxShareDuration (seconds), where set.
    """

    pools: tuple[PoolGovernance, ...] = ()
    queue_of_namespace: Mapping[str, str] = field(default_factory=dict)
    queue_limits: Mapping[str, float] = field(default_factory=dict)

    def pool_of(self, node: NodeRecord | None) -> PoolGovernance | None:
        """The one pool that selects ``node``; ``None`` for none or for a conflict."""
        if node is None:
            return None
        labels = node.metadata.labels
        matching = [p for p in self.pools if all(labels.get(k) == v for k, v in p.selector)]
        return matching[0] if len(matching) == 1 else None

    def limits_for(self, pool: PoolGovernance | None, namespace: str) -> Limits:
        """The pool's limits with its queue's share-duration limit applied."""
        base = pool.limits if pool is not None else Limits()
        queue = self.queue_of_namespace.get(namespace, "")
        return base.with_queue_limit(self.queue_limits.get(queue))


def _seconds(spec: Mapping[str, Any], key: str, path: str) -> float | None:
    value = spec.get(key)
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as error:
        raise GovernanceSettingsError(f"{path}.{key}", str(error)) from None


def pool_limits(spec: Mapping[str, Any]) -> Limits:
    """The :class:`Limits` of one GPUPool's ``spec`` (raises :class:`GovernanceSettingsError`).

    ``idleGrace`` is the idle period (how long a pod may stay idle before it is warned);
    ``reclaimGrace`` the time between the warning and the reclaim (default 5 minutes).
    """
    governance = spec.get("governance") or {}
    if not isinstance(governance, Mapping):
        raise GovernanceSettingsError("spec.governance", "must be an object")
    path = "spec.governance"
    threshold_spec = governance.get("idleThreshold") or {}
    threshold = threshold_spec.get("gpuUtilPercent") if isinstance(threshold_spec, dict) else None
    if threshold is not None and not isinstance(threshold, int | float):
        raise GovernanceSettingsError(f"{path}.idleThreshold.gpuUtilPercent", "must be a number")
    exempt = governance.get("exemptClasses") or []
    if not isinstance(exempt, list) or not all(isinstance(c, str) for c in exempt):
        raise GovernanceSettingsError(f"{path}.exemptClasses", "must be a list of strings")
    idle = _seconds(governance, "idleGrace", path)
    grace = _seconds(governance, "reclaimGrace", path)
    return Limits(
        idle_threshold_percent=None if threshold is None else float(threshold),
        idle_period=idle if idle is not None else 1800.0,
        grace=grace if grace is not None else DEFAULT_GRACE,
        max_share_duration=_seconds(governance, "maxShareDuration", path),
        exempt_classes=frozenset(exempt),
    )


def read_settings(
    pools: Sequence[Mapping[str, Any]], queues: Sequence[Mapping[str, Any]]
) -> GovernanceSettings:
    """Settings from GPUPool and GPUQueue objects; a bad object is logged and left out."""
    found: list[PoolGovernance] = []
    for obj in pools:
        name = str(obj.get("metadata", {}).get("name", ""))
        spec = obj.get("spec") or {}
        try:
            selector = spec.get("nodeSelector") or {}
            found.append(
                PoolGovernance(name, tuple(sorted(map(tuple, selector.items()))), pool_limits(spec))
            )
        except (GovernanceSettingsError, AttributeError, TypeError) as error:
            log.warning("GPUPool %s: governance off for its pods: %s", name, error)
    queue_of: dict[str, str] = {}
    limits: dict[str, float] = {}
    for obj in queues:
        name = str(obj.get("metadata", {}).get("name", ""))
        spec = obj.get("spec") or {}
        try:
            limit = _seconds(spec, "maxShareDuration", "spec")
        except GovernanceSettingsError as error:
            log.warning("GPUQueue %s: share-duration limit ignored: %s", name, error)
            limit = None
        if limit is not None:
            limits[name] = limit
        for namespace in spec.get("namespaces") or []:
            queue_of.setdefault(str(namespace), name)
    return GovernanceSettings(tuple(found), queue_of, limits)


def pod_restarts(pod: PodRecord) -> tuple[int, str]:
    """The most restarts of any container, and a waiting reason (crash loop first)."""
    statuses = pod.status.container_statuses
    restarts = max((s.restart_count for s in statuses), default=0)
    reasons = [s.state.waiting.reason for s in statuses if s.state.waiting is not None]
    reason = CRASH_LOOP_REASON if CRASH_LOOP_REASON in reasons else next(iter(reasons), "")
    return restarts, reason
