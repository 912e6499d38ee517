"""The victim searches of one engine cycle: which rule applies, how many searches, who is leaving.

:mod:`gpupool.scheduling.preemption` says whom a rule lets a pod evict and which victims cost
least; this module applies it inside a cycle (:class:`~gpupool.scheduling.cycle.Cycle`):

* for a pod that quota admits but no node can take, priority preemption inside its queue, then,
  if its queue stays within its guarantee, reclaim from queues that borrowed;
* for a pod its own queue's ceiling or pod limit holds, priority preemption inside the queue,
  freeing at least what gets the queue back under its limit;
* at most one search per queue and pool and ``max_preemptions`` in all per cycle (searching is
  the expensive part, found or not; one per queue keeps a queue whose first pods can never
  preempt from using up the searches of the others);
* a victim's gang goes with it (:mod:`gpupool.scheduling.gang_eviction`);
* a pod chosen as a victim is not offered again in the same cycle, so two preemptors are never
  promised the same room, and the disruptions it takes from PodDisruptionBudgets are not
  counted on again (:mod:`gpupool.scheduling.disruption`).

The node mask a search gets holds the cycle's rules (the pool, nominations); the pod's own
constraints are applied by :func:`~gpupool.scheduling.preemption.choose_victims` from its request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.core.filtering import NodeCheck, mask_of
from gpupool.core.snapshot import BoolArray
from gpupool.policy.quota import Ledger, QueueTables
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.decisions import CycleRequest, EngineOptions
from gpupool.scheduling.gang_eviction import whole_gangs
from gpupool.scheduling.preemption import (
    Rule,
    VictimChoice,
    choose_victims,
    eligible_victims,
    reclaim_budgets,
)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One pod tried in one pool: what a cycle knows of it there (and a victim search needs).

    Attributes:
        workload: The pod.
        queue: Its queue index.
        pool: The pool it is tried in.
        units: Milli-units it would be charged there.
        priority: Its serving priority (queue priority, pod priority).
    """

    workload: Workload
    queue: int
    pool: int
    units: int
    priority: tuple[int, int]


class VictimSearch:
    """Victim searches of one cycle.

    Args:
        options: The engine's bounds.
        request: The cycle's request (snapshot, running pods, ``now``).
        tables: The queue tables.
    """

    def __init__(self, options: EngineOptions, request: CycleRequest, tables: QueueTables) -> None:
        self.request = request
        self.tables = tables
        self.left = options.max_preemptions
        self.searched: set[tuple[int, int]] = set()
        self.evicting: set[str] = set()
        self.disruption = request.disruption

    def may_search(self, queue: int, pool: int) -> bool:
        """Whether ``queue`` may search in ``pool`` now (and count the search if so)."""
        if self.left <= 0 or (queue, pool) in self.searched:
            return False
        self.searched.add((queue, pool))
        self.left -= 1
        return True

    def for_room(
        self, attempt: Attempt, checks: tuple[NodeCheck, ...], ledger: Ledger
    ) -> VictimChoice | None:
        """Victims that make room for a pod nothing fits: priority first, then reclaim."""
        tables, queue, pool = self.tables, attempt.queue, attempt.pool
        mask = mask_of(self.request.snapshot.size, checks)
        choice: VictimChoice | None = None
        if any(p < attempt.workload.priority for p in ledger.priorities[queue]):
            choice = self._choose(Rule.PRIORITY, attempt, mask, ledger)
        if (
            choice is None
            and tables.limited
            and ledger.used[queue, pool] + attempt.units <= tables.guaranteed[queue, pool]
        ):
            budgets = {q: b for q, b in reclaim_budgets(tables, ledger, pool).items() if q != queue}
            if budgets:
                choice = self._choose(Rule.RECLAIM, attempt, mask, ledger, budgets=budgets)
        return self._taken(choice)

    def for_quota(
        self, attempt: Attempt, checks: tuple[NodeCheck, ...], ledger: Ledger
    ) -> VictimChoice | None:
        """Lower-priority pods of the queue whose eviction gets it back under its own limit."""
        tables, queue, pool = self.tables, attempt.queue, attempt.pool
        free_units = int(ledger.used[queue, pool] + attempt.units - tables.ceiling[queue, pool])
        free_pods = int(ledger.pods[queue] + 1 - tables.max_pods[queue])
        if (
            (free_units <= 0 and free_pods <= 0)
            or not any(p < attempt.workload.priority for p in ledger.priorities[queue])
            or not self.may_search(queue, pool)
        ):
            return None
        mask = mask_of(self.request.snapshot.size, checks)
        quota = (max(0, free_units), max(0, free_pods))
        return self._taken(self._choose(Rule.PRIORITY, attempt, mask, ledger, quota))

    def _choose(
        self,
        rule: Rule,
        attempt: Attempt,
        mask: BoolArray,
        ledger: Ledger,
        quota: tuple[int, int] = (0, 0),
        budgets: Mapping[int, int] | None = None,
    ) -> VictimChoice | None:
        now = self.request.now
        candidates = eligible_victims(
            rule,
            attempt.queue,
            attempt.priority,
            attempt.pool,
            self._running(),
            self.tables,
            ledger,
            now,
        )
        return choose_victims(
            self.request.snapshot,
            attempt.workload.pod,
            candidates,
            mask,
            now,
            rule,
            budgets,
            free_units=quota[0],
            free_pods=quota[1],
            disruption=self.disruption,
        )

    def _running(self) -> list[Running]:
        return [
            running for name, running in self.request.running.items() if name not in self.evicting
        ]

    def _taken(self, choice: VictimChoice | None) -> VictimChoice | None:
        if choice is not None:
            request = self.request
            choice = whole_gangs(choice, request.running, request.now, request.gangs)
            self.evicting.update(choice.victims)
            self.disruption = self.disruption.after(choice.victims)
        return choice
