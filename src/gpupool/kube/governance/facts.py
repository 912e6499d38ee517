"""From Kubernetes objects to the plain facts the governance rules read.

The rules (:mod:`gpupool.governance.rules`) know nothing of Kubernetes; this module reads what they
need out of the scheduler's cached records, the GPUPool and GPUQueue objects and the node agent's
usage annotation, and nothing else. The objects are parsed by
:func:`gpupool.policy.config.parse_objects` and a pod's pool and queue are decided by
:mod:`gpupool.policy.membership`, exactly as the scheduler decides them, so a pod is governed and
billed in the pool and queue it was admitted through; its GPU units are
:func:`gpupool.policy.units.allocation_size`, the count its quota was charged. What a tenant can
write is not believed where it matters:

* usage comes only from the Node annotation ``gpupool.io/gpu-usage``, which the node agent
  writes and tenants cannot (a pod annotation claiming activity would keep an idle pod forever);
* the share's start is the allocation record's time, and only for a pod the scheduler holds as
  trusted (signed record), not a time a tenant could set;
* a warning time on the pod (``gpupool.io/governance-warned``) can only make the controller act
  *sooner* than its own memory says, never later: a time in the future is ignored;
* the ``gpupool.io/class`` label counts only if the pod's queue allows that class
  (:func:`gpupool.policy.membership.pod_class`), so a class the queue may not use buys no
  ``exemptClasses`` exemption.

A malformed object is left out, as the scheduler leaves it out (and reports it in the object's
status), never fatal: a bad pool turns governance off for that pool's pods rather than stopping
it for everyone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpupool.core.model import PodSpec, RequestKind
from gpupool.governance.decisions import Rule
from gpupool.governance.rules import CRASH_LOOP_REASON, Limits, PodWarning
from gpupool.kube.objects.allocation import AllocationRecord
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.timestamps import format_time, parse_time
from gpupool.kube.objects.usage_signal import UsageSignalError, decode_usage
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_GPU_USAGE,
    LABEL_CLASS,
    LABEL_GPU_MEMORY,
    LABEL_QUEUE,
)
from gpupool.policy.config import parse_objects
from gpupool.policy.membership import node_pool, pod_class, pod_queue
from gpupool.policy.spec import PolicyConfig, PoolSpec
from gpupool.policy.units import AllocationSize, UnitsError, allocation_size, pod_size
from gpupool.store.records import UsageSample

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod's entry in a node's usage annotation (times in epoch seconds).

    ``memory_busy_percent`` is 0 when the agent does not publish it (an agent older than the
    field): the idle rule then reads SM and memory held only, as it did.
    """

    sampled_at: float
    sm_percent: float
    memory_mib: float
    last_active: float | None
    memory_busy_percent: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node's usage annotation: when the agent sampled, how often it publishes, per pod."""

    sampled_at: float
    period: float
    pods: dict[str, PodUsage]


def node_usage(node: NodeRecord) -> NodeUsage | None:
    """The usage the node agent last published on ``node`` (None if none, or unreadable).

    ``periodSeconds`` is the agent's publication period (an agent that does not say has the
    default one), which decides when its samples go stale (:mod:`gpupool.governance.freshness`).
    """
    text = node.metadata.annotations.get(ANNOTATION_GPU_USAGE)
    if not text:
        return None
    try:
        signal = decode_usage(text)
        sampled_at = parse_time(signal.sampled_at)
        if sampled_at is None:
            raise UsageSignalError(f"sampledAt: {signal.sampled_at!r} is not an RFC 3339 time")
    except UsageSignalError as error:
        log.warning("node %s: %s unreadable: %s", node.key, ANNOTATION_GPU_USAGE, error)
        return None
    pods = {
        uid: PodUsage(
            sampled_at,
            entry.sm_percent,
            entry.memory_mib,
            parse_time(entry.last_active),
            entry.memory_busy_percent,
        )
        for uid, entry in signal.pods.items()
    }
    return NodeUsage(sampled_at, signal.period_seconds, pods)


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


def _gpu_memory(node: NodeRecord | None) -> int:
    """MiB of one of the node's GPUs, from the label gpupool's inventory sets (0: unknown)."""
    if node is None:
        return 0
    text = node.metadata.labels.get(LABEL_GPU_MEMORY, "0")
    return int(text) if text.isdigit() else 0


def claim_units(claim_gpus: PodSpec, node: NodeRecord | None) -> AllocationSize:
    """GPU units and GiB of what a claim holds (its GPUs as the scheduler's snapshot holds them)."""
    return pod_size(claim_gpus, _gpu_memory(node))


def allocation_units(record: AllocationRecord, node: NodeRecord | None) -> AllocationSize:
    """GPU units and GiB of a trusted allocation record (zero when it cannot be counted)."""
    gpu_memory = _gpu_memory(node)
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
        return AllocationSize(0, 0.0)


@dataclass(frozen=True, slots=True)
class GovernanceSettings:
    """The pools and queues governance applies, as every process parses them.

    Attributes:
        config: The usable GPUPools and GPUQueues.
    """

    config: PolicyConfig = field(default_factory=PolicyConfig)

    def pool_of(self, node: NodeRecord | None) -> PoolSpec | None:
        """The pool of ``node``: the default pool if none selects it, None if two pools do.

        ``None`` also for a node the cache does not know.
        """
        if node is None:
            return None
        return node_pool(self.config.pools, node.metadata.labels).pool

    def queue_of(self, pod: PodRecord) -> str:
        """The queue ``pod`` is charged to (its label, only if that queue serves its namespace)."""
        meta = pod.metadata
        return pod_queue(self.config.queues, meta.namespace, meta.labels.get(LABEL_QUEUE, ""))

    def class_of(self, pod: PodRecord) -> str:
        """The class ``pod`` counts as: its label only if its queue allows that class."""
        meta = pod.metadata
        labels = meta.labels
        return pod_class(
            self.config.queues,
            meta.namespace,
            labels.get(LABEL_QUEUE, ""),
            labels.get(LABEL_CLASS, ""),
        )

    def limits_for(self, pool: PoolSpec | None, pod: PodRecord) -> Limits:
        """The pool's limits as they apply to a pod of its queue.

        The queue's share-duration limit applies, and the pool's exemptions only for classes
        the queue lists (:meth:`Limits.with_queue_classes`).
        """
        queue = self.queue_of(pod)
        spec = next((q for q in self.config.queues if q.name == queue), None)
        queue_limit = spec.max_share_duration if spec is not None else None
        if pool is None:
            return Limits().with_queue_limit(queue_limit)
        limits = Limits.of_pool(pool.governance, queue_limit)
        return limits.with_queue_classes(spec.allowed_classes if spec is not None else frozenset())


def read_settings(
    pools: Sequence[Mapping[str, Any]], queues: Sequence[Mapping[str, Any]]
) -> GovernanceSettings:
    """Settings from GPUPool and GPUQueue objects; an unusable object is left out.

    The scheduler logs each object it leaves out once and reports it in the object's status
    (``Valid`` False); the same objects are left out here, noted at debug level only, since
    this runs every pass.
    """
    config, problems = parse_objects(pools, queues)
    for (kind, name), message in problems.items():
        log.debug("%s %s left out of governance: %s", kind, name, message)
    return GovernanceSettings(config)


def pod_restarts(pod: PodRecord) -> tuple[int, str]:
    """The most restarts of any container, and a waiting reason (crash loop first)."""
    statuses = pod.status.container_statuses
    restarts = max((s.restart_count for s in statuses), default=0)
    reasons = [s.state.waiting.reason for s in statuses if s.state.waiting is not None]
    reason = CRASH_LOOP_REASON if CRASH_LOOP_REASON in reasons else next(iter(reasons), "")
    return restarts, reason


def stored_sample(uid: str, usage: PodUsage) -> list[UsageSample]:
    """The store's record of one sample; none for values the store refuses (logged)."""
    moment = datetime.fromtimestamp(usage.sampled_at, UTC)
    try:
        return [UsageSample(uid, moment, usage.sm_percent, usage.memory_mib / 1024)]
    except ValueError as error:
        log.warning("usage sample of pod %s not stored: %s", uid, error)
        return []
