"""The embedded simulated cluster: the policy engine live, on simulated nodes, step by step.

``gpupool demo`` runs the control plane without Kubernetes: this cluster holds the snapshot,
the running pods and what each was charged, the pending pods with the reason the engine gave,
and simulated GPU usage, and advances in steps of simulated time. Every step runs the same pure
:class:`~gpupool.scheduling.engine.PolicyEngine` cycle the live scheduler and the dynamic
simulation run, and applies its decisions: admissions bind, preemptions evict their victims
(back to pending, their work lost), waits record their reason. Nothing here reads the wall
clock; the caller says how far to advance, so the demo can run at any speed and tests exactly.

Usage is simulated per pod from a stated rule (an *idle* pod uses 0 % of its GPUs; any other
uses a steady share drawn when it starts), the signal a node agent would publish, sampled every
step. Pools given governance :class:`~gpupool.governance.rules.Limits` are governed by the same
pure rules the live controller runs (:func:`~gpupool.governance.rules.decide`): an idle pod is
warned, and reclaimed after the grace period if still idle. GPU-hours per queue are counted as
pods release their shares.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpupool.core.framework import Scheduler
from gpupool.core.model import NodeSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.governance.decisions import ClearWarning, Reclaim, Warn
from gpupool.governance.rules import CleanupLimits, Limits, PodFacts, PodWarning, UsagePoint, decide
from gpupool.policy.backfill import Reservation
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.runtime import RuntimeEstimator
from gpupool.policy.spec import PolicyConfig
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.engine import (
    Admit,
    CycleRequest,
    CycleResult,
    EngineOptions,
    PolicyEngine,
    Preempt,
    Wait,
)
from gpupool.scheduling.registry import PolicyContext, build_policy

RECENT_EVENTS = 200
"""Decisions kept for the dashboard's ticker."""
USAGE_SAMPLES = 256
"""Usage samples kept per pod (the live controller keeps as many)."""


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


@dataclass
class EmbeddedCluster:
    """Simulated nodes under one compiled policy, advanced by :meth:`advance`.

    Args:
        nodes: The node inventory.
        config: Pools and queues (as in the CRDs).
        placement: Placement policy name.
        seed: Seed for the placement policy's tie ranks and the simulated usage.
    """

    nodes: Sequence[NodeSpec]
    config: PolicyConfig
    placement: str = "default"
    seed: int = 0
    now: float = 0.0
    running: dict[str, Running] = field(default_factory=dict)
    pending: dict[str, Workload] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)
    events: deque[ClusterEvent] = field(default_factory=lambda: deque(maxlen=RECENT_EVENTS))
    preemptions: int = 0
    completed: int = 0
    reclaims: int = 0
    limits: dict[str, Limits] = field(default_factory=dict)
    gpu_hours: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.snapshot = ClusterSnapshot(list(self.nodes))
        self.policy = ClusterPolicy.build(self.config, self.snapshot.nodes)
        self.policy.prepare(self.snapshot)
        placement = build_policy(self.placement, PolicyContext(rng, ()))
        ranks = np.arange(self.snapshot.size, dtype=np.int64)
        self.engine = PolicyEngine(Scheduler(placement, ranks), self.policy, EngineOptions())
        self.ledger = self.policy.new_ledger()
        self.runtimes = RuntimeEstimator()
        self._usage_rng = rng
        self._submissions: dict[str, Submission] = {}
        self._ends: list[tuple[float, str, int]] = []
        self._tokens: dict[str, int] = {}
        self._nominations: dict[str, int] = {}
        self._reservations: dict[int, Reservation] = {}
        self._samples: dict[str, deque[UsagePoint]] = {}
        self._warnings: dict[str, PodWarning] = {}
        self._cleanup = CleanupLimits()
        self._dirty = False

    def submit(self, submission: Submission) -> None:
        """A pod arrives now."""
        workload = submission.workload
        self._submissions[workload.name] = submission
        self.pending[workload.name] = workload
        self.reasons[workload.name] = ""
        self.engine.observe(workload)
        self._dirty = True

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of simulated time pass: pods finish, the scheduler decides."""
        end = self.now + seconds
        while self._ends and self._ends[0][0] <= end:
            at, name, token = heapq.heappop(self._ends)
            if self._tokens.get(name) == token and name in self.running:
                self.now = at
                self._finish(name)
        self.now = end
        self._govern()
        if self._dirty and self.pending:
            self._dirty = False
            for _ in range(4):  # a cycle that preempted runs again for the nominated pods
                if not self._apply(self.engine.cycle(self._request())):
                    break

    def remove(self, name: str, action: str, detail: str) -> None:
        """Take a running or pending pod away (a reclaim, a cleanup, a user's delete)."""
        if name in self.running:
            self._release(name)
        self.pending.pop(name, None)
        self.reasons.pop(name, None)
        self._submissions.pop(name, None)
        self.events.append(ClusterEvent(self.now, action, name, detail))
        self._dirty = True

    def _govern(self) -> None:
        """Sample usage, then apply the governance rules of each governed pool."""
        pools = self.policy.layout.pools
        for name, record in list(self.running.items()):
            samples = self._samples.setdefault(name, deque(maxlen=USAGE_SAMPLES))
            samples.append(UsagePoint(self.now, self.usage.get(name, 0.0)))
            limits = self.limits.get(pools[record.pool].name)
            if limits is None:
                continue
            facts = PodFacts(
                uid=name,
                pod_class=record.workload.workload_class,
                allocated_at=record.started_at,
                usage=tuple(samples),
                warning=self._warnings.get(name),
            )
            decision = decide(facts, limits, self._cleanup, self.now)
            if isinstance(decision, Warn):
                self._warnings[name] = PodWarning(decision.rule, self.now)
                self.events.append(ClusterEvent(self.now, "warn", name, decision.rule.value))
            elif isinstance(decision, Reclaim):
                self.reclaims += 1
                self.remove(name, "reclaim", f"{decision.rule.value} after its grace")
            elif isinstance(decision, ClearWarning):
                self._warnings.pop(name, None)

    def submission(self, name: str) -> Submission | None:
        """What was submitted under ``name``."""
        return self._submissions.get(name)

    def _request(self) -> CycleRequest:
        return CycleRequest(
            snapshot=self.snapshot,
            pending=list(self.pending.values()),
            running=self.running,
            ledger=self.ledger,
            now=self.now,
            nominations=self._nominations,
            runtimes=self.runtimes,
            reservations=self._reservations,
        )

    def _apply(self, result: CycleResult) -> bool:
        """Carry out a cycle's decisions; True if it preempted."""
        self._nominations = result.nominations
        self._reservations = result.reservations
        preempted = False
        for decision in result.decisions:
            if isinstance(decision, Admit):
                self._start(decision)
            elif isinstance(decision, Preempt):
                preempted = True
                self._preempt(decision)
            elif isinstance(decision, Wait):
                self.reasons[decision.workload.name] = decision.reason
        return preempted

    def _start(self, decision: Admit) -> None:
        workload, bind = decision.workload, decision.bind
        name = workload.name
        self.snapshot.bind(workload.pod, bind.node, bind.gpus)
        record = decision.running(self.now)
        self.running[name] = record
        self.ledger.add(record)
        del self.pending[name]
        self.reasons.pop(name, None)
        submission = self._submissions[name]
        self.usage[name] = 0.0 if submission.idle else float(self._usage_rng.uniform(35, 95))
        token = self._tokens.get(name, 0) + 1
        self._tokens[name] = token
        heapq.heappush(self._ends, (self.now + submission.duration, name, token))
        gpus = ",".join(str(g) for g in bind.gpus) or "-"
        detail = f"{bind.node_name} GPUs {gpus}" + (" (backfilled)" if decision.backfilled else "")
        self.events.append(ClusterEvent(self.now, "bind", name, detail))

    def _preempt(self, decision: Preempt) -> None:
        self.preemptions += len(decision.victims)
        for victim in decision.victims:
            evicted = self._release(victim)
            self.pending[victim] = evicted.workload
            self.reasons[victim] = f"preempted for {decision.workload.name}"
            self.events.append(
                ClusterEvent(
                    self.now,
                    "preempt",
                    victim,
                    f"{decision.rule.value} for {decision.workload.name} on {decision.node_name}",
                )
            )

    def _finish(self, name: str) -> None:
        finished = self._release(name)
        self.completed += 1
        queue = self.policy.tables.queues[finished.queue].name
        self.runtimes.observe_completion(finished.workload, queue, self.now - finished.started_at)
        self._submissions.pop(name, None)
        self.events.append(ClusterEvent(self.now, "finish", name, ""))

    def _release(self, name: str) -> Running:
        record = self.running.pop(name)
        self.snapshot.release(name)
        self.ledger.remove(record)
        self.usage.pop(name, None)
        self._samples.pop(name, None)
        self._warnings.pop(name, None)
        queue = self.policy.tables.queues[record.queue].name
        held = record.units / MILLI_UNITS * (self.now - record.started_at) / 3600
        self.gpu_hours[queue] = self.gpu_hours.get(queue, 0.0) + held
        self._tokens[name] = self._tokens.get(name, 0) + 1  # its pending end is stale now
        self._dirty = True
        return record
