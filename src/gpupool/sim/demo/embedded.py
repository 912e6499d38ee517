"""The embedded simulated cluster: the policy engine live, on simulated nodes, step by step.

``gpupool demo`` runs the control plane without Kubernetes: this is the simulated cluster
(:class:`~gpupool.sim.cluster.SimulatedCluster`, which ``gpupool sim dynamic`` drives too)
advanced in steps of simulated time, with what the dashboard shows besides: the reason the
engine gave each pending pod, the recent decisions, simulated GPU usage and GPU-hours per
queue. Nothing here reads the wall clock; the caller says how far to advance, so the demo can
run at any speed and tests exactly.

Usage is simulated per pod from a stated rule (an *idle* pod uses 0 % of its GPUs; any other
uses a steady share drawn when it starts), the signal a node agent would publish, sampled every
step. Pools given governance :class:`~gpupool.governance.rules.Limits` are governed by the same
pure rules the live controller runs (:func:`~gpupool.governance.rules.decide`): an idle pod is
warned, and reclaimed after the grace period if still idle. GPU-hours per queue are counted as
pods release their shares; the GPU-hours idle pods hold, and the pending time each class imposes
on the others, go to the congestion ledger (:mod:`gpupool.governance.congestion_ledger`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpupool.core.framework import Scheduler
from gpupool.core.model import NodeSpec
from gpupool.governance.congestion_feed import party
from gpupool.governance.decisions import Reclaim, Warn
from gpupool.governance.rules import Limits, PodFacts
from gpupool.governance.usage import UsageHistory, UsagePoint
from gpupool.policy.spec import PolicyConfig
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.decisions import Admit, CycleRequest, CycleResult, Preempt, Wait
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.scheduling.wait_cause import WaitCause, WaitKind
from gpupool.sim.cluster import SimulatedCluster
from gpupool.sim.consolidating import Consolidating
from gpupool.sim.demo.hourly import HourlyGpuHours
from gpupool.sim.governing import WarnedPods

RECENT_EVENTS = 200
"""Decisions kept for the dashboard's ticker."""


@dataclass(frozen=True, slots=True)
class Submission:
    """A pod handed to the cluster.

    Attributes:
        workload: The pod and its tenant, class and priority.
        duration: Seconds it runs once started.
        idle: Whether it holds its GPUs without using them (a forgotten notebook).
    """

    workload: Workload
    duration: float
    idle: bool = False


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """One decision, for people: when, what, which pod, why."""

    at: float
    action: str
    pod: str
    detail: str


class EmbeddedCluster(SimulatedCluster):
    """Simulated nodes under one compiled policy, advanced by :meth:`advance`.

    Args:
        nodes: The node inventory.
        config: Pools and queues (as in the CRDs).
        placement: Placement policy name.
        seed: Seed for the placement policy's tie ranks and the simulated usage.
        limits: Governance settings by pool name (pools not named are not governed).
    """

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        config: PolicyConfig,
        placement: str = "default",
        seed: int = 0,
        limits: Mapping[str, Limits] | None = None,
    ) -> None:
        rng = np.random.default_rng(seed)
        policy = build_policy(placement, PolicyContext(rng, ()))
        ranks = np.arange(len(nodes), dtype=np.int64)
        super().__init__(nodes, config, Scheduler(policy, ranks))
        self.limits = dict(limits or {})
        self.causes: dict[str, WaitCause | None] = {}
        """Why each pending pod waits (``None``: not decided yet)."""
        self.usage: dict[str, float] = {}
        self.events: deque[ClusterEvent] = deque(maxlen=RECENT_EVENTS)
        self.preemptions = 0
        self.completed = 0
        self.reclaims = 0
        self.hourly = HourlyGpuHours()
        """GPU-hours per team and simulated hour of the pods that let go of their GPUs."""
        self._usage_rng = rng
        self._submissions: dict[str, Submission] = {}
        self._usage_seen: dict[str, UsageHistory] = {}
        self._warned = WarnedPods()
        self.consolidating = Consolidating(self, (0.0, math.inf))
        """Each pool's ``spec.consolidation``, after every cycle (:mod:`.consolidating`)."""

    def submit(self, submission: Submission) -> None:
        """A pod arrives now."""
        workload = submission.workload
        self._submissions[workload.name] = submission
        self.causes[workload.name] = None
        self.arrive(workload, submission.duration)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of simulated time pass: pods finish, the scheduler decides."""
        start, end = self.now, self.now + seconds
        while (due := self.next_end()) is not None and due <= end:
            self.end_next()
        self.now = end
        self._count_idle(start)
        self._govern()
        self.run_cycles()
        self.congestion.ledger.settle(self.now)

    def _count_idle(self, since: float) -> None:
        """Charge the GPUs of the pods using none (the simulated usage signal) since ``since``.

        A pod that ended during the step is not charged for that step: the error is at most one
        step of one pod, and it keeps this a sweep of the running pods only.
        """
        for name, record in self.running.items():
            if self.usage.get(name) == 0.0:
                who = party(self.policy, record.workload, record.queue)
                start = max(since, record.started_at)
                self.congestion.ledger.idle(who, record.units / MILLI_UNITS, start, self.now)

    def _govern(self) -> None:
        """Sample usage, then apply the governance rules of each governed pool."""
        pools = self.policy.layout.pools
        for name, record in list(self.running.items()):
            limits = self.limits.get(pools[record.pool].name)
            if limits is None:
                continue
            limits = limits.with_queue_classes(
                self.policy.tables.queues[record.queue].allowed_classes
            )
            sample = UsagePoint(self.now, self.usage.get(name, 0.0))
            history = self._usage_seen.get(name, UsageHistory()).observe(sample, limits.activity)
            self._usage_seen[name] = history
            facts = PodFacts(
                uid=name,
                pod_class=record.workload.workload_class,
                allocated_at=record.started_at,
                usage=history,
            )
            decision = self._warned.review(facts, limits, self.now)
            if isinstance(decision, Warn):
                self.events.append(ClusterEvent(self.now, "warn", name, decision.rule.value))
            elif isinstance(decision, Reclaim):
                self._reclaim(name, f"{decision.rule.value} after its grace")

    def _reclaim(self, name: str, detail: str) -> None:
        self.reclaims += 1
        self.withdraw(name)
        self.causes.pop(name, None)
        self._submissions.pop(name, None)
        self.events.append(ClusterEvent(self.now, "reclaim", name, detail))

    def on_start(self, decision: Admit, record: Running) -> None:
        """Draw the pod's usage; tell the ticker."""
        name, bind = record.workload.name, decision.bind
        self.causes.pop(name, None)
        idle = self._submissions[name].idle
        self.usage[name] = 0.0 if idle else float(self._usage_rng.uniform(35, 95))
        gpus = ",".join(str(g) for g in bind.gpus) or "-"
        detail = f"{bind.node_name} GPUs {gpus}" + (" (backfilled)" if decision.backfilled else "")
        self.events.append(ClusterEvent(self.now, "bind", name, detail))

    def on_release(self, record: Running) -> None:
        """Count the GPU-hours it held; any release is worth another cycle here."""
        name = record.workload.name
        self.usage.pop(name, None)
        self._usage_seen.pop(name, None)
        self._warned.forget(name)
        queue = self.policy.tables.queues[record.queue].name
        self.hourly.add(queue, record.units / MILLI_UNITS, record.started_at, self.now)
        self.changed = True

    def on_evict(self, record: Running, decision: Preempt) -> None:
        """The victim waits again, and says for whom."""
        victim, preemptor = record.workload.name, decision.workload.name
        self.preemptions += 1
        self.causes[victim] = WaitCause(WaitKind.OTHER, f"preempted for {preemptor}")
        detail = f"{decision.rule.value} for {preemptor} on {decision.node_name}"
        self.events.append(ClusterEvent(self.now, "preempt", victim, detail))

    def consolidated(self, request: CycleRequest, result: CycleResult) -> bool:
        """Consolidation's plans after the cycle, carried out."""
        return self.consolidating.after(request, result)

    def on_move(self, record: Running, to_fit: str) -> None:
        """The moved pod waits again, and says for whom."""
        name = record.workload.name
        self.causes[name] = WaitCause(WaitKind.OTHER, f"moved by consolidation for {to_fit}")
        self.events.append(ClusterEvent(self.now, "move", name, f"consolidation, for {to_fit}"))

    def on_finish(self, record: Running) -> None:
        """Count it and tell the ticker."""
        name = record.workload.name
        self.completed += 1
        self._submissions.pop(name, None)
        self.events.append(ClusterEvent(self.now, "finish", name, ""))

    def on_wait(self, decision: Wait) -> None:
        """Keep the engine's cause for the dashboard."""
        self.causes[decision.workload.name] = decision.cause
