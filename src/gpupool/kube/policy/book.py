"""The policy engine's inputs, kept current from the cache: compiled policy, running set, ledger.

:class:`PolicyBook` holds what :class:`~gpupool.scheduling.engine.PolicyEngine` needs besides the
pending pods: the :class:`~gpupool.policy.cluster.ClusterPolicy` compiled for the current nodes
and pools, every running pod of this scheduler as a :class:`~gpupool.policy.workload.Running`
with what its queue was charged, and the :class:`~gpupool.policy.quota.Ledger` of those charges.

They follow the cache **incrementally**: :class:`~gpupool.kube.scheduler.state.ClusterState` names
every pod whose holding changed (``held_changes``), and only those are re-charged, so a cycle costs
nothing per running pod; only a snapshot rebuild (nodes, pools or queues changed) recharges
everything. Rebuilding the ledger every cycle would make each cycle O(all pods) in Python and
put the live bench behind kube-scheduler.

What a tenant writes is not trusted: the ``gpupool.io/queue`` label names the pod's queue only if
that queue lists the pod's namespace (:func:`gpupool.policy.membership.pod_queue`, the rule the
admission webhook enforces), otherwise the namespace decides; a forged label cannot buy a higher
queue's priority. The same holds for the ``gpupool.io/class`` label: a class the pod's queue
does not allow (``spec.allowedClasses``) counts as no class (:func:`gpupool.policy.membership.
pod_class`), so it routes the pod to no pool that only admits that class. A bound pod is charged
to the queue of its signed allocation record (:func:`recorded_queue`), not to its label, which
may have changed since. Only this scheduler's pods are charged and may be preempted;
other schedulers' pods hold their resources in the snapshot but are never victims.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects import allocation
from gpupool.kube.objects.pod_groups import group_key
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.vocabulary import (
    ANNOTATION_ALLOCATION,
    ANNOTATION_EXPECTED_RUNTIME,
    LABEL_CLASS,
    LABEL_QUEUE,
)
from gpupool.kube.policy.requeue import Requeue
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.membership import pod_class
from gpupool.policy.pools import NO_POOL
from gpupool.policy.quota import Ledger
from gpupool.policy.spec import PolicyConfig, QueueSpec
from gpupool.policy.spec_reader import parse_duration
from gpupool.policy.units import milli_units
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.runtime import RuntimeEstimator

log = logging.getLogger(__name__)


def epoch_seconds(stamp: str | None) -> float:
    """Seconds since the epoch of an RFC 3339 time (0.0 when absent or unreadable)."""
    if not stamp:
        return 0.0
    try:
        return dt.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


def expected_runtime(pod: PodRecord) -> float | None:
    """The declared runtime in seconds (``90m``, ``2h``, ``3600``), or None (absent, unreadable)."""
    text = pod.metadata.annotations.get(ANNOTATION_EXPECTED_RUNTIME, "").strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        return parse_duration(text)
    except ValueError:
        return None


def workload_of(
    pod: PodRecord, spec: PodSpec, queues: Iterable[QueueSpec], queue_label: str | None = None
) -> Workload:
    """The policy's view of a pod (its request ``spec`` comes from the cache).

    ``queues`` decide whether its class label counts (:func:`~gpupool.policy.membership.
    pod_class`); a required argument, so no caller forgets them and believes any class.
    ``queue_label``: the queue it asks for, in place of its ``gpupool.io/queue`` label (a bound
    pod's signed record: :func:`recorded_queue`).
    """
    meta = pod.metadata
    if queue_label is None:
        queue_label = meta.labels.get(LABEL_QUEUE, "")
    return Workload(
        pod=spec,
        namespace=meta.namespace,
        priority=pod.spec.priority,
        workload_class=pod_class(
            queues, meta.namespace, queue_label, meta.labels.get(LABEL_CLASS, "")
        ),
        created_at=epoch_seconds(meta.creation_timestamp),
        expected_runtime=expected_runtime(pod),
        queue=queue_label,
        gang=group_key(pod),
    )


def recorded_queue(pod: PodRecord) -> str | None:
    """The queue a bound pod's allocation record says it was charged to (None: no record).

    Only for a trusted record: the label may have changed since the bind (admission refuses
    that, but an administrator, or a cluster without the admission policy, may still do it),
    and charging the pod to its new label would move it past the new queue's ceiling while the
    cost ledger, which reads the record, kept charging the old one.
    """
    text = pod.metadata.annotations.get(ANNOTATION_ALLOCATION)
    if not text:
        return None
    try:
        return allocation.decode(text).queue or None
    except allocation.AllocationFormatError:
        return None


def started_at(pod: PodRecord, *, trusted: bool) -> float:
    """When a bound pod started: its trusted allocation record's time, else its creation.

    An untrusted record's time is never read: a forged future time would protect the pod from
    preemption (``minRuntimeBeforePreemption``) for as long as its author liked.
    """
    created = epoch_seconds(pod.metadata.creation_timestamp)
    text = pod.metadata.annotations.get(ANNOTATION_ALLOCATION)
    if trusted and text:
        try:
            return max(created, epoch_seconds(allocation.decode(text).time))
        except allocation.AllocationFormatError:
            return created
    return created


class PolicyBook:
    """Compiled policy, running pods and ledger for one leader term.

    Args:
        scheduler_name: Only pods of this scheduler are charged (and may be preempted).
    """

    def __init__(self, scheduler_name: str) -> None:
        self.scheduler_name = scheduler_name
        self.policy: ClusterPolicy | None = None
        self.running: dict[str, Running] = {}
        self.ledger = Ledger(0, 0)
        self.runtimes = RuntimeEstimator()
        self.admitted: dict[str, tuple[float, float]] = {}
        self._workloads: dict[str, tuple[str, Workload]] = {}
        self.requeue = Requeue()

    def compile(self, config: PolicyConfig, snapshot: ClusterSnapshot) -> ClusterPolicy:
        """Compile ``config`` for a fresh snapshot (before anything is bound on it)."""
        self.policy = ClusterPolicy.build(config, snapshot.nodes)
        self.policy.prepare(snapshot)
        self.running = {}
        self.ledger = self.policy.new_ledger()
        self._workloads.clear()
        return self.policy

    def workload(self, pod: PodRecord, spec: PodSpec) -> Workload:
        """The pending pod's workload, cached per resourceVersion (and per compiled policy)."""
        uid, version = pod.metadata.uid, pod.metadata.resource_version
        cached = self._workloads.get(uid)
        if cached is not None and cached[0] == version and cached[1].pod is spec:
            return cached[1]
        workload = workload_of(pod, spec, self._queues())
        place = self.requeue.place(pod, workload.created_at)
        if place != workload.created_at:
            workload = replace(workload, created_at=place)
        self._workloads[uid] = (version, workload)
        return workload

    def evicted(self, pod: PodRecord) -> None:
        """Gpupool made ``pod`` leave: the pod its controller makes again takes its place."""
        self.requeue.left(pod, epoch_seconds(pod.metadata.creation_timestamp))

    def _queues(self) -> tuple[QueueSpec, ...]:
        return self.policy.config.queues if self.policy is not None else ()

    def forget(self, uid: str) -> None:
        """Drop per-pod memory of a pod that left."""
        self._workloads.pop(uid, None)
        self.admitted.pop(uid, None)
        self.requeue.forget(uid)

    def completed(self, uid: str, now: float) -> None:
        """A running pod succeeded at ``now``: learn its runtime (for backfill estimates).

        Only success teaches: a failed or deleted pod says nothing about how long such work
        takes.
        """
        running, policy = self.running.get(uid), self.policy
        if running is None or policy is None:
            return
        queue = policy.tables.queues[running.queue].name
        self.runtimes.observe_completion(
            running.workload, queue, max(0.0, now - running.started_at)
        )

    def update(
        self,
        uids: Iterable[str],
        snapshot: ClusterSnapshot,
        pods: dict[str, PodRecord],
        foreign: set[str],
        claims: Mapping[str, PodSpec] | None = None,
        companions: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        """Re-charge the pods in ``uids`` from what the snapshot holds for them now.

        Args:
            uids: Pods whose holding changed.
            snapshot: The cache's snapshot.
            pods: The cache's pod records.
            foreign: Pods held without a trusted record.
            claims: Pod uid to the GPUs of the DRA claim it is charged for (the claim holds
                them in the snapshot, counted once: its first reserving pod pays).
            companions: Pod uid to the claims it alone reserves (:attr:`Running.companions`).
        """
        claims = claims or {}
        companions = companions or {}
        policy = self.policy
        if policy is None:
            return
        running, ledger = self.running, self.ledger
        for uid in uids:
            old = running.pop(uid, None)
            if old is not None:
                ledger.remove(old)
            held = snapshot.allocations.get(uid)
            pod = pods.get(uid)
            if held is None or pod is None or pod.spec.scheduler_name != self.scheduler_name:
                continue
            pool = int(policy.layout.node_pool[held.node])
            if pool == NO_POOL:
                continue  # a node two pools select takes no GPU pods; charge no pool for it
            trusted = uid not in foreign
            recorded = recorded_queue(pod) if trusted else None
            workload = workload_of(pod, held.pod, policy.config.queues, recorded)
            queue = policy.tables.queue_of(workload.namespace, workload.queue)
            admitted = self.admitted.get(uid)
            if admitted is not None:
                start, end = admitted
            else:
                start = started_at(pod, trusted=trusted)
                declared = workload.expected_runtime
                end = start + declared if declared is not None else float("inf")
            memory = snapshot.nodes[held.node].gpu_memory_mib
            units = milli_units(held.pod, memory)
            claim = claims.get(uid)
            if claim is not None:
                units += milli_units(claim, memory)
            charged = Running(
                workload, queue, pool, units, held.node, start, end, companions.get(uid, ())
            )
            running[uid] = charged
            ledger.add(charged)
