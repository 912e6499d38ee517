"""Backfill's placement rule: a pod placed behind a pool's blocked pods must not delay them.

Its own module because it is the one place a cycle's placement meets the pool's reservations
(:mod:`gpupool.scheduling.backfill` finds and keeps those): given where the placement scheduler
would put a pod, it keeps that node, moves the pod to one no reservation it could delay holds,
or says which reservation it would delay. The cycle asks it for every pod placed in a pool that
has blocked pods or reservations binding it.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from gpupool.core.decisions import Bind
from gpupool.core.filtering import NodeCheck
from gpupool.core.model import RequestKind
from gpupool.policy.workload import Workload
from gpupool.scheduling.backfill import Blocked, delayed_nodes
from gpupool.scheduling.wait_cause import WaitCause, WaitKind

if TYPE_CHECKING:
    from gpupool.scheduling.cycle import Cycle


def clear_of_reservations(
    cycle: Cycle,
    workload: Workload,
    queue: int,
    pool: int,
    heads: list[Blocked],
    decision: Bind,
    checks: tuple[NodeCheck, ...],
) -> Bind | WaitCause:
    """``decision`` if it cannot delay a reservation of the pool, else a placement away.

    A pod's own reservation does not hold it back (else a holder tried behind another
    blocked pod could not start on the node kept for it), nor do its gang's; nor does any on
    a node nominated to it or its gang: preemption freed that room for it, and a reservation
    kept there from before would leave the preemptor waiting for ever for room it emptied.
    """
    nominee = cycle.nominees.get(decision.node)
    if nominee is not None and (
        cycle.nominations.get(workload.name) == decision.node
        or (workload.gang and nominee.gang == workload.gang)
    ):
        return decision
    held = cycle.reservations.of(pool, heads, partial(cycle.room_checks, pool))
    pending, gang = cycle.reservations.pending, workload.gang
    reservations = [
        r
        for r in held
        if r.pod != workload.name and not (gang and pending[r.pod].workload.gang == gang)
    ]
    if not reservations:
        return decision
    name = cycle.tables.queues[queue].name
    runtime = cycle.runtimes.bound(workload, name, cycle.engine.options.backfill_quantile)
    delayed = delayed_nodes(reservations, cycle.request.now, runtime)
    if workload.pod.kind is RequestKind.NONE and decision.node in delayed:
        # it takes no GPU: it delays a holder only where it leaves the holder no CPU,
        # memory or pod slot at the reserved start
        delayed -= cycle.reservations.spared(
            [r for r in reservations if r.node in delayed], workload.pod
        )
    if decision.node not in delayed:
        return decision
    snapshot = cycle.snapshot
    away = np.ones(snapshot.size, dtype=np.bool_)
    away[list(delayed)] = False
    holders = ", ".join(sorted(r.pod for r in reservations if r.node in delayed))
    retry = cycle.engine.scheduler.schedule(
        snapshot, workload.pod, (*checks, (f"node(s) reserved for {holders}", away))
    )
    if isinstance(retry, Bind):
        return retry
    reservation = min(
        (r for r in reservations if r.node == decision.node), key=lambda r: r.start_at
    )
    return WaitCause(
        WaitKind.RESERVATION,
        pods=(reservation.pod,),
        node=snapshot.node_names[reservation.node],
        at=reservation.start_at,
    )
