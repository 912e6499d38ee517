"""Gangs: the pods of a PodGroup start together, at least ``minCount`` of them, or none does.

A distributed job's workers only make progress together; placed one at a time, a 4-worker job
on a cluster with 3 free GPUs holds 3 of them and waits for ever, and two such jobs can each
hold half and deadlock. So when the cycle reaches the first pod of a gang in serving order,
:class:`Gangs` decides for every pending pod of the gang at once:

* quota for all of them together (the queue's ceiling, its borrowing rule and
  ``maxConcurrentPods`` counted per pod);
* placement, pod after pod on the cycle's snapshot with each pod's own checks (pool,
  nominations, backfill reservations, claims), so no two pods of the gang take the same room,
  and, when its PodGroup names a topology key, in one domain of it
  (:mod:`gpupool.scheduling.gang_topology`);
* if at least ``minCount`` minus the pods already running were placed, every placed pod is
  admitted (the rest wait as single pods do, for room);
* otherwise the gang preempts for all its places at once or evicts nothing
  (:mod:`gpupool.scheduling.gang_preemption`), and if it cannot, nothing is bound and every
  pod of the gang waits, saying how many fit, and blocks the pool as a pod nothing fits does:
  with backfill its pods hold reservations (the gang's size decides whether it is large enough
  to), and the pods behind it start only where they delay none of them.

No GPU is held for a gang between cycles: a gang that cannot start whole keeps no GPU from
anyone, so no gang is ever partly bound below its ``minCount`` by gpupool (kube-scheduler's gang
plugin binds places while it waits, up to a timeout, and releases them after; there is nothing
to release here). A victim's whole gang is evicted with it unless its PodGroup lets its pods go
alone (:mod:`gpupool.scheduling.gang_eviction`).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from gpupool.core.decisions import Bind, Reject
from gpupool.core.filtering import NodeCheck
from gpupool.policy.quota import hold_reason
from gpupool.policy.workload import Workload
from gpupool.scheduling.backfill_placement import clear_of_reservations
from gpupool.scheduling.decisions import EngineDecision, Wait
from gpupool.scheduling.gang_preemption import nominated_wait, preempt_for_gang
from gpupool.scheduling.gang_topology import domain_checks
from gpupool.scheduling.ordering import priority_of
from gpupool.scheduling.victims import Attempt
from gpupool.scheduling.wait_cause import WaitCause, WaitKind, rejected, waiting_behind

if TYPE_CHECKING:
    from gpupool.scheduling.cycle import Cycle

Member = tuple[Workload, int]
"""A pending pod of a gang and its queue index."""


class Gangs:
    """The gang decisions of one cycle.

    Args:
        cycle: The cycle (its snapshot, ledger, checks and admissions).
        items: Every pending pod of the cycle with its queue index.
    """

    def __init__(self, cycle: Cycle, items: list[Member]) -> None:
        self.cycle = cycle
        self.members: dict[str, list[Member]] = {}
        for workload, queue in items:
            if workload.gang:
                self.members.setdefault(workload.gang, []).append((workload, queue))
        self.running: Counter[str] = Counter(
            record.workload.gang
            for record in cycle.request.running.values()
            if record.workload.gang in self.members
        )
        self.decided: dict[str, EngineDecision] = {}

    def decision(self, workload: Workload, queue: int, ordered: list[Member]) -> EngineDecision:
        """The decision for a pod of a gang (its whole gang is decided with its first pod).

        ``ordered``: the cycle's serving order, so the gang's pods are tried in it.
        """
        if workload.name not in self.decided:
            rank = {w.name: i for i, (w, _) in enumerate(ordered)}
            members = sorted(self.members[workload.gang], key=lambda m: rank[m[0].name])
            self.decided |= self._decide(workload.gang, members)
        return self.decided.pop(workload.name)

    def _decide(self, gang: str, members: list[Member]) -> dict[str, EngineDecision]:
        spec = self.cycle.request.gangs.get(gang)
        if spec is None:
            return _all_wait(members, WaitCause(WaitKind.GANG, f"waiting for PodGroup {gang}"))
        needed = max(0, spec.min_count - self.running[gang])
        if len(members) < needed:  # not all its pods exist yet (a controller makes them)
            detail = f"gang {gang}: {len(members)} of the {needed} pods it needs are pending"
            return _all_wait(members, WaitCause(WaitKind.GANG, detail))
        first, queue = members[0]
        routes = self.cycle.engine.route(first, self.cycle.tables.queues[queue].name)
        if isinstance(routes, str):
            return _all_wait(members, WaitCause(WaitKind.POOL, routes))
        causes = []
        for pool in routes:
            outcome = self._in_pool(gang, members, needed, pool)
            if isinstance(outcome, dict):
                return outcome
            causes.append(outcome)
        behind = [cause for cause in causes if cause.kind is WaitKind.BEHIND]
        return _all_wait(members, (behind or causes)[0])

    def _in_pool(
        self, gang: str, members: list[Member], needed: int, pool: int
    ) -> dict[str, EngineDecision] | WaitCause:
        """The gang's decisions in ``pool``, or why it cannot start there whole now."""
        cycle = self.cycle
        layout, queue = cycle.layout, members[0][1]
        if not layout.node_count[pool]:
            return WaitCause(WaitKind.POOL, layout.empty_reason(pool))
        if cycle.closed(pool):
            return waiting_behind((cycle.blocked[pool][0].workload.name, layout.pools[pool].name))
        policy = cycle.engine.policy
        units = sum(policy.pending_units(workload.pod, pool) for workload, _ in members)
        held = hold_reason(cycle.tables, layout, cycle.ledger, queue, pool, units, len(members))
        if held:
            return WaitCause(WaitKind.QUOTA, f"gang {gang} of {len(members)} pods: {held}")
        placed, refusal, domain = self._where(gang, members, needed, pool)
        if len(placed) < needed:
            nominated = nominated_wait(cycle, gang, members)
            if nominated is not None:
                return nominated
            preempted = preempt_for_gang(cycle, gang, members, needed, pool, units, domain)
            if preempted is not None:
                return preempted
            if cycle.engine.options.gang_reservations:
                for workload, member_queue in members:
                    priority = priority_of(cycle.tables, member_queue, workload)
                    cycle.block(pool, Attempt(workload, member_queue, pool, units, priority))
            reject = refusal.reject if refusal is not None else None
            why = f"; {refusal.text()}" if refusal is not None else ""
            detail = f"gang {gang}: {len(placed)} of the {needed} pods it needs at once fit{why}"
            return WaitCause(WaitKind.GANG, detail, reject=reject)
        decisions: dict[str, EngineDecision] = {}
        for workload, member_queue in members:
            bind = placed.get(workload.name)
            if bind is None:  # the gang started without it: it waits for room as a pod alone
                cause = refusal or WaitCause(WaitKind.RESOURCES, "waiting for room")
                decisions[workload.name] = Wait(workload, member_queue, cause)
            else:
                decisions[workload.name] = cycle.admit(
                    workload, member_queue, pool, bind, backfilled=False
                )
        return decisions

    def _where(
        self, gang: str, members: list[Member], needed: int, pool: int
    ) -> tuple[dict[str, Bind], WaitCause | None, tuple[NodeCheck, ...]]:
        """The gang's places, in the first topology domain that holds ``needed`` of its pods.

        Without a topology key the whole pool is one domain. When no domain holds enough, the
        one that held most (its check returned, for preemption to search in).
        """
        cycle = self.cycle
        key = cycle.request.gangs[gang].topology_key
        if not key:
            placed, refusal = self._place(members, pool)
            return placed, refusal, ()
        running = [r.node for r in cycle.request.running.values() if r.workload.gang == gang]
        best: tuple[dict[str, Bind], WaitCause | None, tuple[NodeCheck, ...]] | None = None
        for check in domain_checks(cycle.snapshot, key, running):
            placed, refusal = self._place(members, pool, (check,))
            if len(placed) >= needed:
                return placed, refusal, (check,)
            if best is None or len(placed) > len(best[0]):
                best = (placed, refusal, (check,))
        if best is None:
            where = "its pods' domain" if running else f"a node labelled {key}"
            return {}, WaitCause(WaitKind.NODE_CONSTRAINTS, f"no room in {where}"), ()
        return best

    def _place(
        self, members: list[Member], pool: int, domain: tuple[NodeCheck, ...] = ()
    ) -> tuple[dict[str, Bind], WaitCause | None]:
        """Where each pod of the gang would go, one after another (the snapshot as it was)."""
        cycle = self.cycle
        placed: dict[str, Bind] = {}
        refusal: WaitCause | None = None
        heads = cycle.blocked.get(pool)
        try:
            for workload, queue in members:
                checks = cycle.checks(pool, workload, queue) + domain
                found: Bind | Reject | WaitCause = cycle.engine.scheduler.schedule(
                    cycle.snapshot, workload.pod, checks
                )
                if isinstance(found, Bind) and (heads or cycle.reservations.binding(pool)):
                    found = clear_of_reservations(
                        cycle, workload, queue, pool, heads or [], found, checks
                    )
                if isinstance(found, Bind):
                    found = cycle.eligible_gpus(workload, found)
                if isinstance(found, Bind):
                    cycle.snapshot.bind(workload.pod, found.node, found.gpus)
                    placed[workload.name] = found
                elif refusal is None:
                    refusal = rejected(found) if isinstance(found, Reject) else found
        finally:
            for name in placed:
                cycle.snapshot.release(name)
        return placed, refusal


def _all_wait(members: list[Member], cause: WaitCause) -> dict[str, EngineDecision]:
    return {workload.name: Wait(workload, queue, cause) for workload, queue in members}
