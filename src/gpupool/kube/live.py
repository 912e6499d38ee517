"""The live scheduling loop: the pure core deciding, Kubernetes carrying the decisions out.

One cycle: bring the cache up to date from the informers (:class:`ClusterState`), take the pods
the scheduling queue says are ready (:class:`SchedulingQueue`: priority, then age), and for each
run the same :class:`~gpupool.core.framework.Scheduler` the simulator runs. A bind decision is
*assumed* at once (its GPUs are held) and sent as a Binding in the background, up to
``bind_concurrency`` at a time, so API round trips overlap with the next decisions. A pod that
cannot be placed stays pending with the specific reason as a ``PodScheduled=False`` condition
and a ``FailedScheduling`` Event, written only when the reason changes.

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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpupool.core.decisions import Bind, Decision
from gpupool.core.framework import Scheduler
from gpupool.kube import allocation
from gpupool.kube.api import ApiError, KubeAPI
from gpupool.kube.informer import Informer
from gpupool.kube.observe import SchedulingMetrics
from gpupool.kube.queue import SchedulingQueue
from gpupool.kube.records import NodeRecord, PodRecord
from gpupool.kube.signing import RecordSigner
from gpupool.kube.state import ClusterState
from gpupool.kube.translate import InvalidObjectError
from gpupool.kube.vocabulary import ANNOTATION_ALLOCATION, SCHEDULER_NAME
from gpupool.kube.writes import BindOutcome, BindResult, PodReporter, bind, now_rfc3339
from gpupool.scheduling.registry import PolicyContext, build_policy

log = logging.getLogger(__name__)

YIELD_EVERY = 0.02
"""Seconds of deciding after which a cycle lets the event loop run other tasks."""
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
    """

    cycles: int = 0
    binds: int = 0
    bind_unknown: int = 0
    invalid_pods: int = 0
    cycle_errors: int = 0


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
        self.state = ClusterState(self.config.scheduler_name, signer=self.signer, warn=self._warn)
        self.queue = SchedulingQueue()
        self.wake = asyncio.Event()
        self.pods = Informer(
            self.api, "/api/v1/pods", PodRecord, self._on_pod, field_selector=UNFINISHED_PODS
        )
        self.nodes = Informer(self.api, "/api/v1/nodes", NodeRecord, self._on_node)
        context = PolicyContext(rng=np.random.default_rng(self.config.seed), trace_pods=())
        self.scheduler = Scheduler(build_policy(self.config.policy, context))
        self._seen: set[str] = set()  # pods shown to the policy (online learning)
        self._gate = asyncio.Semaphore(self.config.bind_concurrency)
        self._binds: set[asyncio.Task[None]] = set()
        self._raise_label = os.environ.get(FAILPOINT_RAISE_LABEL, "")

    def _warn(self, pod: PodRecord, reason: str, message: str) -> None:
        self.reports.event(pod, "Warning", reason, message)

    def _on_pod(self, kind: str, pod: PodRecord) -> None:
        self.state.on_pod(kind, pod)
        if pod.metadata.uid not in self.state.pods:  # gone: per-pod bookkeeping goes too
            self._seen.discard(pod.metadata.uid)
        if self.leading:
            self.wake.set()

    def _on_node(self, kind: str, node: NodeRecord) -> None:
        self.state.on_node(kind, node)
        if self.leading:
            self.wake.set()

    @property
    def synced(self) -> bool:
        """Whether both informers have completed their first list."""
        return self.pods.synced.is_set() and self.nodes.synced.is_set()

    async def run_informers(self) -> None:
        """Keep the caches current (every replica, leader or not) and write Events."""
        await asyncio.gather(self.pods.run(), self.nodes.run(), self.reports.run())

    async def lead(self) -> None:
        """Schedule until cancelled; called when this replica becomes leader."""
        await asyncio.gather(self.nodes.resync(), self.pods.resync())
        self.state.restart()
        self.queue = SchedulingQueue()
        self.leading = True
        self.wake.set()
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
        """One pass over the pods that are ready to be tried."""
        self.stats.cycles += 1
        state = self.state
        self._sync()
        if state.snapshot is None:
            return
        loop = asyncio.get_running_loop()
        last_yield = loop.time()
        pods = state.pods
        ready = self.queue.pop_active(
            time.monotonic(),
            state.capacity_epoch,
            lambda uid: _pod_order(pods[uid]) if uid in pods else (0, "", "", uid),
        )
        for uid in ready:
            if loop.time() - last_yield > YIELD_EVERY:
                # let watches, lease renewals and bind replies in; then catch up on them
                await asyncio.sleep(0)
                last_yield = loop.time()
                self._sync()
            pod = state.pods.get(uid)
            if pod is None or uid not in state.pending or state.snapshot is None:
                if uid not in state.pending:
                    self.queue.discard(uid)
                continue  # changed while we awaited
            try:
                decision = self._decide(pod)
            except InvalidObjectError as error:
                self.stats.invalid_pods += 1
                self._failed(pod, f"invalid request: {error}", "unschedulable")
                continue
            except Exception as error:
                log.exception("scheduling %s failed", pod.key)
                self._failed(pod, f"scheduling error: {type(error).__name__}: {error}", "error")
                continue
            if not isinstance(decision, Bind):
                self._unschedulable(pod, decision.message)
                continue
            self.metrics.attempt("scheduled")
            state.assume(decision)
            self.queue.in_flight(uid)
            await self._gate.acquire()
            task = asyncio.create_task(self._bind(pod, decision))
            self._binds.add(task)
            task.add_done_callback(self._binds.discard)
            # the loop may have rebuilt the snapshot while we waited; pick that up
            self._sync()

    def _decide(self, pod: PodRecord) -> Decision:
        state = self.state
        assert state.snapshot is not None
        if self._raise_label and self._raise_label in pod.metadata.labels:
            raise RuntimeError(f"failpoint: label {self._raise_label} on {pod.key}")
        spec = state.spec_of(pod)
        uid = pod.metadata.uid
        started = time.perf_counter()
        decision = self.scheduler.schedule(
            state.snapshot, spec, state.node_checks(pod), retry=uid in self._seen
        )
        self.metrics.latency.observe(time.perf_counter() - started)
        self._seen.add(uid)
        return decision

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

    async def _bind(self, pod: PodRecord, decision: Bind) -> None:
        uid = pod.metadata.uid
        try:
            record = allocation.from_decision(
                decision,
                self.state.uuids.get(decision.node_name, ()),
                self.config.identity,
                now_rfc3339(),
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
                result = await self._find_out(pod, result)
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

    async def _find_out(self, pod: PodRecord, first: BindResult) -> BindResult:
        """After an ambiguous bind failure: is the pod bound? Keep the GPUs held until known."""
        path = f"/api/v1/namespaces/{pod.metadata.namespace}/pods/{pod.metadata.name}"
        delay = 0.5
        while True:
            try:
                current = await self.api.get(path)
            except ApiError as error:
                if error.status == 404:
                    return BindResult(BindOutcome.GONE, "gone", error.message)
            except Exception as error:  # keep the assumption; ask again
                log.warning("checking bind of %s: %s", pod.key, error)
            else:
                if current["metadata"]["uid"] != pod.metadata.uid:
                    return BindResult(BindOutcome.GONE, "gone", "the pod was replaced")
                if current["spec"].get("nodeName"):
                    return BindResult(BindOutcome.BOUND)
                # not bound: the failure was real; retry after a backoff
                return BindResult(BindOutcome.CONFLICT, first.reason, first.message)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
