"""The simulated cluster: simulated nodes under the policy engine, as both simulations run it.

``gpupool sim dynamic`` (:mod:`gpupool.sim.dynamic.simulation`) and ``gpupool demo``
(:mod:`gpupool.sim.demo.embedded`) drive this one class. It holds the snapshot, the compiled policy,
the pending pods, the running pods with what their queues were charged (the ledger), the
learned runtimes and what one engine cycle hands the next; it runs
:meth:`~gpupool.scheduling.engine.PolicyEngine.cycle`, the same pure call the live scheduler
makes, and carries out its decisions: an admission binds and schedules the pod's end, a
preemption evicts its victims back to pending (their work is lost, their scheduled ends go
stale), a wait leaves the pod pending, an end frees the pod's GPUs and teaches the runtime
estimator. The drivers own the clock (:attr:`SimulatedCluster.now`) and what they measure or
show, through the ``on_*`` hooks, so that a rule of the simulated cluster is written once.

A pod may ask for its GPUs by a DRA claim (:meth:`SimulatedCluster.arrive` with ``claim``): a
claim of gpupool's class with no selectors, so the engine gets it with every GPU eligible
(:class:`~gpupool.scheduling.claim_placement.GpuEligibility`), as the live scheduler hands it a
claim pod. Such a run must match the same pods by extended resource decision for decision,
which is what says the claim path adds no second policy (tests/sim/test_dynamic.py).

Eviction is immediate here, so a cycle that preempted runs again at once
(:data:`CYCLE_ROUNDS` in all) and the nominated pod starts without waiting for the next change; a
live cluster waits for graceful termination, which is what nomination covers.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from gpupool.core.framework import Scheduler
from gpupool.core.model import NodeSpec, RequestKind
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.governance.congestion_feed import CongestionFeed
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.spec import PolicyConfig
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.claim_placement import GpuEligibility
from gpupool.scheduling.cycle_request import Carried, cycle_request
from gpupool.scheduling.decisions import (
    Admit,
    CycleRequest,
    CycleResult,
    EngineOptions,
    GangSpec,
    Preempt,
    Wait,
)
from gpupool.scheduling.engine import PolicyEngine
from gpupool.scheduling.runtime import RuntimeEstimator

CLAIM_KINDS = (RequestKind.WHOLE, RequestKind.SHARE)
"""What may ask by claim in the simulation (a MIG claim names instances; CPU pods ask for no
device)."""
CYCLE_ROUNDS = 4
"""Cycles run back to back while they preempt (bounded, so a chain of preemptions cannot
spin)."""


class SimulatedCluster:
    """Simulated nodes, pods and queues under one compiled policy.

    Args:
        nodes: The node inventory.
        config: Pools and queues (as in the CRDs).
        scheduler: The placement policy and its tie ranks.
        options: The engine's mechanisms and bounds.
    """

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        config: PolicyConfig,
        scheduler: Scheduler,
        options: EngineOptions | None = None,
    ) -> None:
        self.snapshot = ClusterSnapshot(list(nodes))
        self.policy = ClusterPolicy.build(config, self.snapshot.nodes)
        self.policy.prepare(self.snapshot)
        self.engine = PolicyEngine(scheduler, self.policy, options or EngineOptions())
        self.ledger = self.policy.new_ledger()
        self.runtimes = RuntimeEstimator()
        self.now = 0.0
        """Simulated seconds; the driver moves it (and :meth:`end_next` to each end)."""
        self.running: dict[str, Running] = {}
        self.pending: dict[str, Workload] = {}
        self.changed = False
        """Something a cycle could use happened since the last one ran."""
        self.carried = Carried()
        self._durations: dict[str, float] = {}
        self._ends: list[tuple[float, int, str, int]] = []
        self._ends_pushed = 0
        self._runs: dict[str, int] = {}
        self._end_at: dict[str, float] = {}
        self.claim_pods: set[str] = set()
        """The pods that ask by a claim, until they are gone for good."""
        self.gangs: dict[str, GangSpec] = {}
        """What each gang asks (its pods name it in ``Workload.gang``)."""
        self.congestion = CongestionFeed()
        """Pending time charged to the classes that cause it (the congestion-by-class view)."""
        self._any_gpu = GpuEligibility.over(
            self.snapshot,
            {row: frozenset(range(node.gpu_count)) for row, node in enumerate(self.snapshot.nodes)},
        )

    def arrive(self, workload: Workload, duration: float, claim: bool = False) -> None:
        """A pod arrives now; once started it holds its GPUs for ``duration`` seconds.

        ``claim``: it asks by a selector-less claim (whole GPUs or a share; not a MIG slice,
        whose claim names instances the simulated nodes do not have).
        """
        if claim:
            if workload.pod.kind not in CLAIM_KINDS:
                raise ValueError(f"{workload.name}: only GPU and share pods ask by claim here")
            self.claim_pods.add(workload.name)
        self.pending[workload.name] = workload
        self._durations[workload.name] = duration
        self.engine.observe(workload)
        self.changed = True

    def next_end(self) -> float | None:
        """When the next scheduled end falls (that pod may have been evicted since)."""
        return self._ends[0][0] if self._ends else None

    def end_next(self) -> Running | None:
        """Move the clock to the next scheduled end and finish that pod.

        Returns:
            The finished pod; ``None`` when the end was stale (the pod was evicted or taken
            away after it was scheduled), which changes nothing but the clock.
        """
        at, _, name, run = heapq.heappop(self._ends)
        self.now = at
        if self._runs.get(name) != run:
            return None
        record = self._release(name)
        self.claim_pods.discard(name)
        queue = self.policy.tables.queues[record.queue].name
        self.runtimes.observe_completion(record.workload, queue, at - record.started_at)
        del self._durations[name]
        self.changed = True
        self.on_finish(record)
        return record

    def withdraw(self, name: str) -> None:
        """Take a pod away for good, running or pending (a reclaim, a user's delete)."""
        if name in self.running:
            self._release(name)
        self.pending.pop(name, None)
        self._durations.pop(name, None)
        self.claim_pods.discard(name)
        self.changed = True

    def move(self, name: str, restart: float, to_fit: str) -> Running:
        """Evict a running pod to be placed again: it runs what it had left plus ``restart``.

        ``to_fit``: the waiting pod the move makes room for.

        Unlike a preempted pod, whose work is lost, a moved pod resumes from its last
        checkpoint: the restart cost its pool sets is the work and start-up it loses.
        """
        left = self._end_at[name] - self.now
        record = self._release(name)
        self.pending[name] = record.workload
        self._durations[name] = left + restart
        self.changed = True
        self.on_move(record, to_fit)
        return record

    def nominate(self, name: str, node: int) -> None:
        """Keep ``node`` for the pending pod ``name`` (as a preemption's nomination does)."""
        nominations = {**self.carried.nominations, name: node}
        self.carried = Carried(nominations, self.carried.reservations)
        self.changed = True

    def run_cycles(self) -> bool:
        """If something changed and pods wait, run cycles and carry out their decisions.

        Returns:
            Whether a cycle ran.
        """
        if not (self.changed and self.pending):
            return False
        self.changed = False
        for _ in range(CYCLE_ROUNDS):
            request = cycle_request(
                self.snapshot,
                list(self.pending.values()),
                self.running,
                self.ledger,
                self.now,
                self.runtimes,
                self.carried,
                eligibility={name: self._any_gpu for name in self.claim_pods & self.pending.keys()},
                gangs=self.gangs,
            )
            result = self.engine.cycle(request)
            self.carried = Carried.after(result)
            preempted = self._apply(result)
            self.congestion.cycle(self.policy, self.now, result, self.running)
            self.on_cycle(result)
            if not (preempted or self.consolidated(request, result)):
                break
        return True

    def _apply(self, result: CycleResult) -> bool:
        """Carry out a cycle's decisions; True if it preempted."""
        preempted = False
        for decision in result.decisions:
            if isinstance(decision, Admit):
                self._start(decision)
            elif isinstance(decision, Preempt):
                preempted = True
                self._evict(decision)
            else:
                self.on_wait(decision)
        return preempted

    def _start(self, decision: Admit) -> None:
        workload, bind = decision.workload, decision.bind
        name = workload.name
        self.snapshot.bind(workload.pod, bind.node, bind.gpus)
        record = decision.running(self.now)
        self.running[name] = record
        self.ledger.add(record)
        del self.pending[name]
        run = self._runs.get(name, 0) + 1
        self._runs[name] = run
        end = (self.now + self._durations[name], self._ends_pushed, name, run)
        self._end_at[name] = end[0]
        heapq.heappush(self._ends, end)
        self._ends_pushed += 1
        self.on_start(decision, record)

    def _evict(self, decision: Preempt) -> None:
        for victim in decision.victims:
            record = self._release(victim)
            self.pending[victim] = record.workload
            self.congestion.evicted(self.policy, self.now, decision, {victim: record})
            self.on_evict(record, decision)

    def _release(self, name: str) -> Running:
        """Free what a running pod holds and uncharge its queue; its scheduled end goes stale."""
        record = self.running.pop(name)
        self._end_at.pop(name, None)
        self.snapshot.release(name)
        self.ledger.remove(record)
        self._runs[name] += 1
        self.on_release(record)
        return record

    # What the drivers hear; each does nothing here.

    def on_start(self, decision: Admit, record: Running) -> None:
        """A pending pod started (bound, charged, its end scheduled)."""

    def on_release(self, record: Running) -> None:
        """A running pod let go of its GPUs (it ended, was evicted or was taken away)."""

    def on_evict(self, record: Running, decision: Preempt) -> None:
        """A running pod was preempted for ``decision.workload`` and is pending again."""

    def on_move(self, record: Running, to_fit: str) -> None:
        """A running pod was moved by consolidation, to make room for ``to_fit``; it is pending."""

    def on_finish(self, record: Running) -> None:
        """A running pod reached its end."""

    def on_wait(self, decision: Wait) -> None:
        """A cycle kept a pending pod waiting."""

    def on_cycle(self, result: CycleResult) -> None:
        """A cycle's decisions were carried out."""

    def consolidated(self, request: CycleRequest, result: CycleResult) -> bool:
        """After a cycle that preempted nothing: whether pods were moved (then it runs again)."""
        return False
