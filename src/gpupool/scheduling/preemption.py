"""Preemption and reclaim: who may be evicted for whom, and which victims cost least.

Two rules, tried in this order for a pod that quota admits but no node can take now:

* **priority**: a pod may evict pods of its own queue with a strictly lower priority, to make
  room on a node and, when its queue's ceiling or pod limit holds it, to get back under it
  (otherwise a queue at its ceiling could never run its urgent pods);
* **reclaim**: a queue that stays within its guarantee with the pod may take back what other
  queues borrowed above theirs: victims come from reclaimable queues holding more than their
  guarantee in the pool, never more from one queue than it borrowed (reclaim never pushes a
  queue under its own guarantee), whatever their priorities. Borrowed capacity is lent, not
  owned: if the borrower's pod priorities (which its tenants choose) or its queue priority
  could shield it, a queue borrowing with high-priority pods would keep another queue under
  its guarantee for as long as it liked.

Under both, a pod younger than its queue's ``minRuntimeBeforePreemption`` is protected, and
inside a queue no pod is ever evicted for a pod of lower or equal priority. Among the nodes
where evicting eligible pods makes room (and that the pod's node selector, affinity,
tolerations and models allow), the choice breaks the fewest PodDisruptionBudgets, then loses
the least GPU time: per node, victims no budget protects are taken first, each group cheapest
first (GPU units times how long they have run, so young and small pods go first), then any
victim the pod can do without is put back, those a budget protects first; the node whose victims
break the fewest budgets wins, then the least total loss (fewest victims, then node order, on
ties). A budget is best effort, as in kube-scheduler's preemption: when only victims it protects
make room, they are chosen, and counted (:mod:`gpupool.scheduling.disruption`). The caller
nominates the pod to that node so the freed room is not taken by others while the victims
terminate.

The what-ifs release and re-bind pods on the snapshot and leave it as it was (only the nodes'
generation counters move, which makes policies refresh those rows once).
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from gpupool.core.filtering import admissible, fits_on_node
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import Allocation, BoolArray, ClusterSnapshot
from gpupool.policy.quota import Ledger, QueueTables
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.workload import Running
from gpupool.scheduling.disruption import NO_BUDGETS, DisruptionBudgets
from gpupool.scheduling.ordering import priority_of


class Rule(enum.Enum):
    """Why a pod was preempted (or moved: consolidation evicts by the same door)."""

    PRIORITY = "priority"
    RECLAIM = "reclaim"
    CONSOLIDATION = "consolidation"
    """Not an engine rule: :mod:`gpupool.governance.consolidation` moves pods so that a waiting
    pod fits, and the live controller carries its plan out as a preemption."""


@dataclass(frozen=True, slots=True)
class VictimChoice:
    """The cheapest way found to make room for a pod.

    Attributes:
        node: Node row where the pod will go.
        victims: Names of the pods to evict.
        gpu_seconds_lost: GPU-unit seconds of work the victims lose.
        rule: The rule that allows it.
        violating: The victims whose eviction breaks a PodDisruptionBudget.
    """

    node: int
    victims: tuple[str, ...]
    gpu_seconds_lost: float
    rule: Rule
    violating: tuple[str, ...] = ()


def is_protected(running: Running, tables: QueueTables, now: float) -> bool:
    """Whether a pod has run less than its queue's ``minRuntimeBeforePreemption``."""
    return now - running.started_at < float(tables.min_runtime[running.queue])


def eligible_victims(
    rule: Rule,
    queue: int,
    priority: tuple[int, int],
    pool: int,
    running: Iterable[Running],
    tables: QueueTables,
    ledger: Ledger,
    now: float,
) -> list[Running]:
    """The running pods ``rule`` lets a pod of ``queue`` and ``priority`` evict in ``pool``."""
    victims = []
    for candidate in running:
        if candidate.pool != pool or is_protected(candidate, tables, now):
            continue
        if rule is Rule.PRIORITY:
            theirs = priority_of(tables, candidate.queue, candidate.workload)
            if candidate.queue == queue and theirs < priority:
                victims.append(candidate)
        elif (
            candidate.queue != queue
            and tables.reclaimable[candidate.queue]
            and ledger.used[candidate.queue, pool] > tables.guaranteed[candidate.queue, pool]
        ):
            victims.append(candidate)
    return victims


def reclaim_budgets(tables: QueueTables, ledger: Ledger, pool: int) -> Mapping[int, int]:
    """Per queue, how much it borrowed above its guarantee in ``pool`` (all that reclaim takes)."""
    borrowed = ledger.used[:, pool] - tables.guaranteed[:, pool]
    return {q: int(b) for q, b in enumerate(borrowed) if b > 0}


def lost_gpu_seconds(running: Running, now: float) -> float:
    """GPU-unit seconds a victim's eviction throws away."""
    return running.units / MILLI_UNITS * max(0.0, now - running.started_at)


def choose_victims(
    snapshot: ClusterSnapshot,
    pod: PodSpec,
    candidates: Iterable[Running],
    node_mask: BoolArray,
    now: float,
    rule: Rule,
    budgets: Mapping[int, int] | None = None,
    max_nodes: int = 8,
    free_units: int = 0,
    free_pods: int = 0,
    disruption: DisruptionBudgets = NO_BUDGETS,
) -> VictimChoice | None:
    """The node and victims that make room for ``pod``: fewest budgets broken, least GPU time lost.

    Args:
        snapshot: The cluster; restored before returning.
        pod: The preemptor's request.
        candidates: Pods the rule allows to evict.
        node_mask: Nodes the caller's rules allow (its pool, minus nodes nominated to others);
            the pod's own constraints (:func:`~gpupool.core.filtering.admissible`) are
            applied here.
        now: Seconds.
        rule: The rule, recorded in the choice.
        budgets: Most milli-units that may be taken per queue (reclaim); ``None``: no bound.
        max_nodes: Nodes tried at most, those whose eligible pods lose least in total first
            (a bound on the what-ifs of one search; the choice is the best among them).
        free_units: Milli-units the victims must free besides making room (a pod held by its
            own queue's ceiling evicts lower-priority pods of the queue to get under it).
        free_pods: Pods the victims must number at least (the queue's pod limit).
        disruption: The PodDisruptionBudgets that cover the candidates.
    """
    by_node: defaultdict[int, list[Running]] = defaultdict(list)
    # nodes the pod could never use (its selector, taints, model...) are not tried: ranked
    # first, they could use up max_nodes and leave the node it can use unsearched
    static_ok = (snapshot.gpu_count >= pod.gpu_count) & admissible(snapshot, pod)
    for candidate in candidates:
        if node_mask[candidate.node] and static_ok[candidate.node]:
            by_node[candidate.node].append(candidate)
    best: tuple[int, float, int, int, tuple[str, ...]] | None = None
    best_violating: tuple[str, ...] = ()
    protected = {n: _protected(by_node[n], now, disruption) for n in by_node}
    # nodes with a victim no budget protects first, then those whose eligible pods together
    # lose the least; at most max_nodes
    ranked = sorted(
        by_node,
        key=lambda n: (
            len(protected[n]) == len(by_node[n]),
            sum(lost_gpu_seconds(r, now) for r in by_node[n]),
            n,
        ),
    )
    for node in ranked[:max_nodes]:
        found = _victims_on_node(
            snapshot,
            pod,
            node,
            (by_node[node], protected[node]),
            now,
            budgets,
            (free_units, free_pods),
        )
        if found is None:
            continue
        lost, victims = found
        violating = disruption.violating(_cheapest_first(victims, now))
        key = (len(violating), lost, len(victims), node, tuple(r.workload.name for r in victims))
        if best is None or key < best:
            best, best_violating = key, violating
    if best is None:
        return None
    return VictimChoice(
        node=best[3], victims=best[4], gpu_seconds_lost=best[1], rule=rule, violating=best_violating
    )


def _cost(running: Running, now: float) -> tuple[float, float, str]:
    """The order victims are taken in: least GPU time lost, then youngest, then by name."""
    return lost_gpu_seconds(running, now), -running.started_at, running.workload.name


def _cheapest_first(victims: Iterable[Running], now: float) -> list[str]:
    """Victim names, cheapest first (the order budgets are counted in, as they are taken)."""
    return [r.workload.name for r in sorted(victims, key=lambda r: _cost(r, now))]


def _protected(candidates: list[Running], now: float, disruption: DisruptionBudgets) -> set[str]:
    """The candidates of one node whose eviction would break a budget.

    Counted as if all were taken, cheapest first: kube-scheduler splits a node's victims into
    violating and not the same way.
    """
    return set(disruption.violating(_cheapest_first(candidates, now)))


def _victims_on_node(
    snapshot: ClusterSnapshot,
    pod: PodSpec,
    node: int,
    candidates: tuple[list[Running], set[str]],
    now: float,
    budgets: Mapping[int, int] | None,
    quota: tuple[int, int],
) -> tuple[float, tuple[Running, ...]] | None:
    """The victims on ``node`` that make room losing least; ``None`` if none do.

    ``candidates`` are the node's eligible pods and the names of those a budget protects:
    unprotected pods are taken first and protected ones put back first.
    """
    eligible, protected = candidates

    def enough(freed: list[Running]) -> bool:
        return (
            sum(r.units for r in freed) >= quota[0]
            and len(freed) >= quota[1]
            and fits_on_node(snapshot, pod, node)
        )

    order = sorted(
        eligible,
        key=lambda r: (r.workload.name in protected, *_cost(r, now)),
    )
    removed: list[tuple[Running, list[Allocation]]] = []
    spent: Counter[int] = Counter()
    try:
        fits = False
        for candidate in order:
            if budgets is not None and spent[candidate.queue] + candidate.units > budgets.get(
                candidate.queue, 0
            ):
                continue
            removed.append((candidate, _release(snapshot, candidate)))
            spent[candidate.queue] += candidate.units
            if enough([r for r, _ in removed]):
                fits = True
                break
        if not fits:
            return None
        needed: list[Running] = []
        # put back whatever the pod can do without, protected first, each costliest first
        put_back = sorted(
            removed,
            key=lambda item: (
                item[0].workload.name not in protected,
                -lost_gpu_seconds(item[0], now),
            ),
        )
        for item in put_back:
            candidate = item[0]
            _restore(snapshot, item[1])
            others = [r for r, _ in removed if r is not candidate]
            if enough(others):
                removed.remove(item)
                continue
            _release(snapshot, candidate)
            needed.append(candidate)
        lost = float(np.sum([lost_gpu_seconds(r, now) for r in needed]))
        return lost, tuple(sorted(needed, key=lambda r: r.workload.name))
    finally:
        for _, allocations in reversed(removed):
            _restore(snapshot, allocations)


def _release(snapshot: ClusterSnapshot, victim: Running) -> list[Allocation]:
    """Release what ``victim``'s eviction frees: the pod and its companions still held."""
    freed = [snapshot.release(victim.workload.name)]
    freed += [snapshot.release(n) for n in victim.companions if n in snapshot.allocations]
    return freed


def _restore(snapshot: ClusterSnapshot, allocations: list[Allocation]) -> None:
    for allocation in reversed(allocations):
        snapshot.bind(allocation.pod, allocation.node, allocation.gpus, running=True)
