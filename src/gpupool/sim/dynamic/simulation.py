"""The dynamic simulation: arrivals, completions, preemptions, under pools and queues.

A discrete-event loop over the :class:`~gpupool.sim.cluster.SimulatedCluster` (the one
``gpupool demo`` drives too): the next event is the next arrival of the workload process
(:mod:`gpupool.sim.dynamic.workload_process`), the next scheduled end of a running pod or the next
scheduling tick, whichever comes first. What is measured is :mod:`gpupool.sim.dynamic.metrics`.

* The scheduler runs a cycle every :data:`CYCLE_SECONDS` of simulated time when something
  changed (an arrival, an end, a governance eviction: as a live scheduler loops), over every
  pending pod; a cycle that preempted runs again at once, so the nominated pod starts when its
  victims are gone.
* A preempted pod goes back to pending with its original arrival time and its whole duration
  (its work is lost).
* With ``governance`` set, a stated share of pods lingers idle or overruns, and the governance
  rules act on them each sample period (:mod:`gpupool.sim.dynamic.governance_model`); it draws
  from a stream of its own, so the other draws are those of the same seed without it.
* The cluster is every ``1/scale``-th node of the openb list (name order). Each node is
  labelled with its GPU model (``gpupool.io/gpu-model``, as the node agent labels a real node,
  so a team's node selector can ask for a model) and ``sim.gpupool.io/group``: ``shared`` for
  nodes with fewer than 8 GPUs and every 8th node with 8 (by name), ``exclusive`` for the rest,
  which puts about 30% of the GPUs in the group the bundled Shared pool selects, close to the
  trace's share of GPU demand in fractions (28%). ``team_constraints`` give a team's pods a node
  selector, affinity or tolerations (``gpupool sim dynamic --team-node-selector``).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpupool.core.constraints import NodeConstraints
from gpupool.core.framework import Scheduler
from gpupool.core.model import NodeSpec, PodSpec, RequestKind
from gpupool.policy.membership import node_labels
from gpupool.policy.spec import ConsolidationSpec, PolicyConfig
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.workload import Running
from gpupool.scheduling.decisions import (
    Admit,
    CycleRequest,
    CycleResult,
    EngineOptions,
    GangSpec,
    Preempt,
)
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.sim.cluster import CLAIM_KINDS, SimulatedCluster
from gpupool.sim.consolidating import Consolidating
from gpupool.sim.dynamic.gang_arrivals import GangTally, as_gang
from gpupool.sim.dynamic.governance_model import GovernanceModel, GovernanceSim
from gpupool.sim.dynamic.metrics import DynamicMetrics
from gpupool.sim.dynamic.pod_rules import HOSTNAME, PodRuleShares, with_pod_rules
from gpupool.sim.dynamic.workload_process import Arrival, ArrivalProcess

CYCLE_SECONDS = 20.0
CLAIM_DRAW = 10_000
GROUP_LABEL = "sim.gpupool.io/group"
SHARED_EVERY = 8


@dataclass(frozen=True, slots=True)
class DynamicSettings:
    """One run's knobs.

    Attributes:
        rho: Offered load, fraction of GPU capacity.
        hours: Simulated hours.
        seed: Seed of every draw.
        engine: The policy engine's options (backfill, reservations, preemption), the live
            scheduler's defaults unless given.
        warmup_hours: Hours left out of the metrics.
        scale: Fraction of the node list simulated (every ``1/scale``-th node).
        policy: Placement policy name.
        governance: Pods that go idle or overrun, and the governance rules (None: neither).
        team_constraints: Per team (namespace), the node constraints its pods carry.
        claims: Fraction of the GPU and share pods that ask by a DRA claim instead of the
            extended resource (chosen by a hash of the pod's name, so the same pods in every
            run); the results must not move (:mod:`gpupool.sim.cluster`).
        pod_rules: Shares of the GPU pods that carry pod anti-affinity or topology spread
            (:mod:`gpupool.sim.dynamic.pod_rules`).
        gangs: Fraction of the multi-GPU pods that arrive as a gang of one-GPU pods
            (:mod:`gpupool.sim.dynamic.gang_arrivals`).
        consolidation: Every pool's consolidation settings (``None``: each pool's own;
            :mod:`gpupool.sim.consolidating`).
    """

    rho: float
    hours: float
    seed: int
    engine: EngineOptions = field(default_factory=EngineOptions)
    warmup_hours: float = 3.0
    scale: float = 0.25
    policy: str = "default"
    governance: GovernanceModel | None = None
    team_constraints: tuple[tuple[str, NodeConstraints], ...] = ()
    claims: float = 0.0
    pod_rules: PodRuleShares = field(default_factory=PodRuleShares)
    gangs: float = 0.0
    consolidation: ConsolidationSpec | None = None

    def __post_init__(self) -> None:
        checks = (
            ("rho", self.rho > 0),
            ("claims", 0 <= self.claims <= 1),
            ("gangs", 0 <= self.gangs <= 1),
            ("hours", self.hours > 0),
            ("warmup_hours", 0 <= self.warmup_hours < self.hours),
            ("scale", 0 < self.scale <= 1),
        )
        for name, ok in checks:
            if not ok:
                raise ValueError(f"{name}: out of range ({getattr(self, name)})")


def engine_report(options: EngineOptions) -> dict[str, Any]:
    """The engine options under the report keys the published JSONs use."""
    return {
        "backfill": options.backfill,
        "reservations": options.reservations_per_pool,
        "follow": options.reservations_follow_pods,
        "reserve_above_units": options.reserve_above_units,
        "remaining_by_age": options.remaining_by_age,
        "backfill_quantile": options.backfill_quantile,
        "preemption": options.preemption,
        "gang_reservations": options.gang_reservations,
    }


def scaled_nodes(nodes: Sequence[NodeSpec], scale: float) -> list[NodeSpec]:
    """Every ``1/scale``-th node by name, labelled with its group (module docstring)."""
    ordered = sorted(nodes, key=lambda node: node.name)
    step = max(1, round(1 / scale))
    labelled = []
    big = 0
    for node in ordered[::step]:
        group = "shared"
        if node.gpu_count >= 8:
            group = "shared" if big % SHARED_EVERY == SHARED_EVERY - 1 else "exclusive"
            big += 1
        # the model too, as the agent labels it, and the hostname, as the kubelet does
        labels = {**node_labels(node), GROUP_LABEL: group, HOSTNAME: node.name}
        labelled.append(replace(node, labels=tuple(sorted(labels.items()))))
    return labelled


class _DynamicRun(SimulatedCluster):
    """One run: the simulated cluster under the arrival process, ticking every CYCLE_SECONDS."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        shapes: Sequence[PodSpec],
        config: PolicyConfig,
        settings: DynamicSettings,
    ) -> None:
        cluster = scaled_nodes(nodes, settings.scale)
        streams = np.random.SeedSequence(settings.seed).spawn(3)
        arrivals_rng, ranks_rng, policy_rng = (np.random.default_rng(s) for s in streams)
        placement = build_policy(settings.policy, PolicyContext(policy_rng, shapes))
        scheduler = Scheduler(placement, ranks_rng.permutation(len(cluster)).astype(np.int64))
        super().__init__(cluster, config, scheduler, settings.engine)
        self.settings = settings
        gpus = self.snapshot.total_gpus
        self.process = ArrivalProcess(
            shapes, gpus, settings.rho, arrivals_rng, dict(settings.team_constraints)
        )
        self.end = settings.hours * 3600.0
        start = settings.warmup_hours * 3600.0
        self.metrics = DynamicMetrics(self.policy, gpus * MILLI_UNITS, start, self.end)
        self.claims_asked = 0
        self.ruled = {"anti_affinity": 0, "spread": 0}
        self.gang_tally = GangTally((start, self.end))
        self.consolidating = Consolidating(self, (start, self.end), settings.consolidation)
        self.governance = None
        if settings.governance is not None:  # its own stream: the other draws stay as they were
            own_stream = np.random.SeedSequence(settings.seed).spawn(4)[3]
            governance_rng = np.random.default_rng(own_stream)
            self.governance = GovernanceSim(settings.governance, governance_rng, (start, self.end))

    def simulate(self) -> None:
        """Take events in time order until the end: ends first, then arrivals, then ticks."""
        upcoming = self.process.next()
        tick = CYCLE_SECONDS
        while True:
            due = self.next_end()
            at = min(upcoming.at, tick) if due is None else min(due, upcoming.at, tick)
            if at > self.end:
                break
            self.now = at
            self.metrics.advance(at, self.ledger)
            if at == due:
                self.end_next()
            elif at == upcoming.at:
                self._arrival(upcoming)
                upcoming = self.process.next()
            else:
                self._tick()
                tick += CYCLE_SECONDS
        self.now = self.end
        self.metrics.advance(self.end, self.ledger)
        self.metrics.still_waiting(self.pending.values())

    def _arrival(self, arrival: Arrival) -> None:
        workload, hold = arrival.workload, arrival.duration
        if self.governance is not None:
            hold = self.governance.hold_time(workload.name, hold)
        pod, rule = with_pod_rules(workload.pod, self.settings.pod_rules)
        if rule:
            workload = replace(workload, pod=pod)
            self.ruled[rule] += 1
        members = as_gang(workload, self.settings.gangs)
        if members is not None:
            self.gangs[workload.name] = GangSpec(len(members))
            self.gang_tally.arrive(workload.name, len(members), self.now)
        for member in members or [workload]:
            self.metrics.pod_arrived(member)
            self.arrive(member, hold, self._asks_by_claim(member.name, member.pod.kind))

    def _asks_by_claim(self, name: str, kind: RequestKind) -> bool:
        share = self.settings.claims
        if share <= 0 or kind not in CLAIM_KINDS:
            return False
        chosen = zlib.crc32(name.encode()) % CLAIM_DRAW < share * CLAIM_DRAW
        self.claims_asked += chosen
        return chosen

    def _tick(self) -> None:
        """Governance evicts (once per sample period), then the scheduler runs if it has to."""
        if self.governance is not None:
            for victim in self.governance.tick(self.now, len(self.pending)):
                self.withdraw(victim)
        if self.run_cycles():
            self.metrics.cycles_done(self.ledger)

    def on_start(self, decision: Admit, record: Running) -> None:
        """Count the start and its delay; the governance model watches it from now."""
        self.metrics.pod_started(decision, self.now)
        if record.workload.gang:
            self.gang_tally.started(record.workload.gang, self.now)
        if self.governance is not None:
            self.governance.started(record.workload.name, self.now, decision.units)

    def on_release(self, record: Running) -> None:
        """The governance model and the gang tally see every release."""
        if record.workload.gang:
            self.gang_tally.ended(record.workload.gang, self.now)
        if self.governance is not None:
            self.governance.ended(record.workload.name, self.now)

    def on_evict(self, record: Running, decision: Preempt) -> None:
        """Count the preemption and the work it lost."""
        self.metrics.pod_evicted(record, decision, self.now)

    def on_cycle(self, result: CycleResult) -> None:
        """Track the largest quota overrun."""
        self.metrics.cycle_done(self.ledger)

    def consolidated(self, request: CycleRequest, result: CycleResult) -> bool:
        """Consolidation after the cycle (:mod:`~gpupool.sim.consolidating`)."""
        return self.consolidating.after(request, result)

    def on_move(self, record: Running, to_fit: str) -> None:
        """A moved pod is pending again."""
        self.metrics.pod_moved(record)

    def report(self, wall_seconds: float) -> dict[str, Any]:
        """The run's settings, cluster and metrics (see docs/benchmarks.md)."""
        settings = self.settings
        report: dict[str, Any] = {
            "rho": settings.rho,
            "hours": settings.hours,
            "warmup_hours": settings.warmup_hours,
            "seed": settings.seed,
            **engine_report(settings.engine),
            "policy": settings.policy,
            "nodes": self.snapshot.size,
            "gpus": self.snapshot.total_gpus,
            "arrivals": self.process.count,
            "arrival_rate_per_hour": self.process.rate * 3600,
            **self.metrics.report(),
            "pending_at_end": len(self.pending),
            "pool_conflicts": [list(conflict) for conflict in self.policy.layout.conflicts],
            "team_node_selectors": {
                team: dict(constraints.node_selector)
                for team, constraints in settings.team_constraints
            },
            "wall_seconds": wall_seconds,
            "seeds": [settings.seed],
            "claims": settings.claims,
            "claim_pods": self.claims_asked,
            "anti_affinity": settings.pod_rules.anti_affinity,
            "spread": settings.pod_rules.spread,
            "anti_affinity_pods": self.ruled["anti_affinity"],
            "spread_pods": self.ruled["spread"],
            "gang_share": settings.gangs,
            **self.gang_tally.report(),
            "consolidation": self.consolidating.report(),
            "congestion_by_class": self.congestion.ledger.summary(),
        }
        if self.governance is not None:
            allocated = self.metrics.allocated_gpu_hours()
            report.update(self.governance.report(self.end, allocated))
        return report


def run_dynamic(
    nodes: Sequence[NodeSpec],
    shapes: Sequence[PodSpec],
    config: PolicyConfig,
    settings: DynamicSettings,
) -> dict[str, Any]:
    """Simulate ``settings.hours`` and return the metrics (see docs/benchmarks.md)."""
    started_wall = time.perf_counter()
    run = _DynamicRun(nodes, shapes, config, settings)
    run.simulate()
    return run.report(time.perf_counter() - started_wall)
