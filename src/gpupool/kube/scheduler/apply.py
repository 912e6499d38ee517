"""Carrying out one live cycle's decisions: assume and bind, nominate and evict, or wait.

* ``Admit``: *assumed* at once (its GPUs are held, its queue charged) and handed to the
  :class:`~gpupool.kube.scheduler.binder.Binder`, with the pool and queue for the signed
  allocation record. Every admission of the cycle is assumed before the first Binding is
  awaited, so a slow bind cannot let a later decision see room that is already given.
* ``Preempt``: the pod is nominated to the node (``status.nominatedNodeName``; no pod of at most
  its priority is placed there meanwhile) and its victims are evicted through the Eviction API
  (:mod:`gpupool.kube.scheduler.preempting`). The engine chose the node with the pod's own
  node constraints, so every preemption it returns is carried out.
* A gang's PodGroup (Kubernetes 1.37) gets its ``PodGroupInitiallyScheduled`` condition
  (:mod:`~gpupool.kube.scheduler.gang_status`).
* ``Wait``: the pod stays pending with the engine's reason; a pod held only behind others of
  this cycle (:attr:`~gpupool.scheduling.wait_cause.WaitKind.BEHIND`) is told so and tried
  again in the next one.

Every cycle's waits and preemptions also go to the congestion ledger
(:mod:`gpupool.governance.congestion_feed`), which charges each wait to the class that causes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.core.decisions import Bind
from gpupool.core.snapshot import AllocationError, ClusterSnapshot
from gpupool.governance.congestion_feed import CongestionFeed
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.policy.book import PolicyBook
from gpupool.kube.scheduler.binder import Binder
from gpupool.kube.scheduler.config import LiveStats
from gpupool.kube.scheduler.gang_status import GangStatus
from gpupool.kube.scheduler.preempting import Preemptions
from gpupool.kube.scheduler.reason_text import readable
from gpupool.kube.scheduler.state import ClusterState
from gpupool.kube.scheduler.verdicts import Verdicts
from gpupool.scheduling.decisions import Admit, CycleRequest, CycleResult, Preempt
from gpupool.scheduling.engine import PolicyEngine
from gpupool.scheduling.wait_cause import WaitKind

CycleHook = Callable[[PolicyEngine, CycleRequest, CycleResult], None]
"""What runs after a cycle is taken in: the engine, the request and the result."""


@dataclass
class Applier:
    """Applies a cycle's result to the cache, the queue and the API server."""

    state: ClusterState
    book: PolicyBook
    preemptions: Preemptions
    verdicts: Verdicts
    binder: Binder
    stats: LiveStats
    gangs: GangStatus = field(init=False)
    congestion: CongestionFeed = field(default_factory=CongestionFeed)
    after_cycle: CycleHook | None = None
    """Called once a cycle's decisions are taken in (admissions assumed, preemptions started),
    before its Bindings are sent: the governance controller's consolidation."""
    notes: dict[str, str] = field(default_factory=dict)
    """What the last consolidation pass said of each waiting pod, by uid (``explain`` shows it)."""

    def __post_init__(self) -> None:
        self.gangs = GangStatus(self.verdicts.reports)

    async def apply(
        self,
        snapshot: ClusterSnapshot,
        engine: PolicyEngine,
        request: CycleRequest,
        result: CycleResult,
    ) -> bool:
        """Carry out ``result``; returns whether pods were deferred (held only behind others)."""
        self.preemptions.carry(result.nominations, snapshot.node_names)
        layout, tables = engine.policy.layout, engine.policy.tables
        admitted: list[tuple[PodRecord, Bind, str, str]] = []
        deferred = False
        for decision in result.decisions:
            pod = self.state.pods.get(decision.workload.name)
            if pod is None:
                continue
            if isinstance(decision, Admit):
                if self._assume(pod, decision, request.now):
                    pool, queue = layout.pools[decision.pool], tables.queues[decision.queue]
                    admitted.append((pod, decision.bind, pool.name, queue.name))
            elif isinstance(decision, Preempt):
                self.stats.preemptions += 1
                victims = {v: r for v in decision.victims if (r := self.book.running.get(v))}
                self.congestion.evicted(engine.policy, request.now, decision, victims)
                reason = self.preemptions.start(pod, decision, self.state.pods)
                self.verdicts.unschedulable(pod, reason, WaitKind.PREEMPTING)
            elif decision.cause.kind is WaitKind.BEHIND:
                self.verdicts.deferred(pod, readable(decision.cause, self.state.pods))
                deferred = True
            else:
                cause = self.preemptions.waiting_cause(
                    pod.metadata.uid, decision.cause, self.state.pods
                )
                self.verdicts.unschedulable(pod, readable(cause, self.state.pods), cause.kind)
        self.gangs.after(result, self.state.pods)
        self.congestion.cycle(
            engine.policy, request.now, result, self.book.running, self.state.pending
        )
        if self.after_cycle is not None:
            self.after_cycle(engine, request, result)
        for pod, bind, pool_name, queue_name in admitted:
            self.verdicts.metrics.attempt("scheduled")
            self.verdicts.queue.in_flight(pod.metadata.uid)
            await self.binder.send(pod, bind, pool_name, queue_name)
        return deferred

    def _assume(self, pod: PodRecord, decision: Admit, now: float) -> bool:
        try:
            self.state.assume(decision.bind)
        except AllocationError as error:
            self.verdicts.failed(pod, f"scheduling error: {error}", "error", WaitKind.OTHER)
            return False
        self.book.admitted[pod.metadata.uid] = (now, decision.expected_end)
        return True
