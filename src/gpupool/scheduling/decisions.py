"""What one policy-engine cycle takes and returns: data only, the algorithm is elsewhere.

The simulator, the demo and the live scheduler build a :class:`CycleRequest` from their own state
and carry out the :class:`CycleResult`'s decisions in their own way (bind on a snapshot, or a
Binding and Evictions through the API server); keeping these types apart from the algorithm
(:mod:`gpupool.scheduling.cycle`) lets each caller read what it needs without the rest:

* :class:`Admit`: bind this pod there (the core's :class:`~gpupool.core.decisions.Bind`), charge
  that many milli-units to its queue in that pool;
* :class:`Wait`: the pod stays pending, with its cause as data
  (:class:`~gpupool.scheduling.wait_cause.WaitCause`: a quota limit, a pool that refuses it,
  the pods it waits behind, or the placement's rejection in kube-scheduler's words);
* :class:`Preempt`: evict these victims for that pod, which is nominated to that node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpupool.core.decisions import Bind, Reject
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.quota import Ledger
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.backfill import Reservation
from gpupool.scheduling.claim_placement import GpuEligibility
from gpupool.scheduling.disruption import NO_BUDGETS, DisruptionBudgets
from gpupool.scheduling.preemption import Rule
from gpupool.scheduling.runtime import RuntimeEstimator
from gpupool.scheduling.wait_cause import WaitCause


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Which mechanisms are on, and the per-cycle work bounds.

    The backfill defaults protect large pods under overload: up to 16 blocked pods per pool
    that ask for more than one GPU hold a reservation, which follows its pod, running pods are
    expected to end by their age, and a pod backfills onto a reserved node only if its p90
    runtime ends before the reserved start. Chosen by measurement over EASY backfill
    (:data:`EASY`, the earlier default) in the dynamic simulation: at offered load 1.2 the
    large pods' p95 wait fell from about 15,100 s to 7,100 s, below strict order's 11,100 s,
    at the same GPU utilisation (docs/benchmarks.md section 7, rounds three and five).

    Attributes:
        backfill: EASY backfill behind a blocked pod; off means strict order per pool.
        preemption: Priority preemption and guarantee reclaim.
        max_preemptions: Victim searches per cycle at most (successful or not), and at most
            one per queue and pool.
        backfill_depth: Pods examined behind a blocked head, per pool and cycle.
        reservations_per_pool: Blocked pods per pool that hold a backfill reservation, first
            in serving order (1: EASY backfill; see :mod:`~gpupool.scheduling.backfill`).
        reservations_follow_pods: A reservation whose start passed with its pod still waiting
            is found again for that pod rather than given to the pool's current head. Only
            with ``backfill``: strict order starts nothing behind a blocked pod, so a
            reservation there only held back the pods served before it (strict order's
            utilisation at offered load 1.2 moved from 73.3% to 77.2% when they were made).
        reserve_above_units: Only blocked pods that ask for more than this many milli-units in
            the pool hold a reservation (``None``: every blocked pod may).
        remaining_by_age: A reservation expects each running pod to end after its remaining
            runtime given how long it has run (:meth:`~.runtime.RuntimeEstimator.remaining`),
            not at start plus its mean, clipped at now.
        backfill_quantile: A pod may start on a reserved node only if this quantile of its
            runtime (:meth:`~.runtime.RuntimeEstimator.quantile`) ends before the reserved
            start (``None``: its mean).
        gang_reservations: A gang that cannot start whole blocks its pool as its pods would:
            with backfill, each of its pods (the gang's size counts against
            ``reserve_above_units``) may hold a reservation, so a large gang is not overtaken
            for ever by a stream of small pods; off, the pods behind it start wherever they fit.
    """

    backfill: bool = True
    preemption: bool = True
    max_preemptions: int = 8
    backfill_depth: int = 100
    reservations_per_pool: int = 16
    reservations_follow_pods: bool = True
    reserve_above_units: int | None = 1000
    remaining_by_age: bool = True
    backfill_quantile: float | None = 0.9
    gang_reservations: bool = True

    def __post_init__(self) -> None:
        if self.reservations_per_pool < 1:
            raise ValueError(
                f"reservations_per_pool: must be at least 1 ({self.reservations_per_pool})"
            )
        if self.backfill_quantile is not None and not 0 < self.backfill_quantile < 1:
            raise ValueError(
                f"backfill_quantile: must lie between 0 and 1 ({self.backfill_quantile})"
            )
        if self.reserve_above_units is not None and self.reserve_above_units < 0:
            raise ValueError(
                f"reserve_above_units: must be at least 0 ({self.reserve_above_units})"
            )


EASY = EngineOptions(
    reservations_per_pool=1,
    reservations_follow_pods=False,
    reserve_above_units=None,
    remaining_by_age=False,
    backfill_quantile=None,
)
"""EASY backfill: only the first blocked pod of a pool holds a reservation, found afresh each
cycle. The default before large pods were protected, kept as the baseline they are measured
against (``--backfill easy`` on the control plane, the ``easy`` variant of the matrix)."""

BACKFILL_MODES = {
    "large-pods": EngineOptions(),
    "easy": EASY,
    "strict": EngineOptions(backfill=False),
}
"""The engine's backfill settings by the name the control plane and ``sim dynamic`` take:
``large-pods`` (the default), ``easy``, ``strict`` (nothing starts behind a blocked pod of its
pool)."""


def engine_options(mode: str, **changes: Any) -> EngineOptions:
    """The backfill mode's engine options with the given ones changed (``None``: the mode's).

    Raises:
        ValueError: An unknown mode, or an option out of range (the message names the field).
    """
    base = BACKFILL_MODES.get(mode)
    if base is None:
        modes = ", ".join(BACKFILL_MODES)
        raise ValueError(f"backfill: unknown mode {mode!r}; choose one of {modes}")
    return replace(base, **{name: value for name, value in changes.items() if value is not None})


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
        cause: Why, as data (:mod:`gpupool.scheduling.wait_cause`).
    """

    workload: Workload
    queue: int
    cause: WaitCause

    @property
    def reason(self) -> str:
        """Why, in the engine's words (pods by workload name, times in the cycle's clock)."""
        return self.cause.text()

    @property
    def reject(self) -> Reject | None:
        """The placement's rejection when the pod waits for capacity, else ``None``."""
        return self.cause.reject


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
        violating: The victims whose eviction breaks a PodDisruptionBudget (none could be
            had that break fewer).
    """

    workload: Workload
    queue: int
    pool: int
    node: int
    node_name: str
    victims: tuple[str, ...]
    rule: Rule
    gpu_seconds_lost: float
    violating: tuple[str, ...] = ()


EngineDecision = Admit | Wait | Preempt


@dataclass(frozen=True, slots=True)
class GangSpec:
    """What a gang's PodGroup asks.

    Attributes:
        min_count: How many of its pods must start together (``gang.minCount``).
        evict_alone: Its pods may be disrupted one at a time (``disruptionMode: single``);
            otherwise (``all``, or none given) a pod preemption or reclaim takes goes with its
            whole gang.
        topology_key: A node label (``schedulingConstraints.topology[].key``, for example
            ``topology.kubernetes.io/rack``): every pod of the gang goes to nodes sharing one
            value of it ("" for none).
    """

    min_count: int
    evict_alone: bool = False
    topology_key: str = ""


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
        reservations: The previous cycle's reservations, per pool. A reservation stays with its
            pod while that pod is pending and the reserved start lies ahead (completions only
            move it earlier and backfill never moves it later); then the pool's current blocked
            pods get new ones. One sweep of the running pods per reservation, not per cycle.
        eligibility: Pod name to the GPUs its DRA claim may use (claim pods only): a node
            check wherever the pod is placed, and the GPU choice kept to those GPUs.
        disruption: The PodDisruptionBudgets that cover running pods (victims that break none
            are preferred).
        gangs: Per gang (``namespace/name``), what its PodGroup asks; a pending pod of a gang
            not listed waits for its PodGroup.
    """

    snapshot: ClusterSnapshot
    pending: Sequence[Workload]
    running: Mapping[str, Running]
    ledger: Ledger
    now: float
    nominations: Mapping[str, int] = field(default_factory=dict)
    runtimes: RuntimeEstimator | None = None
    reservations: Mapping[int, tuple[Reservation, ...]] = field(default_factory=dict)
    eligibility: Mapping[str, GpuEligibility] = field(default_factory=dict)
    disruption: DisruptionBudgets = NO_BUDGETS
    gangs: Mapping[str, GangSpec] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle decided.

    Attributes:
        decisions: One per pending pod, in serving order.
        nominations: Outstanding nominations after the cycle (pass them to the next one).
        reservations: Per pool index, the backfill reservations of its blocked pods, if any.
        awaiting: The blocked pods that may hold a reservation but hold none yet
            (:meth:`~gpupool.scheduling.backfill.Reservations.awaiting`).
    """

    decisions: tuple[EngineDecision, ...]
    nominations: dict[str, int]
    reservations: dict[int, tuple[Reservation, ...]]
    awaiting: frozenset[str] = frozenset()
