"""The live scheduling loop: the pure core deciding, Kubernetes carrying the decisions out.

One cycle: bring the snapshot up to date from the informers (:class:`ClusterState`), take the
pending pods in priority order, and for each run the same
:class:`~gpupool.core.framework.Scheduler` the simulator runs. A bind decision is *assumed* at
once (its GPUs are held) and sent as a Binding in the background, up to ``bind_concurrency`` at
a time, so API round trips overlap with the next decisions. A reject leaves the pod pending
with the specific reason as a ``PodScheduled=False`` condition and a ``FailedScheduling`` Event,
written only when the reason changes. A rejected pod is retried when capacity is freed or the
nodes change, not on every cycle.

Only the leader runs cycles (:mod:`gpupool.kube.leader`); when a replica becomes leader it
relists both informers first, so it starts from a fresh, consistent read of the cluster rather
than from whatever its standby cache had.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from gpupool.core.decisions import Bind
from gpupool.core.framework import Scheduler
from gpupool.kube import allocation
from gpupool.kube.api import ApiError, KubeAPI
from gpupool.kube.informer import DELETED, Informer
from gpupool.kube.observe import SchedulingMetrics
from gpupool.kube.records import NodeRecord, PodRecord
from gpupool.kube.state import ClusterState
from gpupool.kube.translate import InvalidObjectError
from gpupool.kube.vocabulary import ANNOTATION_ALLOCATION, SCHEDULER_NAME
from gpupool.kube.writes import BindOutcome, PodReporter, bind, now_rfc3339
from gpupool.scheduling.registry import PolicyContext, build_policy

log = logging.getLogger(__name__)

YIELD_EVERY = 0.02
"""Seconds of deciding after which a cycle lets the event loop run other tasks."""

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
    """Counters for metrics and tests."""

    cycles: int = 0
    binds: int = 0
    bind_conflicts: int = 0
    bind_unknown: int = 0
    rejects: int = 0
    invalid_pods: int = 0


@dataclass
class _Pending:
    epoch: int
    message: str


@dataclass
class LiveScheduler:
    """Informers, state and the cycle loop of one replica."""

    api: KubeAPI
    config: LiveConfig
    state: ClusterState = field(init=False)
    stats: LiveStats = field(default_factory=LiveStats)
    metrics: SchedulingMetrics = field(default_factory=SchedulingMetrics)

    def __post_init__(self) -> None:
        self.state = ClusterState(self.config.scheduler_name)
        self.wake = asyncio.Event()
        self.pods = Informer(self.api, "/api/v1/pods", PodRecord, self._on_pod)
        self.nodes = Informer(self.api, "/api/v1/nodes", NodeRecord, self._on_node)
        self.reports = PodReporter(self.api, self.config.identity)
        context = PolicyContext(rng=np.random.default_rng(self.config.seed), trace_pods=())
        self.scheduler = Scheduler(build_policy(self.config.policy, context))
        self._unschedulable: dict[str, _Pending] = {}
        self._seen: set[str] = set()  # pods shown to the policy (online learning)
        self._gate = asyncio.Semaphore(self.config.bind_concurrency)
        self._binds: set[asyncio.Task[None]] = set()

    def _on_pod(self, kind: str, pod: PodRecord) -> None:
        self.state.on_pod(kind, pod)
        if kind == DELETED:  # per-pod bookkeeping must not outlive the pod
            self._seen.discard(pod.metadata.uid)
            self._unschedulable.pop(pod.metadata.uid, None)
        self.wake.set()

    def _on_node(self, kind: str, node: NodeRecord) -> None:
        self.state.on_node(kind, node)
        self.wake.set()

    async def run_informers(self) -> None:
        """Keep the caches current (every replica, leader or not) and write Events."""
        await asyncio.gather(self.pods.run(), self.nodes.run(), self.reports.run())

    async def lead(self) -> None:
        """Schedule until cancelled; called when this replica becomes leader."""
        await asyncio.gather(self.nodes.resync(), self.pods.resync())
        self.state.restart()
        self._unschedulable.clear()
        self.wake.set()
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                await self.cycle()
        finally:
            for task in list(self._binds):
                task.cancel()

    async def cycle(self) -> None:
        """One pass over the pending pods."""
        self.stats.cycles += 1
        state = self.state
        state.sync()
        if state.snapshot is None:
            return
        loop = asyncio.get_running_loop()
        last_yield = loop.time()
        for pod in state.pending_in_order():
            if loop.time() - last_yield > YIELD_EVERY:
                # let watches, lease renewals and bind replies in; then catch up on them
                await asyncio.sleep(0)
                last_yield = loop.time()
                state.sync()
            uid = pod.metadata.uid
            if uid not in state.pending or state.snapshot is None:
                continue  # changed while we awaited a bind slot
            waiting = self._unschedulable.get(uid)
            if waiting is not None and waiting.epoch == state.capacity_epoch:
                continue
            try:
                spec = state.spec_of(pod)
            except InvalidObjectError as error:
                self._pending(pod, f"invalid request: {error}", invalid=True)
                continue
            started = time.perf_counter()
            decision = self.scheduler.schedule(
                state.snapshot, spec, state.node_checks(pod), retry=uid in self._seen
            )
            self.metrics.latency.observe(time.perf_counter() - started)
            self._seen.add(uid)
            if not isinstance(decision, Bind):
                self._pending(pod, decision.message)
                continue
            self._unschedulable.pop(uid, None)
            state.assume(decision)
            await self._gate.acquire()
            task = asyncio.create_task(self._bind(pod, decision))
            self._binds.add(task)
            task.add_done_callback(self._binds.discard)
            # the loop may have rebuilt the snapshot while we waited; pick that up
            state.sync()

    def pending_messages(self) -> list[str]:
        """Why each pending pod waits ("" for one not decided yet), for the metrics."""
        return [getattr(self._unschedulable.get(uid), "message", "") for uid in self.state.pending]

    def _pending(self, pod: PodRecord, message: str, *, invalid: bool = False) -> None:
        uid = pod.metadata.uid
        previous = self._unschedulable.get(uid)
        self._unschedulable[uid] = _Pending(self.state.capacity_epoch, message)
        self.metrics.attempt("unschedulable")
        if invalid:
            self.stats.invalid_pods += 1
        else:
            self.stats.rejects += 1
        if previous is None or previous.message != message:
            self.reports.event(pod, "Warning", "FailedScheduling", message)
            self.reports.unschedulable(pod, message)

    async def _bind(self, pod: PodRecord, decision: Bind) -> None:
        try:
            record = allocation.from_decision(
                decision,
                self.state.uuids.get(decision.node_name, ()),
                self.config.identity,
                now_rfc3339(),
            )
            outcome = await bind(
                self.api,
                pod,
                decision.node_name,
                {ANNOTATION_ALLOCATION: allocation.encode(record)},
                on_error=self.metrics.bind_failed,
            )
            if outcome is BindOutcome.UNKNOWN:
                self.stats.bind_unknown += 1
                outcome = await self._find_out(pod)
            self.metrics.attempt("scheduled" if outcome is BindOutcome.BOUND else "error")
            if outcome is BindOutcome.BOUND:
                self.stats.binds += 1
                gpus = ",".join(str(g) for g in decision.gpus) or "none"
                self.reports.event(
                    pod,
                    "Normal",
                    "Scheduled",
                    f"Successfully assigned {pod.key} to {decision.node_name} (GPUs {gpus})",
                )
            elif outcome is not BindOutcome.UNKNOWN:
                self.stats.bind_conflicts += 1
                self.state.forget(pod.metadata.uid)
                self.wake.set()
        finally:
            self._gate.release()

    async def _find_out(self, pod: PodRecord) -> BindOutcome:
        """After an ambiguous bind failure: is the pod bound? Keep the GPUs held until known."""
        path = f"/api/v1/namespaces/{pod.metadata.namespace}/pods/{pod.metadata.name}"
        delay = 0.5
        while True:
            try:
                current = await self.api.get(path)
            except ApiError as error:
                if error.status == 404:
                    return BindOutcome.GONE
            except Exception as error:  # keep the assumption; ask again
                log.warning("checking bind of %s: %s", pod.key, error)
            else:
                if current["metadata"]["uid"] != pod.metadata.uid:
                    return BindOutcome.GONE
                if current["spec"].get("nodeName"):
                    return BindOutcome.BOUND
                return BindOutcome.CONFLICT  # not bound: release and retry
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
