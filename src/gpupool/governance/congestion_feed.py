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
    return _party(policy, workload.workload_class, queue)


def _party(policy: ClusterPolicy, workload_class: str, queue: int) -> Party:
    return Party(workload_class or NO_GROUP, policy.tables.queues[queue].name)


def _as_pair(record: Running | None) -> tuple[Workload, int] | None:
    return (record.workload, record.queue) if record is not None else None


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
        # a cycle of thousands of running pods: add up their units per (class, queue index)
        # and make a Party per pair, not per pod; resolve only the pods a cause names
        made: dict[tuple[str, int], Party] = {}

        def known(workload_class: str, queue: int) -> Party:
            found = made.get((workload_class, queue))
            if found is None:
                found = made[workload_class, queue] = _party(policy, workload_class, queue)
            return found

        units: dict[tuple[str, int], int] = {}
        for record in running.values():
            key = (record.workload.workload_class, record.queue)
            units[key] = units.get(key, 0) + record.units
        holding: dict[Party, float] = {}
        for (workload_class, queue), held in units.items():
            who = known(workload_class, queue)
            holding[who] = holding.get(who, 0.0) + held / MILLI_UNITS
        waits = [d for d in result.decisions if isinstance(d, Wait)]
        decided = {d.workload.name: (d.workload, d.queue) for d in result.decisions}
        parties: dict[str, Party] = {}
        for name in {pod for wait in waits for pod in wait.cause.pods}:
            found = decided.get(name) or _as_pair(running.get(name))
            if found is not None:
                parties[name] = known(found[0].workload_class, found[1])
        waiting = [
            (d.workload.name, known(d.workload.workload_class, d.queue), d.cause) for d in waits
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
