"""One cycle of the policy engine: serving order, routing, quota, placement, then what is left.

:class:`Cycle` holds the state of one :meth:`~gpupool.scheduling.engine.PolicyEngine.cycle` and
is discarded when it returns. Per pending pod in serving order it routes the pod to pools and,
per pool, applies quota admission, the pool's order (strict, or EASY backfill behind a blocked
head: :class:`~gpupool.scheduling.backfill.Reservations`), places it, and if nothing fits
searches for victims (:class:`~gpupool.scheduling.victims.VictimSearch`) or blocks the pool.

Every placement, victim search and reservation restricts itself with the same checks: the
pool's nodes and the nodes nominated to others (built here), and the pod's own constraints and
the nodes' state (:func:`gpupool.core.filtering.node_checks`, which the core's filter, the
victim search and the reservation apply to the pod's request). So no part of a cycle can pick a
node another part would refuse.

A pod that no node of its pools could ever hold (more of a resource than any node's capacity, or
no node passes its selector, model, taints and readiness: :mod:`gpupool.scheduling.never_fits`)
waits with the filter's reason and "no node could ever hold it"; it never blocks a pool, so it
holds no reservation, no pod waits behind it, no pod is skipped for its shape, and no victim is
sought for it.

The pods of a gang are decided together, with its first pod (:mod:`gpupool.scheduling.gangs`).

Work per cycle is bounded so that a deep queue cannot stall it: a pod whose request is no smaller
than one that already failed in the pool this cycle is not placed again (nothing was freed in
between; it waits with that pod's rejection, which holds for it too), at most
``backfill_depth`` pods are examined behind a blocked head per pool, and at most
``max_preemptions`` victim searches are made per cycle, one per queue and pool.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gpupool.core.decisions import Bind, Reject
from gpupool.core.filtering import NodeCheck
from gpupool.core.pod_relative import failed_for_neighbours
from gpupool.policy.quota import Ledger, hold_reason
from gpupool.policy.units import milli_units
from gpupool.policy.workload import Workload
from gpupool.scheduling.backfill import Blocked, Reservations, no_smaller
from gpupool.scheduling.backfill_placement import clear_of_reservations
from gpupool.scheduling.claim_placement import REASON_NO_ELIGIBLE, fails_by_size, restrict_choice
from gpupool.scheduling.decisions import (
    Admit,
    CycleRequest,
    CycleResult,
    EngineDecision,
    Preempt,
    Wait,
)
from gpupool.scheduling.gangs import Gangs
from gpupool.scheduling.never_fits import NeverFits, never_fits
from gpupool.scheduling.nominated import Nominee, drop_nominations_on, nomination_checks
from gpupool.scheduling.ordering import order_pending, priority_of
from gpupool.scheduling.preemption import VictimChoice
from gpupool.scheduling.runtime import expected_ends
from gpupool.scheduling.victims import Attempt, VictimSearch
from gpupool.scheduling.wait_cause import WaitCause, WaitKind, rejected, waiting_behind

if TYPE_CHECKING:
    from gpupool.scheduling.engine import PolicyEngine

FAILED_SHAPES_KEPT = 32
"""Failed requests remembered per pool and cycle for skipping no-smaller ones."""


class Cycle:
    """The state of one cycle.

    Args:
        engine: The engine (policy, placement scheduler, options, memoised routes).
        request: What this cycle decides from.
    """

    def __init__(self, engine: PolicyEngine, request: CycleRequest) -> None:
        self.engine = engine
        self.request = request
        self.snapshot = request.snapshot
        self.layout = engine.policy.layout
        self.tables = engine.policy.tables
        self.ledger: Ledger = request.ledger  # copied on the first in-cycle bind
        self.runtimes = request.runtimes or engine.default_runtimes
        pending_names = {workload.name for workload in request.pending}
        self.nominations = {
            name: node for name, node in request.nominations.items() if name in pending_names
        }
        self.nominees: dict[int, Nominee] = {}
        """Per nominated node, its nominee."""
        self.blocked: dict[int, list[Blocked]] = {}
        """Per pool, its first blocked pods in serving order (the head first), as many as it
        may protect with reservations."""
        self.examined: dict[int, int] = {}
        self.failed: dict[int, list[Reject]] = {}
        """Per pool, the rejections of this cycle's pods that failed by size."""
        self.never_fits = NeverFits(engine, request)
        self.victims = VictimSearch(engine.options, request, self.tables)
        self.items = [
            (workload, self.tables.queue_of(workload.namespace, workload.queue))
            for workload in request.pending
        ]
        options = engine.options
        self.reservations = Reservations(
            request,
            {workload.name: Blocked(workload, queue) for workload, queue in self.items},
            options.reservations_per_pool,
            self._expected_ends,
            follow=options.backfill and options.reservations_follow_pods,
        )
        self.bound: list[str] = []
        self.last = False
        self.gangs = Gangs(self, self.items)

    def run(self) -> CycleResult:
        """Decide for every pending pod, then undo the in-cycle binds."""
        ordered = order_pending(self.items, self.tables, self.layout, self.ledger)
        self.nominees = {
            self.nominations[w.name]: Nominee(q, priority_of(self.tables, q, w), w.gang)
            for w, q in ordered
            if w.name in self.nominations
        }
        decisions: list[EngineDecision] = []
        try:
            for index, (workload, queue) in enumerate(ordered):
                self.last = index == len(ordered) - 1
                held = workload.name in self.reservations.holders
                if workload.gang:
                    decisions.append(self.gangs.decision(workload, queue, ordered))
                elif (never := self.never_fits.wait(workload, queue, self.checks)) is not None:
                    decisions.append(never)
                elif self.blocked and not held and self._every_pool_closed():
                    decisions.append(Wait(workload, queue, self._all_closed_reason()))
                else:
                    decisions.append(self._decide(workload, queue))
            self.reservations.hold_for(self.blocked, self.room_checks)
        finally:
            for name in reversed(self.bound):
                self.snapshot.release(name)
        return CycleResult(
            decisions=tuple(decisions),
            nominations=self.nominations,
            reservations=self.reservations.kept(),
            awaiting=self.reservations.awaiting(self.blocked),
        )

    def _expected_ends(self) -> list[tuple[float, str]]:
        """(expected end, pod name) of every running pod, as reservations should see them."""
        names = [queue.name for queue in self.tables.queues]
        by_age = self.engine.options.remaining_by_age
        return expected_ends(self.request.running, self.request.now, self.runtimes, names, by_age)

    def _every_pool_closed(self) -> bool:
        return len(self.blocked) == self.engine.populated_pools and all(
            self.closed(pool) for pool in self.blocked
        )

    def _decide(self, workload: Workload, queue: int) -> EngineDecision:
        queue_name = self.tables.queues[queue].name
        routes = self.engine.route(workload, queue_name)
        if isinstance(routes, str):
            return Wait(workload, queue, WaitCause(WaitKind.POOL, routes))
        holder = workload.name in self.reservations.holders
        if not holder and all(self.closed(pool) for pool in routes):
            first = routes[0]
            units = self.engine.policy.pending_units(workload.pod, first)
            held = hold_reason(self.tables, self.layout, self.ledger, queue, first, units)
            head = (self.blocked[first][0].workload.name, self.layout.pools[first].name)
            cause = WaitCause(WaitKind.QUOTA, held) if held else waiting_behind(head)
            return Wait(workload, queue, cause)
        causes: list[WaitCause] = []
        for pool in routes:
            outcome = self._try_pool(workload, queue, pool)
            if not isinstance(outcome, WaitCause):
                return outcome
            causes.append(outcome)
        # behind others in one pool, it may be taken by a pool it was not tried in: try it again
        # next cycle rather than parking it with another pool's verdict; and a pool that could
        # never hold it says nothing of one that could once room is freed
        behind = [cause for cause in causes if cause.kind is WaitKind.BEHIND]
        could = [cause for cause in causes if cause.kind is not WaitKind.NEVER_FITS]
        return Wait(workload, queue, (behind or could or causes)[0])

    def _all_closed_reason(self) -> WaitCause:
        pools = self.layout.pools
        heads = [(blocked[0].workload.name, pools[p].name) for p, blocked in self.blocked.items()]
        return waiting_behind(*heads)

    def closed(self, pool: int) -> bool:
        """Whether nothing more may start in ``pool`` this cycle (strict order or depth)."""
        if pool not in self.blocked:
            return False
        options = self.engine.options
        return not options.backfill or self.examined.get(pool, 0) >= options.backfill_depth

    def _try_pool(self, workload: Workload, queue: int, pool: int) -> Admit | Preempt | WaitCause:
        pod = workload.pod
        if not self.layout.node_count[pool]:
            return WaitCause(WaitKind.POOL, self.layout.empty_reason(pool))
        units = self.engine.policy.pending_units(pod, pool)
        priority = priority_of(self.tables, queue, workload)
        held = (
            hold_reason(self.tables, self.layout, self.ledger, queue, pool, units)
            if self.tables.limited
            else ""
        )
        attempt = Attempt(workload, queue, pool, units, priority)
        if held:
            choice = self._victims_for_quota(attempt)
            if choice is None:
                return WaitCause(WaitKind.QUOTA, held)
            return self.nominate(attempt, choice)
        heads = self.blocked.get(pool)
        if heads is not None or pool in self.failed:
            refusal = self._order_refusal(attempt, heads)
            if refusal is not None:
                return refusal
        checks = self.checks(pool, workload, queue)
        decision = self.engine.scheduler.schedule(self.snapshot, pod, checks)
        if isinstance(decision, Bind):
            placed: Bind | WaitCause = decision
            if heads is not None or self.reservations.binding(pool):
                placed = clear_of_reservations(
                    self, workload, queue, pool, heads or [], decision, checks
                )
            placed = self.eligible_gpus(workload, placed)
            if isinstance(placed, WaitCause):
                return placed
            return self.admit(workload, queue, pool, placed, backfilled=heads is not None)
        return self._unplaced(attempt, checks, decision)

    def _order_refusal(
        self, attempt: Attempt, heads: list[Blocked] | None
    ) -> Preempt | WaitCause | None:
        """Why the pool's order keeps a pod from being tried now (``None`` if it may be).

        A pod no smaller than one that failed by size here this cycle gets that pod's rejection,
        naming it (every node that refused it refuses this one), so it waits for capacity with
        a reason rather than being deferred without one: behind a holder of a reservation,
        which fails in every cycle, it was deferred in every cycle and never told why.
        """
        pool = attempt.pool
        held = attempt.workload.name in self.reservations.holders
        pool_name = self.layout.pools[pool].name
        if heads is not None:
            name = heads[0].workload.name
            if not self.engine.options.backfill:
                return waiting_behind((name, pool_name), why="strict order")
            self.examined[pool] = self.examined.get(pool, 0) + 1
            if self.examined[pool] > self.engine.options.backfill_depth and not held:
                return waiting_behind((name, pool_name), why="backfill depth reached")
        nominated = attempt.workload.name in self.nominations  # its node is open to it alone
        pod = attempt.workload.pod
        failed = (
            None
            if held or nominated
            else next((f for f in self.failed.get(pool, ()) if no_smaller(f.pod, pod)), None)
        )
        if failed is not None:
            choice = self._victim_search(attempt)
            if choice is not None:  # a pod of its shape failed, but its queue may take back
                return self.nominate(attempt, choice)
            if heads is not None:  # blocked as surely as if it had been tried
                self.block(pool, attempt)
            return rejected(replace(failed, pod=pod), like=failed.pod.name)
        return None

    def _unplaced(
        self, attempt: Attempt, checks: tuple[NodeCheck, ...], decision: Reject
    ) -> Preempt | WaitCause:
        """Nothing fits: wait for a nomination, preempt, or become the pool's blocked head."""
        workload, pool = attempt.workload, attempt.pool
        if self.never_fits.in_pool(workload, pool):  # nothing to wait for here: it blocks nothing
            return never_fits(decision)
        failed = self.failed.setdefault(pool, [])
        eligibility = self.request.eligibility.get(workload.name)
        if (
            len(failed) < FAILED_SHAPES_KEPT
            and fails_by_size(eligibility, self.snapshot)
            and not failed_for_neighbours(decision.reasons)
        ):
            failed.append(decision)
        if workload.name in self.nominations:
            node = self.snapshot.node_names[self.nominations[workload.name]]
            return WaitCause(WaitKind.PREEMPTING, node=node)
        choice = self._victim_search(attempt, checks)
        if choice is not None:
            return self.nominate(attempt, choice)
        self.block(pool, attempt)
        return rejected(decision)

    def _victim_search(
        self, attempt: Attempt, checks: tuple[NodeCheck, ...] | None = None
    ) -> VictimChoice | None:
        """Victims that make room for ``attempt``, if preemption may search for it now.

        Also asked for a pod skipped because a pod of its shape failed: that failure says
        nothing of what this pod's queue may take back (a queue under its guarantee stayed
        there behind a borrower's failed pod of its size; found by the property test).
        """
        if not self.engine.options.preemption or attempt.workload.name in self.nominations:
            return None
        if not self.victims.may_search(attempt.queue, attempt.pool):
            return None
        if checks is None or attempt.workload.name in self.request.eligibility:
            checks = self.checks(attempt.pool, attempt.workload, attempt.queue, freed=True)
        return self.victims.for_room(attempt, checks, self.ledger)

    def block(self, pool: int, attempt: Attempt) -> None:
        """Count ``attempt`` among the pool's blocked pods: the head, and those it may protect.

        The head (the first blocked pod) is kept whatever its size, since the order's waits name
        it; after it only pods large enough to hold a reservation, until the pool has as many of
        those as it may protect (:attr:`EngineOptions.reserve_above_units`).
        """
        heads = self.blocked.setdefault(pool, [])
        options = self.engine.options
        threshold = options.reserve_above_units
        protected = threshold is None or attempt.units > threshold
        if not heads or (
            protected and sum(head.protected for head in heads) < options.reservations_per_pool
        ):
            heads.append(Blocked(attempt.workload, attempt.queue, protected))

    def checks(
        self, pool: int, workload: Workload, queue: int, *, freed: bool = False
    ) -> tuple[NodeCheck, ...]:
        """A pod's checks: pool, nominations to others, claim (``freed``: its devices, emptied)."""
        pod = Nominee(queue, priority_of(self.tables, queue, workload), workload.gang)
        checks = self.engine.pool_checks(pool) + nomination_checks(
            self.nominees, self.nominations.get(workload.name), pod, self.snapshot.size
        )
        eligibility = self.request.eligibility.get(workload.name)
        if eligibility is not None:
            check = eligibility.once_freed if freed else eligibility.check
            checks += (check(self.snapshot, workload.pod),)
        return checks

    def room_checks(self, pool: int, head: Blocked) -> tuple[NodeCheck, ...]:
        """A blocked pod's checks for finding its reservation: its claim's devices emptied."""
        return self.checks(pool, head.workload, head.queue, freed=True)

    def eligible_gpus(self, workload: Workload, placed: Bind | WaitCause) -> Bind | WaitCause:
        """A claim pod's placement with the policy's GPUs kept to those its claim may use.

        The node check already passed only nodes with enough eligible free GPUs; without this
        the policy could still pick, on such a node, a GPU the claim's selectors exclude.
        """
        eligibility = self.request.eligibility.get(workload.name)
        if eligibility is None or isinstance(placed, WaitCause) or not placed.gpus:
            return placed
        gpus = restrict_choice(self.snapshot, workload.pod, placed.node, eligibility, placed.gpus)
        if gpus is None:
            return WaitCause(WaitKind.NODE_CONSTRAINTS, REASON_NO_ELIGIBLE)
        return replace(placed, gpus=gpus)

    def admit(
        self, workload: Workload, queue: int, pool: int, bind: Bind, *, backfilled: bool
    ) -> Admit:
        """Admit ``workload`` there: later pods of the cycle see it bound and charged."""
        now = self.request.now
        units = milli_units(workload.pod, self.snapshot.nodes[bind.node].gpu_memory_mib)
        runtime = self.runtimes.estimate(workload, self.tables.queues[queue].name)
        admit = Admit(workload, queue, pool, units, bind, backfilled, now + runtime)
        if not self.last:  # later pods must see it; the last pod's bind would only be undone
            self.snapshot.bind(workload.pod, bind.node, bind.gpus)
            self.bound.append(workload.name)
            if self.ledger is self.request.ledger:
                self.ledger = self.ledger.copy()
            self.ledger.add(admit.running(now))
        self.nominations.pop(workload.name, None)
        if self.nominees.pop(bind.node, None) is not None:
            drop_nominations_on(self.nominations, bind.node)
        return admit

    def _victims_for_quota(self, attempt: Attempt) -> VictimChoice | None:
        """Priority preemption inside the queue for a pod its own ceiling or pod limit holds."""
        if not self.engine.options.preemption:
            return None
        checks = self.checks(attempt.pool, attempt.workload, attempt.queue, freed=True)
        return self.victims.for_quota(attempt, checks, self.ledger)

    def nominate(self, attempt: Attempt, choice: VictimChoice) -> Preempt:
        """Nominate the pod to the choice's node: no pod of its rank or less goes there."""
        workload = attempt.workload
        self.nominations[workload.name] = choice.node
        self.nominees[choice.node] = Nominee(attempt.queue, attempt.priority, workload.gang)
        return Preempt(
            workload=workload,
            queue=attempt.queue,
            pool=attempt.pool,
            node=choice.node,
            node_name=self.snapshot.node_names[choice.node],
            victims=choice.victims,
            rule=choice.rule,
            gpu_seconds_lost=choice.gpu_seconds_lost,
            violating=choice.violating,
        )
