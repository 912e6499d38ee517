"""Consolidation: the fewest moves after which a pod waiting on fragments fits, made when they pay.

Arrivals and departures leave a shared pool's free room scattered: half a GPU here, a quarter
there, while a pod asking for a whole GPU waits although the pool has several GPUs free in
fragments. Placement at arrival cannot undo that; moving a few running pods can. A move evicts a
running pod, which its controller creates again and the scheduler places elsewhere, so a move
costs the moved pod its restart (a pool setting per class); the rule moves only when the waiting
pod gains more GPU time than the moved pods lose. Pure like the other governance rules: the
simulator (:mod:`gpupool.sim.consolidating`) and the live controller
(:mod:`gpupool.kube.governance.consolidation`) call :func:`consolidate` with their own state and
carry out the plans their own way (the waiting pod is nominated to the node, as a preemptor is,
so the freed room is not taken by others; the moved pods leave by the one eviction door).

For each pod the last cycle left waiting for resources, oldest first:

* it must have waited at least its pool's ``minWait``, ask for whole GPUs or a share, and its
  pool's nodes must have, free in all, at least what it asks: the room exists, in fragments;
* the node needing the fewest moves wins (:func:`~.consolidation_search.fewest_moves`), then the
  least restart loss, among the nodes that could hold it once their movable pods left;
* every moved pod must fit again on another node of its pool, not one nominated or reserved for
  others (:func:`~.consolidation_search.landings`);
* it **pays** when the waiting pod's GPUs times how much sooner it starts (its expected start
  without moves is when it would first fit as running pods end at their expected ends: the model
  the backfill reservations use, :func:`~gpupool.scheduling.backfill.reserve`) exceeds the moved
  pods' GPUs times their class's restart cost;
* the pool moves at most ``maxMovesPerHour`` pods in any hour, and a workload (the controller
  owning the pods) is moved at most ``maxMovesPerWorkloadPerHour`` times.

Moves are searched for at most once a minute (:data:`SEARCH_INTERVAL`), a few waiting pods per
pool and a few nodes per pod each time (:data:`MAX_TRIED_PER_POOL`, :data:`MAX_NODES_TRIED`); a
pod no moves could help rests ten minutes
(:data:`~gpupool.governance.consolidation_plan.RETRY_AFTER`) so that the next ones get a turn.

Only pods a controller creates again are movable (the drivers say which and under what workload
key), never a pod of a gang (a gang is moved whole or not at all, and a gang member's eviction
would stop the gang), a pod holding a DRA claim (its devices are the claim's), a MIG slice, a pod
younger than its queue's ``minRuntimeBeforePreemption``, or one a PodDisruptionBudget protects
(consolidation is an optimisation: it breaks no budget). Plans of one pass are applied on a
working copy as they are made, so two never count on the same room or move the same pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpupool.core.filtering import admissible
from gpupool.core.model import RequestKind
from gpupool.core.snapshot import BoolArray, ClusterSnapshot
from gpupool.governance.consolidation_plan import HOUR, Declined, Move, MoveHistory, Outcome, Plan
from gpupool.governance.consolidation_search import demand_milli, fewest_moves, landings
from gpupool.policy.spec import ConsolidationMode, ConsolidationSpec
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.backfill import reserve
from gpupool.scheduling.disruption import NO_BUDGETS, DisruptionBudgets

MAX_NODES_TRIED = 8
"""Nodes searched per waiting pod at most, those with the most room free or movable first."""
MAX_TRIED_PER_POOL = 2
"""Waiting pods a pass searches moves for per pool at most, oldest first (the search is the
expensive part; the next pass tries again)."""
SEARCH_INTERVAL = 60.0
"""Least seconds between two searches. The drivers ask after every cycle (a live scheduler runs
several a second); a pod waits ``minWait`` (minutes) before it is planned for, so searching once
a minute loses nothing and keeps the cost of the what-ifs off the scheduling loop (measured in
the simulation: two thirds of its time went to searching after every 20-second cycle)."""
MOVABLE_KINDS = (RequestKind.WHOLE, RequestKind.SHARE)
MODEL_HORIZON = 24 * HOUR
"""The expected start of a pod the model sees no end for (pods no estimate covers hold its
room): a day, so such a plan's gain is large but finite."""


@dataclass(frozen=True, slots=True)
class Stuck:
    """A pod the last cycle left waiting for resources.

    Attributes:
        workload: The pod.
        pool: The pool it waits in.
        nodes: The nodes the cycle's rules let it use (its pool, less nodes nominated to others).
        since: When it started waiting (its creation, or its requeue place).
    """

    workload: Workload
    pool: int
    nodes: BoolArray
    since: float


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a driver hands the rule.

    Attributes:
        snapshot: The cluster (not changed: the rule works on a copy).
        stuck: The pods the last cycle left waiting for resources.
        running: The running pods by name.
        owners: Running pod name to its workload key, for pods a controller creates again.
        pool_nodes: Per pool index, the pool's nodes.
        settings: Per pool index, its consolidation settings.
        expected_ends: (expected end, snapshot name) of running pods, as reservations see them;
            asked only when a plan is found (computing it visits every running pod).
        now: Seconds.
        kept_off: Nodes moved pods may not count on (nominated or reserved); ``None``: none.
        reserved: Node row to the pod its backfill reservation is held for: a waiting pod may
            be planned onto the node reserved for it (no other waiting pod onto it).
        min_runtime: Per queue index, its ``minRuntimeBeforePreemption``.
        disruption: The PodDisruptionBudgets that cover running pods.
    """

    snapshot: ClusterSnapshot
    stuck: Sequence[Stuck]
    running: Mapping[str, Running]
    owners: Mapping[str, str]
    pool_nodes: Sequence[BoolArray]
    settings: Sequence[ConsolidationSpec]
    expected_ends: Callable[[], Sequence[tuple[float, str]]]
    now: float
    kept_off: BoolArray | None = None
    reserved: Mapping[int, str] = field(default_factory=dict)
    min_runtime: Sequence[float] = ()
    disruption: DisruptionBudgets = NO_BUDGETS


def consolidate(inputs: Inputs, history: MoveHistory) -> list[Outcome] | None:
    """A plan, or why none, for each waiting pod whose pool consolidates (module docstring).

    ``None`` when pods wait on fragments but the last search was less than
    :data:`SEARCH_INTERVAL` ago: its outcomes stand.
    """
    now, tried = inputs.now, Counter[int]()
    candidates = []
    for stuck in sorted(inputs.stuck, key=lambda s: (s.since, s.workload.name)):
        settings = inputs.settings[stuck.pool]
        if settings.mode is ConsolidationMode.OFF or tried[stuck.pool] >= MAX_TRIED_PER_POOL:
            continue
        if history.resting(stuck.workload.name, now):
            continue
        if _on_fragments(inputs.snapshot, stuck, settings, now):
            tried[stuck.pool] += 1
            candidates.append(stuck)
    if not candidates:
        return []
    if now - history.last_search < SEARCH_INTERVAL:
        return None
    work = inputs.snapshot.copy()
    kept_off = (
        np.zeros(work.size, dtype=np.bool_) if inputs.kept_off is None else inputs.kept_off.copy()
    )
    pass_ = _Pass(inputs, work, kept_off, _movable(inputs, history), history)
    outcomes = [pass_.plan(stuck) for stuck in candidates]
    history.searched(outcomes, now)
    return outcomes


def _on_fragments(
    work: ClusterSnapshot, stuck: Stuck, settings: ConsolidationSpec, now: float
) -> bool:
    """Whether the pod has waited long enough for room its pool has, free, only in fragments."""
    pod = stuck.workload.pod
    if (
        pod.kind not in MOVABLE_KINDS
        or stuck.workload.gang
        or now - stuck.since < settings.min_wait
    ):
        return False
    usable = stuck.nodes & admissible(work, pod)
    free = int(np.where(work.gpu_usable, work.gpu_free, 0)[usable].sum())
    return free >= demand_milli(pod)


def _movable(inputs: Inputs, history: MoveHistory) -> dict[str, Running]:
    """The running pods a move may take (module docstring), by name."""
    now = inputs.now
    found = {}
    for name, key in inputs.owners.items():
        running = inputs.running.get(name)
        if running is None or running.workload.gang or running.companions:
            continue
        if running.workload.pod.kind not in MOVABLE_KINDS:
            continue
        if inputs.min_runtime and now - running.started_at < inputs.min_runtime[running.queue]:
            continue
        limit = inputs.settings[running.pool].max_moves_per_workload_per_hour
        if inputs.disruption.violating([name]) or history.of_workload(key, now) >= limit:
            continue
        found[name] = running
    return found


class _Pass:
    """One call's working copy, the pods still movable, and the moves planned so far per pool."""

    def __init__(
        self,
        inputs: Inputs,
        work: ClusterSnapshot,
        kept_off: BoolArray,
        movable: dict[str, Running],
        history: MoveHistory,
    ) -> None:
        self.inputs = inputs
        self.work = work
        self.kept_off = kept_off
        self.movable = movable
        self.history = history
        self.planned: dict[int, int] = {}
        self.ends: Sequence[tuple[float, str]] | None = None

    def plan(self, stuck: Stuck) -> Outcome:
        """The cheapest plan that lands every moved pod, or why there is none."""
        name, pool = stuck.workload.name, stuck.pool
        limit = self.inputs.settings[pool].max_moves_per_hour
        if self.planned.get(pool, 0) + self.history.in_pool(pool, self.inputs.now) >= limit:
            return Declined(name, pool, _limit_reached(limit))
        candidates = self._candidates(stuck)
        if not candidates:
            return Declined(name, pool, "moving the pool's movable pods makes room on no node")
        for _, _, node, moves in candidates:
            if self.inputs.disruption.violating(r.workload.name for r in moves):
                continue
            landed = landings(
                self.work, (stuck.workload.pod, node), moves, self.inputs.pool_nodes, self.kept_off
            )
            if landed is not None:
                return self._decide(stuck, node, moves, landed)
        return Declined(name, pool, "the pods to move would fit nowhere else in their pool")

    def _candidates(self, stuck: Stuck) -> list[tuple[int, float, int, tuple[Running, ...]]]:
        """(moves, loss, node, moves) of the nodes where moves make room, fewest moves first."""
        work, pod = self.work, stuck.workload.pod
        settings = self.inputs.settings[stuck.pool]
        by_node: dict[int, list[Running]] = {}
        for running in self.movable.values():
            by_node.setdefault(running.node, []).append(running)
        blocked = self.kept_off.copy()
        own = [n for n, holder in self.inputs.reserved.items() if holder == stuck.workload.name]
        blocked[own] = False  # the node reserved for it is the one it waits for
        usable = stuck.nodes & admissible(work, pod) & ~blocked
        room = {
            node: int(work.gpu_free_total[node]) + sum(r.units for r in pods)
            for node, pods in by_node.items()
            if usable[node]
        }
        ranked = sorted(
            (n for n, free in room.items() if free >= demand_milli(pod)),
            key=lambda n: (-room[n], n),
        )

        def cost(running: Running) -> float:
            return _loss(running, settings)

        found = []
        for node in ranked[:MAX_NODES_TRIED]:
            moves = fewest_moves(work, pod, node, by_node[node], cost)
            if moves:
                found.append((len(moves), sum(cost(r) for r in moves), node, moves))
        return sorted(found, key=lambda c: c[:3])

    def _decide(
        self, stuck: Stuck, node: int, moves: tuple[Running, ...], landed: Mapping[str, int]
    ) -> Outcome:
        """The plan, kept (applied to the working copy) when it pays within the pool's cap."""
        inputs, pod, pool = self.inputs, stuck.workload.pod, stuck.pool
        settings, now = inputs.settings[pool], inputs.now
        if self.ends is None:
            self.ends = inputs.expected_ends()
        found = reserve(self.work, pod, stuck.nodes, self.ends, now)
        expected = found.start_at if found is not None else now + MODEL_HORIZON
        plan = Plan(
            pod=pod.name,
            pool=pool,
            node=node,
            moves=tuple(
                Move(
                    pod=r.workload.name,
                    workload_key=inputs.owners[r.workload.name],
                    source=r.node,
                    target=landed[r.workload.name],
                    gpus=r.units / MILLI_UNITS,
                    loss_gpu_seconds=_loss(r, settings),
                )
                for r in moves
            ),
            waited=now - stuck.since,
            expected_start=expected,
            gain_gpu_seconds=demand_milli(pod) / MILLI_UNITS * max(0.0, expected - now),
            loss_gpu_seconds=sum(_loss(r, settings) for r in moves),
            mode=settings.mode,
        )
        if not plan.pays:
            return Declined(
                pod.name, pool, "the moves would cost more GPU time than it gains", plan
            )
        made = self.planned.get(pool, 0) + self.history.in_pool(pool, now)
        if made + len(moves) > settings.max_moves_per_hour:
            return Declined(pod.name, pool, _limit_reached(settings.max_moves_per_hour), plan)
        landings(self.work, (pod, node), moves, inputs.pool_nodes, self.kept_off, keep=True)
        self.kept_off[node] = True
        self.planned[pool] = self.planned.get(pool, 0) + len(moves)
        for running in moves:
            del self.movable[running.workload.name]
        return plan


def _loss(running: Running, settings: ConsolidationSpec) -> float:
    """GPU seconds a move costs the pod: its GPUs times its class's restart cost."""
    return running.units / MILLI_UNITS * settings.restart_cost_of(running.workload.workload_class)


def _limit_reached(limit: int) -> str:
    return f"the pool's limit of {limit} moves per hour is reached"
