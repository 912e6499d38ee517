"""The live scheduling loop: the pure core deciding, Kubernetes carrying the decisions out.

One cycle: bring the cache up to date from the informers (:class:`ClusterState`) and the policy's
inputs with it (:class:`~gpupool.kube.policy_book.PolicyBook`: pools and queues from the GPUPool
and GPUQueue objects, running pods, the ledger), take the pods the scheduling queue says are
ready (:class:`SchedulingQueue`), plus the pods that hold a nomination or a backfill reservation
(so that neither is lost while they back off), and run the
:class:`~gpupool.scheduling.engine.PolicyEngine` the simulator runs over them. Its decisions:

* ``Admit``: *assumed* at once (its GPUs are held, its queue charged) and sent as a Binding in
  the background, up to ``bind_concurrency`` at a time, with the pool and queue in the signed
  allocation record;
* ``Wait``: the pod stays pending with the engine's reason (a quota's: ``queue research:
  ceiling 12 GPU units reached in pool a100-shared``, or kube-scheduler's capacity sentence) as
  a ``PodScheduled=False`` condition and a ``FailedScheduling`` Event, written only when the
  reason changes;
* ``Preempt``: the pod is nominated to the node (``status.nominatedNodeName``, and no other pod
  of at most its priority is placed there meanwhile) and its victims are evicted through the
  Eviction API (:mod:`gpupool.kube.evictions`), honouring PodDisruptionBudgets.

With no GPUPool or GPUQueue objects there is one implicit pool and one default queue, and the
engine places pods exactly as the placement policy alone would.

Failure is contained to the pod it concerns:

* a Binding the API server refuses (403, 422, an admission denial) leaves the pod pending with
  the server's message as its reason and sends it to backoff (1 s doubling to 10 s); a 409 or
  404 is believed; a 5xx or a transport error leaves the outcome unknown, so the GPUs stay held
  and the pod is looked up until the answer is known;
* an exception while scheduling one pod becomes that pod's pending reason and a counter; the
  loop goes on with the next pod, and a failing cycle is retried after a pause instead of
  ending the process (which would meet the same pod again after its restart).

Only the leader runs cycles (:mod:`gpupool.kube.leader`); when a replica becomes leader it
relists both informers first, so it starts from a fresh, consistent read of the cluster rather
than from whatever its standby cache had. The pod informer leaves finished pods out (a field
selector, as kube-scheduler's), so neither replica keeps them: a pod that finishes arrives as a
deletion, which releases what it held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from gpupool.core.decisions import Bind
from gpupool.core.snapshot import AllocationError, ClusterSnapshot
from gpupool.kube import allocation
from gpupool.kube.api import KubeAPI
from gpupool.kube.evictions import Eviction, Evictor
from gpupool.kube.informer import Informer
from gpupool.kube.observe import SchedulingMetrics
from gpupool.kube.policy_book import PolicyBook
from gpupool.kube.policy_cycle import PodCheckedScheduler, ordering_wait
from gpupool.kube.policy_source import PolicySource
from gpupool.kube.policy_status import Status, StatusWriter, live_statuses
from gpupool.kube.preempting import Preemptions
from gpupool.kube.queue import SchedulingQueue
from gpupool.kube.records import NodeRecord, PodRecord
from gpupool.kube.signing import RecordSigner
from gpupool.kube.state import ClusterState
from gpupool.kube.translate import InvalidObjectError
from gpupool.kube.vocabulary import ANNOTATION_ALLOCATION, SCHEDULER_NAME
from gpupool.kube.writes import BindOutcome, BindResult, PodReporter, bind, find_out, now_rfc3339
from gpupool.policy.backfill import Reservation
from gpupool.policy.workload import Workload
from gpupool.scheduling.engine import Admit, CycleRequest, CycleResult, PolicyEngine, Preempt
from gpupool.scheduling.registry import PolicyContext, build_policy

log = logging.getLogger(__name__)

CYCLE_ERROR_PAUSE = 1.0
"""Seconds to wait after a cycle failed as a whole before the next one."""
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"
"""The pod watch's field selector: finished pods hold nothing and are not kept."""
FAILPOINT_RAISE_LABEL = "GPUPOOL_FAILPOINT_RAISE_LABEL"
"""Test-only: pods carrying the label named by this environment variable make scheduling raise.

It exists so that tests can prove one failing pod does not stop the others; it is read once at
start and does nothing unless set.
"""

DecisionHook = Callable[[PodRecord, str, str], None]
"""Called as ``hook(pod, "bind" | "reject", detail)`` after a bind lands or a pod is reported
unschedulable with a new reason (the governance controller audits these)."""

LIVE_POLICIES = ("default", "bestfit", "packing", "dotprod", "clustering", "random")
"""Policies that need no workload known in advance (FGD's typical pods come from a trace)."""


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """How the live scheduler runs.

    Attributes:
        identity: This replica's name (Lease holder, Event reporter, allocation ``scheduler``).
        scheduler_name: ``spec.schedulerName`` of the pods to schedule.
        policy: Placement policy name (one of :data:`LIVE_POLICIES`).
        bind_concurrency: Bindings in flight at once.
        seed: Seed for randomised policies.
    """

    identity: str
    scheduler_name: str = SCHEDULER_NAME
    policy: str = "default"
    bind_concurrency: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if self.policy not in LIVE_POLICIES:
            raise ValueError(f"policy: {self.policy!r} is not one of {', '.join(LIVE_POLICIES)}")
        if self.bind_concurrency < 1:
            raise ValueError("bind_concurrency: must be >= 1")


@dataclass
class LiveStats:
    """Counters for metrics and tests.

    Attempts by result, bind errors by reason and decision latency are in
    :class:`~gpupool.kube.observe.SchedulingMetrics`.

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


def _pod_order(pod: PodRecord) -> tuple[int, str, str, str]:
    """Highest priority first, then oldest, then by name (a total order)."""
    meta = pod.metadata
    return (-pod.spec.priority, meta.creation_timestamp or "", meta.namespace, meta.name)


@dataclass
class LiveScheduler:
    """Informers, cache, queue and the cycle loop of one replica.

    Args:
        api: The API port.
        config: How to schedule.
        signer: Signs the allocation records this replica writes and verifies the ones it reads.
    """

    api: KubeAPI
    config: LiveConfig
    signer: RecordSigner | None = None
    state: ClusterState = field(init=False)
    stats: LiveStats = field(default_factory=LiveStats)
    metrics: SchedulingMetrics = field(default_factory=SchedulingMetrics)
    leading: bool = False
    on_decision: DecisionHook | None = None

    def __post_init__(self) -> None:
        self.reports = PodReporter(self.api, self.config.identity)
        self.book = PolicyBook(self.config.scheduler_name)
        self.state = ClusterState(
            self.config.scheduler_name, signer=self.signer, warn=self._warn, prepare=self._prepare
        )
        self.queue = SchedulingQueue()
        self.wake = asyncio.Event()
        self.pods = Informer(
            self.api, "/api/v1/pods", PodRecord, self._on_pod, field_selector=UNFINISHED_PODS
        )
        self.nodes = Informer(self.api, "/api/v1/nodes", NodeRecord, self._on_node)
        self.policies = PolicySource(self.api, self._on_policy)
        evictor = Evictor(self.api, self.reports, self._still_evicting, self.wake.set)
        self.preemptions = Preemptions(evictor, self.reports)
        self.status = StatusWriter(self.api)
        context = PolicyContext(rng=np.random.default_rng(self.config.seed), trace_pods=())
        self.placement = PodCheckedScheduler(build_policy(self.config.policy, context))
        self.engine: PolicyEngine | None = None
        self._reservations: dict[int, Reservation] = {}
        self._seen: set[str] = set()  # pods shown to the policy (online learning)
        self._gate = asyncio.Semaphore(self.config.bind_concurrency)
        self._binds: set[asyncio.Task[None]] = set()
        self._raise_label = os.environ.get(FAILPOINT_RAISE_LABEL, "")

    def _warn(self, pod: PodRecord, reason: str, message: str) -> None:
        self.reports.event(pod, "Warning", reason, message)

    def _on_pod(self, kind: str, pod: PodRecord) -> None:
        if pod.status.phase == "Succeeded":
            self.book.completed(pod.metadata.uid, time.time())
        self.state.on_pod(kind, pod)
        uid = pod.metadata.uid
        gone = uid not in self.state.pods
        if gone:  # per-pod bookkeeping goes too
            self._seen.discard(uid)
            self.book.forget(uid)
        self.preemptions.on_pod(pod, gone=gone)
        if self.leading:
            self.wake.set()

    def _on_policy(self) -> None:
        self.state.invalidate()  # pools decide node membership and sharing: rebuild
        if self.leading:
            self.wake.set()

    def _prepare(self, snapshot: ClusterSnapshot) -> None:
        """A fresh snapshot: compile the pools and queues for its nodes."""
        policy = self.book.compile(self.policies.config, snapshot)
        self.engine = PolicyEngine(self.placement, policy)
        self._reservations = {}  # pool indices may have moved

    def _still_evicting(self, eviction: Eviction) -> bool:
        victim = self.state.pods.get(eviction.victim.metadata.uid)
        return (
            self.leading
            and victim is not None
            and victim.metadata.deletion_timestamp is None
            and eviction.preemptor.metadata.uid in self.state.pending
        )

    def _on_node(self, kind: str, node: NodeRecord) -> None:
        self.state.on_node(kind, node)
        if self.leading:
            self.wake.set()

    @property
    def synced(self) -> bool:
        """Whether every informer has completed its first list."""
        return self.pods.synced.is_set() and self.nodes.synced.is_set() and self.policies.synced

    async def run_informers(self) -> None:
        """Keep the caches current (every replica, leader or not) and write Events."""
        await asyncio.gather(
            self.pods.run(), self.nodes.run(), self.policies.run(), self.reports.run()
        )

    async def lead(self) -> None:
        """Schedule until cancelled; called when this replica becomes leader."""
        await self.policies.wait_synced()  # never admit against quotas not read yet
        await asyncio.gather(self.nodes.resync(), self.pods.resync(), self.policies.resync())
        self.state.restart()
        self.queue = SchedulingQueue()
        self.preemptions.clear()
        self.leading = True
        self.wake.set()
        status = asyncio.create_task(self.status.run(self.desired_status))
        try:
            while True:
                delay = self.queue.next_ready(time.monotonic())
                if delay is None:
                    await self.wake.wait()
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.wake.wait(), timeout=delay + 0.01)
                self.wake.clear()
                try:
                    await self.cycle()
                except Exception:
                    self.stats.cycle_errors += 1
                    log.exception("scheduling cycle failed; retrying in %.1f s", CYCLE_ERROR_PAUSE)
                    await asyncio.sleep(CYCLE_ERROR_PAUSE)
                    self.wake.set()
        finally:
            self.leading = False
            status.cancel()
            self.preemptions.evictor.cancel_all()
            for task in list(self._binds):
                task.cancel()
            self.state.deactivate()
            self.queue = SchedulingQueue()

    def _sync(self) -> None:
        state = self.state
        state.sync()
        changed, state.pending_changes = state.pending_changes, set()
        if changed:
            self.queue.update(changed, state.pending, time.monotonic())

    async def cycle(self) -> None:
        """One engine pass over the pods that are ready to be tried."""
        self.stats.cycles += 1
        state = self.state
        self._sync()
        snapshot, engine = state.snapshot, self.engine
        if snapshot is None or engine is None:
            return
        changed, state.held_changes = state.held_changes, set()
        self.book.update(changed, snapshot, state.pods, state.foreign)
        pods = state.pods
        ready = self.queue.pop_active(
            time.monotonic(),
            state.capacity_epoch,
            lambda uid: _pod_order(pods[uid]) if uid in pods else (0, "", "", uid),
        )
        workloads = self._workloads(dict.fromkeys([*ready, *self.preemptions.nominated]))
        if not workloads:
            return
        request = self._request(snapshot, workloads)
        started = time.perf_counter()
        result = engine.cycle(request)
        each = (time.perf_counter() - started) / len(workloads)
        for _ in workloads:
            self.metrics.latency.observe(each)
        if await self._apply(snapshot, engine, request, result):
            self.wake.set()  # pods deferred behind others: try them again next cycle
            await asyncio.sleep(0)  # after letting watches and lease renewals in

    def _workloads(self, uids: Iterable[str]) -> list[Workload]:
        """The pending pods among ``uids`` as workloads, with their node checks registered."""
        state, book = self.state, self.book
        checks = self.placement.checks = {}
        workloads: list[Workload] = []
        for uid in uids:
            pod = state.pods.get(uid)
            if pod is None or uid not in state.pending:
                self.queue.discard(uid)
                continue
            try:
                if self._raise_label and self._raise_label in pod.metadata.labels:
                    raise RuntimeError(f"failpoint: label {self._raise_label} on {pod.key}")
                workload = book.workload(pod, state.spec_of(pod))
                checks[uid] = state.node_checks(pod)
            except InvalidObjectError as error:
                self.stats.invalid_pods += 1
                self._failed(pod, f"invalid request: {error}", "unschedulable")
                continue
            except Exception as error:
                log.exception("scheduling %s failed", pod.key)
                self._failed(pod, f"scheduling error: {type(error).__name__}: {error}", "error")
                continue
            if uid not in self._seen:
                self.placement.observe(workload.pod)
                self._seen.add(uid)
            workloads.append(workload)
        return workloads

    def _request(self, snapshot: ClusterSnapshot, workloads: list[Workload]) -> CycleRequest:
        book, preemptions = self.book, self.preemptions
        return CycleRequest(
            snapshot=snapshot,
            pending=workloads,
            running=preemptions.candidates(book.running),
            ledger=book.ledger,
            now=time.time(),
            nominations=preemptions.rows(snapshot.node_index),
            runtimes=book.runtimes,
            reservations=self._reservations,
        )

    async def _apply(
        self,
        snapshot: ClusterSnapshot,
        engine: PolicyEngine,
        request: CycleRequest,
        result: CycleResult,
    ) -> bool:
        """Carry out one cycle's decisions: assume every admit first, then send the binds.

        Returns whether pods were deferred (see :func:`_ordering_wait`).
        """
        state = self.state
        self._reservations = result.reservations
        preemptions = self.preemptions
        preemptions.carry(result.nominations, snapshot.node_names)
        layout, tables = engine.policy.layout, engine.policy.tables
        admitted: list[tuple[PodRecord, Bind, str, str]] = []
        deferred = False
        for decision in result.decisions:
            uid = decision.workload.name
            pod = state.pods.get(uid)
            if pod is None:
                continue
            if isinstance(decision, Admit):
                try:
                    state.assume(decision.bind)
                except AllocationError as error:
                    self._failed(pod, f"scheduling error: {error}", "error")
                    continue
                self.book.admitted[uid] = (request.now, decision.expected_end)
                pool, queue = layout.pools[decision.pool].name, tables.queues[decision.queue].name
                admitted.append((pod, decision.bind, pool, queue))
            elif isinstance(decision, Preempt):
                checks = self.placement.checks.get(uid, ())
                started, reason = preemptions.start(pod, decision, state.pods, checks)
                self.stats.preemptions += started
                self._unschedulable(pod, reason)
            elif decision.reject is None and ordering_wait(decision.reason):
                self.queue.retry_now(uid)
                deferred = True
            else:
                self._unschedulable(
                    pod, preemptions.waiting_reason(uid, decision.reason, state.pods)
                )
        for pod, decision_bind, pool, queue in admitted:
            uid = pod.metadata.uid
            self.metrics.attempt("scheduled")
            self.queue.in_flight(uid)
            await self._gate.acquire()
            task = asyncio.create_task(self._bind(pod, decision_bind, pool, queue))
            self._binds.add(task)
            task.add_done_callback(self._binds.discard)
        return deferred

    def desired_status(self) -> dict[str, Status]:
        """GPUPool and GPUQueue status from the ledger (nothing when no such object exists)."""
        return live_statuses(self.book, self.policies, self.state.pods, self.state.pending)

    def _unschedulable(self, pod: PodRecord, message: str) -> None:
        self.metrics.attempt("unschedulable")
        uid = pod.metadata.uid
        now = time.monotonic()
        if self.queue.unschedulable(uid, now, self.state.capacity_epoch, message):
            self._report_pending(pod, message)

    def _failed(self, pod: PodRecord, message: str, result: str) -> None:
        self.metrics.attempt(result)
        if self.queue.failed(pod.metadata.uid, time.monotonic(), message):
            self._report_pending(pod, message)

    def pending_messages(self) -> list[str]:
        """The current reason of every pending pod ("" for pods not tried yet), for metrics."""
        entries = self.queue.entries
        return [
            entry.reason if (entry := entries.get(uid)) is not None else ""
            for uid in self.state.pending
        ]

    def _report_pending(self, pod: PodRecord, message: str) -> None:
        if self.on_decision is not None:
            self.on_decision(pod, "reject", message)
        self.reports.event(pod, "Warning", "FailedScheduling", message)
        self.reports.unschedulable(pod, message)

    async def _bind(self, pod: PodRecord, decision: Bind, pool: str, queue: str) -> None:
        uid = pod.metadata.uid
        try:
            record = allocation.from_decision(
                decision,
                self.state.uuids.get(decision.node_name, ()),
                self.config.identity,
                now_rfc3339(),
                pool=pool,
                queue=queue,
            )
            if self.signer is not None:
                record = self.signer.sign(record, uid)
            result = await bind(
                self.api,
                pod,
                decision.node_name,
                {ANNOTATION_ALLOCATION: allocation.encode(record)},
            )
            if result.outcome is BindOutcome.UNKNOWN:
                self.stats.bind_unknown += 1
                result = await find_out(self.api, pod, result)
            self._settle(pod, decision, result)
        finally:
            self._gate.release()

    def _settle(self, pod: PodRecord, decision: Bind, result: BindResult) -> None:
        uid = pod.metadata.uid
        if result.outcome is BindOutcome.BOUND:
            self.stats.binds += 1
            self.queue.bound(uid)
            gpus = ",".join(str(g) for g in decision.gpus) or "none"
            self.reports.event(
                pod,
                "Normal",
                "Scheduled",
                f"Successfully assigned {pod.key} to {decision.node_name} (GPUs {gpus})",
            )
            if self.on_decision is not None:
                self.on_decision(pod, "bind", f"node={decision.node_name} gpus={gpus}")
            return
        self.metrics.bind_failed(result.reason)
        self.state.forget(uid)
        if result.outcome is BindOutcome.GONE:
            self.queue.bound(uid)  # nothing left to schedule
        elif result.outcome is BindOutcome.REFUSED:
            message = f"binding refused by the API server: {result.message}"
            if self.queue.failed(uid, time.monotonic(), message):
                self._report_pending(pod, message)
        else:  # conflict or gone: the watch tells what happened; retry after a backoff
            self.queue.failed(uid, time.monotonic(), f"binding {result.reason}")
        self.wake.set()
