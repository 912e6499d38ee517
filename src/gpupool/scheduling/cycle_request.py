"""The one builder of a cycle's request, and what one cycle hands the next.

Every driver of :meth:`~gpupool.scheduling.engine.PolicyEngine.cycle` (the simulated cluster
behind ``gpupool sim dynamic`` and ``gpupool demo``, the live scheduler, the replay) builds its
request here. Written out at each call site, a field added to
:class:`~gpupool.scheduling.decisions.CycleRequest` would be filled by one driver and silently left
at its default by another, and the simulator would stop predicting what the live scheduler does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.quota import Ledger
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.backfill import Reservation
from gpupool.scheduling.claim_placement import GpuEligibility
from gpupool.scheduling.decisions import CycleRequest, CycleResult, GangSpec
from gpupool.scheduling.disruption import NO_BUDGETS, DisruptionBudgets
from gpupool.scheduling.runtime import RuntimeEstimator


@dataclass(frozen=True, slots=True)
class Carried:
    """What a cycle hands the next one: its nominations and its backfill reservations.

    Attributes:
        nominations: Pod name to the node its preemption freed.
        reservations: Per pool index, the reservations of its first blocked pods.
    """

    nominations: Mapping[str, int] = field(default_factory=dict)
    reservations: Mapping[int, tuple[Reservation, ...]] = field(default_factory=dict)

    @classmethod
    def after(cls, result: CycleResult) -> Carried:
        """What ``result`` hands the next cycle."""
        return cls(result.nominations, result.reservations)


def cycle_request(
    snapshot: ClusterSnapshot,
    pending: Sequence[Workload],
    running: Mapping[str, Running],
    ledger: Ledger,
    now: float,
    runtimes: RuntimeEstimator | None = None,
    carried: Carried | None = None,
    *,
    eligibility: Mapping[str, GpuEligibility] | None = None,
    disruption: DisruptionBudgets = NO_BUDGETS,
    gangs: Mapping[str, GangSpec] | None = None,
) -> CycleRequest:
    """The request for one cycle (the fields of :class:`~.decisions.CycleRequest`).

    ``carried`` is what the previous cycle handed on (``None``: a first cycle); ``eligibility``
    the GPUs each claim pod's DRA claim may use and ``disruption`` the PodDisruptionBudgets that
    cover running pods (the live scheduler only: the simulator has no budgets); ``gangs`` what
    each gang's PodGroup asks.
    """
    if carried is None:
        carried = Carried()
    return CycleRequest(
        snapshot=snapshot,
        pending=pending,
        running=running,
        ledger=ledger,
        now=now,
        nominations=carried.nominations,
        runtimes=runtimes,
        reservations=carried.reservations,
        eligibility=eligibility or {},
        disruption=disruption,
        gangs=gangs or {},
    )
