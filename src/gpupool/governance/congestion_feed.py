"""Feeding the congestion ledger from an engine cycle: what both drivers call.

The simulated cluster and the live scheduler carry out the same
:class:`~gpupool.scheduling.decisions.CycleResult`; what the congestion view needs from it is the
same too (each waiting pod's class, queue and cause, who every named pod is, what each class
holds), so it is read here once rather than by each driver. Queue indexes are turned into names
with the policy the cycle ran under (a policy change renumbers them).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gpupool.governance.accounting import NO_GROUP
from gpupool.governance.congestion import Party
from gpupool.governance.congestion_ledger import CongestionLedger
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.decisions import CycleResult, Preempt, Wait


def party(policy: ClusterPolicy, workload: Workload, queue: int) -> Party:
    """The class and queue a pod counts in (a pod with no class counts in ``(none)``)."""
    return Party(workload.workload_class or NO_GROUP, policy.tables.queues[queue].name)


class CongestionFeed:
    """One driver's congestion ledger, fed with its cycles and preemptions."""

    def __init__(self, ledger: CongestionLedger | None = None) -> None:
        self.ledger = ledger or CongestionLedger()

    def cycle(
        self,
        policy: ClusterPolicy,
        now: float,
        result: CycleResult,
        running: Mapping[str, Running],
        still_pending: Collection[str] | None = None,
    ) -> None:
        """A cycle was carried out at ``now``; ``running``: the pods that run after it.

        ``still_pending``: every pod pending now, when the cycle decided for only some
        (:meth:`~gpupool.governance.congestion_ledger.CongestionLedger.cycle`).
        """
        parties = {name: party(policy, r.workload, r.queue) for name, r in running.items()}
        holding: dict[Party, float] = {}
        for name, record in running.items():
            who = parties[name]
            holding[who] = holding.get(who, 0.0) + record.units / MILLI_UNITS
        for decision in result.decisions:
            parties[decision.workload.name] = party(policy, decision.workload, decision.queue)
        waiting = [
            (d.workload.name, parties[d.workload.name], d.cause)
            for d in result.decisions
            if isinstance(d, Wait)
        ]
        self.ledger.cycle(now, waiting, parties, holding, still_pending)

    def evicted(
        self, policy: ClusterPolicy, now: float, decision: Preempt, victims: Mapping[str, Running]
    ) -> None:
        """``decision``'s victims (as they ran) were evicted at ``now``: their run time is lost."""
        self.ledger.evicted(
            now,
            party(policy, decision.workload, decision.queue),
            [
                (party(policy, record.workload, record.queue), max(now - record.started_at, 0.0))
                for record in victims.values()
            ],
        )
