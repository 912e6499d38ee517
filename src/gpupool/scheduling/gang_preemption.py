"""A gang preempts for all its places at once, or evicts nothing.

A gang that cannot start whole is looked at as one preemptor: its pods are placed one after
another on the cycle's snapshot, and a pod that finds no room gets a victim search
(:class:`~gpupool.scheduling.victims.VictimSearch`, priority inside its queue, then reclaim for
a queue within its guarantee) with the victims of the pods before it already gone. Victims are
widened to their whole gangs as any preemption's are, so one lower-priority gang goes whole and
its freed room serves the preemptor's next pods. Only when at least the gang's ``minCount``
(less the pods already running) have places are the evictions made: each pod that needed victims
is nominated to its node with them, and the gang's other pods wait for them to go. Otherwise the
search is undone (no pod is marked as leaving, no disruption is counted) and the gang waits as
it would have: evicting for half a gang frees GPUs that nothing can use.

One search per queue and pool and cycle, as for single pods. While any pod of the gang holds a
nomination the gang does not search again: it waits for its victims to terminate, and searches
anew once the nomination is given up (its victims gone and the gang still short of room).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from gpupool.core.decisions import Bind
from gpupool.core.filtering import NodeCheck
from gpupool.policy.workload import Workload
from gpupool.scheduling.decisions import EngineDecision, Wait
from gpupool.scheduling.ordering import priority_of
from gpupool.scheduling.preemption import VictimChoice
from gpupool.scheduling.victims import Attempt
from gpupool.scheduling.wait_cause import WaitCause, WaitKind

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpupool.scheduling.cycle import Cycle
    from gpupool.scheduling.gangs import Member


def nominated_wait(cycle: Cycle, gang: str, members: list[Member]) -> WaitCause | None:
    """Why the gang waits while one of its pods is nominated (``None`` when none is)."""
    nominated = cycle.nominations
    node = next((nominated[w.name] for w, _ in members if w.name in nominated), None)
    if node is None:
        return None
    name = cycle.snapshot.node_names[node]
    return WaitCause(
        WaitKind.PREEMPTING, f"gang {gang}: waiting for the pods it preempts to go", node=name
    )


def preempt_for_gang(
    cycle: Cycle,
    gang: str,
    members: list[Member],
    needed: int,
    pool: int,
    units: int,
    domain: tuple[NodeCheck, ...] = (),
) -> dict[str, EngineDecision] | None:
    """The gang's preemptions in ``pool`` when they give it ``needed`` places, else ``None``.

    ``units``: what the whole gang would be charged there (a reclaim must leave its queue
    within its guarantee with all of it); ``domain``: the topology domain it must start in.
    """
    search = cycle.victims
    queue = members[0][1]
    if not cycle.engine.options.preemption or not search.may_search(queue, pool):
        return None
    evicting, disruption = set(search.evicting), search.disruption
    choices = _greedy(cycle, members, pool, units, domain)
    if choices is None or len(_places(cycle, members, pool, choices, domain)) < needed:
        search.evicting, search.disruption = evicting, disruption
        return None
    for choice in sorted(choices, key=lambda c: -c.gpu_seconds_lost):
        fewer = [c for c in choices if c is not choice]
        if len(_places(cycle, members, pool, fewer, domain)) >= needed:
            choices = fewer
    victims = [victim for choice in choices for victim in choice.victims]
    search.evicting = evicting | set(victims)
    search.disruption = disruption.after(victims)
    return _decisions(cycle, gang, members, pool, choices, domain)


def _greedy(
    cycle: Cycle, members: list[Member], pool: int, units: int, domain: tuple[NodeCheck, ...]
) -> list[VictimChoice] | None:
    """Victims for each pod that finds no room, the earlier pods' victims already gone.

    Greedy, so it may evict more than needed; :func:`preempt_for_gang` then drops each choice
    the gang can do without, the costliest first. ``None``: no victims found at all.
    """
    snapshot = cycle.snapshot
    bound: list[str] = []
    restores: list[Callable[[], None]] = []
    choices: list[VictimChoice] = []
    try:
        for workload, queue in members:
            checks = cycle.checks(pool, workload, queue) + domain
            found = _fit(cycle, workload, checks)
            if found is None:
                priority = priority_of(cycle.tables, queue, workload)
                attempt = Attempt(workload, queue, pool, units, priority)
                freed = cycle.checks(pool, workload, queue, freed=True) + domain
                choice = cycle.victims.for_room(attempt, freed, cycle.ledger)
                if choice is None:
                    continue
                leaving = [v for v in choice.victims if v in snapshot.allocations]
                restores.append(snapshot.simulate_removal(leaving))
                choices.append(choice)
                only = np.zeros(snapshot.size, dtype=np.bool_)
                only[choice.node] = True
                found = _fit(cycle, workload, (*checks, ("node its victims free", only)))
            if found is not None:
                snapshot.bind(workload.pod, found.node, found.gpus)
                bound.append(workload.name)
    finally:
        for name in reversed(bound):
            snapshot.release(name)
        for restore in reversed(restores):
            restore()
    return choices or None


def _places(
    cycle: Cycle,
    members: list[Member],
    pool: int,
    choices: list[VictimChoice],
    domain: tuple[NodeCheck, ...],
) -> dict[str, int]:
    """Where the gang's pods go, one after another, once ``choices``' victims are gone."""
    snapshot = cycle.snapshot
    leaving = {v for choice in choices for v in choice.victims if v in snapshot.allocations}
    restore = snapshot.simulate_removal(sorted(leaving))
    places: dict[str, int] = {}
    try:
        for workload, queue in members:
            found = _fit(cycle, workload, cycle.checks(pool, workload, queue) + domain)
            if found is not None:
                snapshot.bind(workload.pod, found.node, found.gpus)
                places[workload.name] = found.node
    finally:
        for name in reversed(places):
            snapshot.release(name)
        restore()
    return places


def _fit(cycle: Cycle, workload: Workload, checks: tuple[NodeCheck, ...]) -> Bind | None:
    found = cycle.engine.scheduler.schedule(cycle.snapshot, workload.pod, checks)
    if not isinstance(found, Bind):
        return None
    eligible = cycle.eligible_gpus(workload, found)
    return eligible if isinstance(eligible, Bind) else None


def _decisions(
    cycle: Cycle,
    gang: str,
    members: list[Member],
    pool: int,
    choices: list[VictimChoice],
    domain: tuple[NodeCheck, ...],
) -> dict[str, EngineDecision]:
    """A nomination with its victims for a pod placed on each choice's node; the rest wait."""
    places = _places(cycle, members, pool, choices, domain)
    owners: dict[str, VictimChoice] = {}
    for choice in choices:
        owner = next(
            (n for n, node in places.items() if node == choice.node and n not in owners),
            next((n for n in places if n not in owners), None),
        )
        if owner is not None:
            owners[owner] = choice
    nodes = sorted({cycle.snapshot.node_names[choice.node] for choice in choices})
    waiting = WaitCause(
        WaitKind.PREEMPTING, f"gang {gang}: preempting on node(s) {', '.join(nodes)} for its pods"
    )
    decisions: dict[str, EngineDecision] = {}
    for workload, queue in members:
        owned = owners.get(workload.name)
        if owned is None:
            decisions[workload.name] = Wait(workload, queue, waiting)
            continue
        node = places[workload.name]
        chosen = owned if node == owned.node else replace(owned, node=node)
        priority = priority_of(cycle.tables, queue, workload)
        units = cycle.engine.policy.pending_units(workload.pod, pool)
        attempt = Attempt(workload, queue, pool, units, priority)
        decisions[workload.name] = cycle.nominate(attempt, chosen)
    return decisions
