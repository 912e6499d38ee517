"""The policy engine: one scheduling cycle over the pending pods, with every policy rule.

The simulator and the live scheduler both call :meth:`PolicyEngine.cycle` with the same data:
the snapshot, the running pods with what they were charged, the ledger, the pending pods, the
outstanding nominations and ``now``. It returns decisions as data and changes none of its
inputs (binds made during the cycle, so that later pods see them, are undone before it
returns; preemption and backfill what-ifs restore what they release):

* :class:`Admit`: bind this pod there (the core's :class:`~gpupool.core.decisions.Bind`), charge
  that many milli-units to its queue in that pool;
* :class:`Wait`: the pod stays pending, with a reason naming the rule (a quota limit, a pool
  that refuses it, the pod it waits behind, or kube-scheduler's capacity sentence);
* :class:`Preempt`: evict these victims for that pod, which is nominated to that node.

Per pending pod, in serving order (:mod:`gpupool.policy.ordering`): route to pools; per pool,
quota admission (:mod:`gpupool.policy.quota`); then, if an earlier pod of the pool is blocked,
strict order (no backfill) or EASY backfill (:mod:`gpupool.policy.backfill`); placement by the
placement policy inside the pool's nodes, away from nodes nominated to pods of at least its
priority; if nothing fits, preemption (:mod:`gpupool.policy.preemption`), else the pod becomes the
pool's blocked head or waits.

Work per cycle is bounded so that a deep queue cannot stall it: a pod whose request is no smaller
than one that already failed in the pool this cycle is not placed again (nothing was freed in
between), at most ``backfill_depth`` pods are examined behind a blocked head per pool, and at
most ``max_preemptions`` victim searches are made per cycle, one per queue and pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpupool.core.decisions import Bind, Reject
from gpupool.core.filtering import NodeCheck
from gpupool.core.framework import Scheduler
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import BoolArray, ClusterSnapshot
from gpupool.policy.backfill import Reservation, may_backfill, reserve
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.ordering import order_pending, priority_of
from gpupool.policy.preemption import (
    Rule,
    VictimChoice,
    choose_victims,
    eligible_victims,
    reclaim_budgets,
)
from gpupool.policy.quota import Ledger, hold_reason
from gpupool.policy.runtime import RuntimeEstimator
from gpupool.policy.units import milli_units
from gpupool.policy.workload import Running, Workload


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Which mechanisms are on, and the per-cycle work bounds.

    Attributes:
        backfill: EASY backfill behind a blocked pod; off means strict order per pool.
        preemption: Priority preemption and guarantee reclaim.
        max_preemptions: Victim searches per cycle at most (successful or not), and at most
            one per queue and pool.
        backfill_depth: Pods examined behind a blocked head, per pool and cycle.
    """

    backfill: bool = True
    preemption: bool = True
    max_preemptions: int = 8
    backfill_depth: int = 100


@dataclass(frozen=True, slots=True)
class Admit:
    """Start a pending pod.

    Attributes:
        workload: The pod.
        queue: Queue index.
        pool: Pool index.
        units: Milli-units to charge.
        bind: Node and GPUs.
        backfilled: Whether it started ahead of a blocked pod of its pool.
        expected_end: ``now`` plus its expected runtime (record it in :class:`Running`).
    """

    workload: Workload
    queue: int
    pool: int
    units: int
    bind: Bind
    backfilled: bool
    expected_end: float

    def running(self, now: float) -> Running:
        """The record of the pod once started at ``now``."""
        return Running(
            self.workload, self.queue, self.pool, self.units, self.bind.node, now, self.expected_end
        )


@dataclass(frozen=True, slots=True)
class Wait:
    """Keep a pod pending.

    Attributes:
        workload: The pod.
        queue: Queue index.
        reason: Why, naming the rule, queue, limit and pool where one applies.
        reject: The placement's rejection (per-reason node counts) when the pod waits for
            capacity; ``None`` when a policy rule holds it.
    """

    workload: Workload
    queue: int
    reason: str
    reject: Reject | None = None


@dataclass(frozen=True, slots=True)
class Preempt:
    """Evict ``victims`` so that ``workload`` can start on ``node``.

    Attributes:
        workload: The preemptor (nominated to ``node``).
        queue: Its queue index.
        pool: Its pool index.
        node: Node row.
        node_name: Node name.
        victims: Pods to evict.
        rule: Priority or reclaim.
        gpu_seconds_lost: GPU-unit seconds of work the victims lose.
    """

    workload: Workload
    queue: int
    pool: int
    node: int
    node_name: str
    victims: tuple[str, ...]
    rule: Rule
    gpu_seconds_lost: float


EngineDecision = Admit | Wait | Preempt


@dataclass(frozen=True, slots=True)
class CycleRequest:
    """Everything one cycle decides from.

    Attributes:
        snapshot: The cluster with every running pod bound.
        pending: Pods waiting to start.
        running: Running pods by name, with their charges.
        ledger: What each queue holds now.
        now: Seconds.
        nominations: Pod name to the node its preemption freed (from earlier cycles).
        runtimes: Runtime estimates for backfill (when omitted, an estimator that has learned
            nothing: every undeclared runtime is the default).
        reservations: The previous cycle's reservations. A pool's reservation stays with its
            pod while that pod is pending and the reserved start lies ahead (completions only
            move it earlier and backfill never moves it later); then the pool's current blocked
            head gets a new one. One sweep of the running pods per reservation, not per cycle.
    """

    snapshot: ClusterSnapshot
    pending: Sequence[Workload]
    running: Mapping[str, Running]
    ledger: Ledger
    now: float
    nominations: Mapping[str, int] = field(default_factory=dict)
    runtimes: RuntimeEstimator | None = None
    reservations: Mapping[int, Reservation] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle decided.

    Attributes:
        decisions: One per pending pod, in serving order.
        nominations: Outstanding nominations after the cycle (pass them to the next one).
        reservations: Per pool index, the backfill reservation of its blocked head, if any.
    """

    decisions: tuple[EngineDecision, ...]
    nominations: dict[str, int]
    reservations: dict[int, Reservation]


class PolicyEngine:
    """Pools, quotas, order, preemption and backfill around one placement scheduler.

    Args:
        scheduler: The placement scheduler (policy and tie ranks).
        policy: The compiled pools and queues.
        options: Mechanisms and bounds.
    """

    def __init__(
        self, scheduler: Scheduler, policy: ClusterPolicy, options: EngineOptions | None = None
    ) -> None:
        self.scheduler = scheduler
        self.policy = policy
        self.options = options or EngineOptions()
        self._routes: dict[tuple[object, ...], tuple[int, ...] | str] = {}
        self.populated_pools = int(np.count_nonzero(policy.layout.node_count))
        self.default_runtimes = RuntimeEstimator()
        """Used when a request brings none: it never learns, so estimates are the default."""
        self._pool_checks: dict[int, tuple[NodeCheck, ...]] = {}

    def pool_checks(self, pool: int) -> tuple[NodeCheck, ...]:
        """The filter check that keeps a pod inside ``pool`` (memoised per pool)."""
        checks = self._pool_checks.get(pool)
        if checks is None:
            checks = self.policy.layout.node_checks(pool)
            self._pool_checks[pool] = checks
        return checks

    def route(self, workload: Workload, queue: str) -> tuple[int, ...] | str:
        """Pools to try for ``workload`` (memoised: routing reads only these four fields)."""
        key = (workload.pod.kind, workload.workload_class, workload.pool, queue)
        routes = self._routes.get(key)
        if routes is None:
            routes = self.policy.layout.route(workload, queue)
            self._routes[key] = routes
        return routes

    def observe(self, workload: Workload) -> None:
        """Show an arriving pod to the placement policy (once per arrival)."""
        self.scheduler.observe(workload.pod)

    def cycle(self, request: CycleRequest) -> CycleResult:
        """Decide for every pending pod; the inputs are left as they were."""
        return _Cycle(self, request).run()


class _Cycle:
    """The state of one cycle; discarded when it returns."""

    def __init__(self, engine: PolicyEngine, request: CycleRequest) -> None:
        self.engine = engine
        self.request = request
        self.snapshot = request.snapshot
        self.layout = engine.policy.layout
        self.tables = engine.policy.tables
        self.ledger: Ledger = request.ledger  # copied on the first in-cycle bind
        self.runtimes = request.runtimes or engine.default_runtimes
        self.pending_names = {workload.name for workload in request.pending}
        self.nominations = {
            name: node for name, node in request.nominations.items() if name in self.pending_names
        }
        self.blocked: dict[int, PodSpec] = {}
        self.reservations: dict[int, Reservation | None] = {}
        self.examined: dict[int, int] = {}
        self.failed: dict[int, list[PodSpec]] = {}
        self.evicting: set[str] = set()
        self.preemptions_left = engine.options.max_preemptions
        self.searched: set[tuple[int, int]] = set()
        self.bound: list[str] = []
        self.last = False

    def run(self) -> CycleResult:
        tables = self.tables
        items = [
            (workload, tables.queue_of(workload.namespace, workload.queue))
            for workload in self.request.pending
        ]
        ordered = order_pending(items, tables, self.layout, self.ledger)
        self._nominee_priority = {
            self.nominations[w.name]: priority_of(tables, q, w)
            for w, q in ordered
            if w.name in self.nominations
        }
        decisions: list[EngineDecision] = []
        pools = range(len(self.layout.pools))
        try:
            for index, (workload, queue) in enumerate(ordered):
                self.last = index == len(ordered) - 1
                if (
                    self.blocked
                    and all(self._closed(p) for p in pools if p in self.blocked)
                    and (len(self.blocked) == self.engine.populated_pools)
                ):
                    decisions.append(Wait(workload, queue, self._all_closed_reason()))
                    continue
                decisions.append(self._decide(workload, queue))
        finally:
            for name in reversed(self.bound):
                self.snapshot.release(name)
        return CycleResult(
            decisions=tuple(decisions),
            nominations=self.nominations,
            reservations={p: r for p, r in self.reservations.items() if r is not None},
        )

    def _decide(self, workload: Workload, queue: int) -> EngineDecision:
        queue_name = self.tables.queues[queue].name
        routes = self.engine.route(workload, queue_name)
        if isinstance(routes, str):
            return Wait(workload, queue, routes)
        if all(self._closed(pool) for pool in routes):
            first = routes[0]
            units = self.engine.policy.pending_units(workload.pod, first)
            held = hold_reason(self.tables, self.layout, self.ledger, queue, first, units)
            head = self.blocked[first].name
            return Wait(
                workload,
                queue,
                held or f"waiting behind {head} in pool {self.layout.pools[first].name}",
            )
        reason = ""
        reject: Reject | None = None
        for pool in routes:
            outcome = self._try_pool(workload, queue, pool)
            if isinstance(outcome, Reject):
                reject = reject or outcome
                reason = reason or outcome.message
            elif isinstance(outcome, str):
                reason = reason or outcome
            else:
                return outcome
        return Wait(workload, queue, reason, reject)

    def _all_closed_reason(self) -> str:
        heads = ", ".join(
            f"{head.name} in pool {self.layout.pools[p].name}" for p, head in self.blocked.items()
        )
        return f"waiting behind {heads}"

    def _closed(self, pool: int) -> bool:
        """Whether nothing more may start in ``pool`` this cycle (strict order or depth)."""
        if pool not in self.blocked:
            return False
        options = self.engine.options
        return not options.backfill or self.examined.get(pool, 0) >= options.backfill_depth

    def _try_pool(
        self, workload: Workload, queue: int, pool: int
    ) -> Admit | Preempt | Reject | str:
        pod = workload.pod
        pool_name = self.layout.pools[pool].name
        if not self.layout.node_count[pool]:
            return self.layout.empty_reason(pool)
        units = self.engine.policy.pending_units(pod, pool)
        held = (
            hold_reason(self.tables, self.layout, self.ledger, queue, pool, units)
            if self.tables.limited
            else ""
        )
        if held:
            return self._preempt_for_quota(workload, queue, pool, units) or held
        head = self.blocked.get(pool)
        if head is not None:
            if not self.engine.options.backfill:
                return f"waiting behind {head.name} in pool {pool_name} (strict order)"
            self.examined[pool] = self.examined.get(pool, 0) + 1
            if self.examined[pool] > self.engine.options.backfill_depth:
                return f"waiting behind {head.name} in pool {pool_name} (backfill depth reached)"
        if any(_no_smaller(failed, pod) for failed in self.failed.get(pool, ())):
            return f"no room in pool {pool_name} for a pod of this size this cycle"
        priority = priority_of(self.tables, queue, workload)
        checks = self.engine.pool_checks(pool) + self._nomination_checks(workload, priority)
        decision = self.engine.scheduler.schedule(self.snapshot, pod, checks)
        if isinstance(decision, Bind):
            placed = decision
            if head is not None:
                backfilled = self._backfill(workload, queue, pool, head, decision, checks)
                if isinstance(backfilled, str):
                    return backfilled
                placed = backfilled
            return self._admit(workload, queue, pool, placed, backfilled=head is not None)
        failed = self.failed.setdefault(pool, [])
        if len(failed) < FAILED_SHAPES_KEPT:
            failed.append(pod)
        if workload.name in self.nominations:
            node = self.snapshot.node_names[self.nominations[workload.name]]
            return f"nominated to node {node}: waiting for preempted pods to terminate"
        if self.engine.options.preemption and self._may_search(queue, pool):
            choice = self._preempt(workload, queue, pool, units, priority, checks)
            if choice is not None:
                return choice
        if head is None:
            self.blocked[pool] = pod
        return decision

    def _admit(
        self, workload: Workload, queue: int, pool: int, bind: Bind, *, backfilled: bool
    ) -> Admit:
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
        return admit

    def _nomination_checks(
        self, workload: Workload, priority: tuple[int, int]
    ) -> tuple[NodeCheck, ...]:
        if not self._nominee_priority:
            return ()
        own = self.nominations.get(workload.name)
        mask = np.ones(self.snapshot.size, dtype=np.bool_)
        for node, nominee in self._nominee_priority.items():
            if node != own and nominee >= priority:
                mask[node] = False
        if mask.all():
            return ()
        return (("node(s) nominated to a preempting pod", mask),)

    def _backfill(
        self,
        workload: Workload,
        queue: int,
        pool: int,
        head: PodSpec,
        decision: Bind,
        checks: tuple[NodeCheck, ...],
    ) -> Bind | str:
        reservation = self._reservation(pool, head, checks)
        if reservation is None:
            return decision
        now = self.request.now
        runtime = self.runtimes.estimate(workload, self.tables.queues[queue].name)
        if may_backfill(reservation, decision.node, now, runtime):
            return decision
        away = np.ones(self.snapshot.size, dtype=np.bool_)
        away[reservation.node] = False
        retry = self.engine.scheduler.schedule(
            self.snapshot, workload.pod, (*checks, (f"node(s) reserved for {head.name}", away))
        )
        if isinstance(retry, Bind):
            return retry
        return (
            f"backfill: would delay {head.name}, reserved on node "
            f"{self.snapshot.node_names[reservation.node]} from t={reservation.start_at:.0f}s"
        )

    def _reservation(
        self, pool: int, head: PodSpec, checks: tuple[NodeCheck, ...]
    ) -> Reservation | None:
        if pool not in self.reservations:
            previous = self.request.reservations.get(pool)
            if (
                previous is not None
                and previous.pod in self.pending_names
                and previous.start_at > self.request.now
            ):
                self.reservations[pool] = previous
                return previous
            mask = _mask_of(self.snapshot.size, checks)
            ends = [(r.expected_end, name) for name, r in self.request.running.items()]
            self.reservations[pool] = reserve(self.snapshot, head, mask, ends, self.request.now)
        return self.reservations[pool]

    def _preempt_for_quota(
        self, workload: Workload, queue: int, pool: int, units: int
    ) -> Preempt | None:
        """Priority preemption inside the queue for a pod its own ceiling or pod limit holds."""
        ledger, tables = self.ledger, self.tables
        free_units = int(ledger.used[queue, pool] + units - tables.ceiling[queue, pool])
        free_pods = int(ledger.pods[queue] + 1 - tables.max_pods[queue])
        if (
            not self.engine.options.preemption
            or (free_units <= 0 and free_pods <= 0)
            or not any(p < workload.priority for p in ledger.priorities[queue])
            or not self._may_search(queue, pool)
        ):
            return None
        priority = priority_of(tables, queue, workload)
        checks = self.engine.pool_checks(pool) + self._nomination_checks(workload, priority)
        candidates = eligible_victims(
            Rule.PRIORITY, queue, priority, pool, self._running(), tables, ledger, self.request.now
        )
        choice = choose_victims(
            self.snapshot,
            workload.pod,
            candidates,
            _mask_of(self.snapshot.size, checks),
            self.request.now,
            Rule.PRIORITY,
            free_units=max(0, free_units),
            free_pods=max(0, free_pods),
        )
        return None if choice is None else self._nominate(workload, queue, pool, priority, choice)

    def _may_search(self, queue: int, pool: int) -> bool:
        """One victim search per queue and pool per cycle, ``max_preemptions`` in all.

        Searching is the expensive part, found or not; one per queue keeps a queue whose first
        pods can never preempt from using up the searches of the others.
        """
        if self.preemptions_left <= 0 or (queue, pool) in self.searched:
            return False
        self.searched.add((queue, pool))
        self.preemptions_left -= 1
        return True

    def _running(self) -> list[Running]:
        return [
            running for name, running in self.request.running.items() if name not in self.evicting
        ]

    def _preempt(
        self,
        workload: Workload,
        queue: int,
        pool: int,
        units: int,
        priority: tuple[int, int],
        checks: tuple[NodeCheck, ...],
    ) -> Preempt | None:
        ledger, tables, now = self.ledger, self.tables, self.request.now
        mask = _mask_of(self.snapshot.size, checks)
        choice: VictimChoice | None = None
        if any(p < workload.priority for p in ledger.priorities[queue]):
            candidates = eligible_victims(
                Rule.PRIORITY, queue, priority, pool, self._running(), tables, ledger, now
            )
            choice = choose_victims(
                self.snapshot, workload.pod, candidates, mask, now, Rule.PRIORITY
            )
        if (
            choice is None
            and tables.limited
            and ledger.used[queue, pool] + units <= tables.guaranteed[queue, pool]
        ):
            budgets = {q: b for q, b in reclaim_budgets(tables, ledger, pool).items() if q != queue}
            if budgets:
                candidates = eligible_victims(
                    Rule.RECLAIM, queue, priority, pool, self._running(), tables, ledger, now
                )
                choice = choose_victims(
                    self.snapshot, workload.pod, candidates, mask, now, Rule.RECLAIM, budgets
                )
        if choice is None:
            return None
        return self._nominate(workload, queue, pool, priority, choice)

    def _nominate(
        self,
        workload: Workload,
        queue: int,
        pool: int,
        priority: tuple[int, int],
        choice: VictimChoice,
    ) -> Preempt:
        self.evicting.update(choice.victims)
        self.nominations[workload.name] = choice.node
        self._nominee_priority[choice.node] = priority
        return Preempt(
            workload=workload,
            queue=queue,
            pool=pool,
            node=choice.node,
            node_name=self.snapshot.node_names[choice.node],
            victims=choice.victims,
            rule=choice.rule,
            gpu_seconds_lost=choice.gpu_seconds_lost,
        )


FAILED_SHAPES_KEPT = 32
"""Failed requests remembered per pool and cycle for skipping no-smaller ones."""


def _mask_of(size: int, checks: tuple[NodeCheck, ...]) -> BoolArray:
    mask = np.ones(size, dtype=np.bool_)
    for _, passed in checks:
        mask &= passed
    return mask


def _no_smaller(failed: PodSpec, pod: PodSpec) -> bool:
    """Whether ``pod`` asks for at least everything ``failed`` asked for, in the same shape."""
    return (
        pod.kind is failed.kind
        and pod.gpu_models == failed.gpu_models
        and pod.mig_profile == failed.mig_profile
        and pod.gpu_count >= failed.gpu_count
        and pod.gpu_milli >= failed.gpu_milli
        and pod.gpu_memory_mib >= failed.gpu_memory_mib
        and pod.cpu_milli >= failed.cpu_milli
        and pod.memory_mib >= failed.memory_mib
    )
