"""Pools and queues as values: the ``spec`` of the GPUPool and GPUQueue CRDs (docs/crds.md).

These are what the API server has already validated in a live cluster and what
:mod:`gpupool.policy.config` parses from a file for the simulator; every rule reads them and
nothing else. Quantities in GPU units are held as integer milli-units (:mod:`.units`).

Two objects exist even when nobody wrote them, so that a cluster without any GPUPool or GPUQueue
behaves as before pools existed: the pool :data:`IMPLICIT_DEFAULT_POOL` (every node no pool
selects; accepts every kind of request, class and queue; :data:`DEFAULT_MAX_PODS_PER_GPU` pods per
GPU) and the queue :data:`DEFAULT_QUEUE` (every namespace no queue serves; priority 0, weight 1, no
guarantee, no ceiling below the pool's size).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpupool.core.model import RequestKind

DEFAULT_POOL = "default"
DEFAULT_QUEUE = "default"
DEFAULT_MAX_PODS_PER_GPU = 4
"""Pods one GPU may hold in a Shared pool that sets no ``maxPodsPerGPU`` (the CRD's default) and
in the implicit default pool. The scheduler, the node agent (which advertises this many devices
per GPU, so a kubelet admits exactly the shares the scheduler binds) and the docs use this one
number: with no GPUPool at all, a scheduler allowing more than the agent advertised bound shares
that the kubelet then refused (``UnexpectedAdmissionError``)."""
DEFAULT_IDLE_GRACE = 1800.0
"""Seconds a pod may stay idle before it is warned when a pool sets no ``idleGrace``."""
DEFAULT_RECLAIM_GRACE = 300.0
"""Seconds between a warning and the reclaim when a pool sets no ``reclaimGrace``."""
DEFAULT_DISRUPTION_BUDGET_WAIT = 300.0
"""Seconds an eviction a PodDisruptionBudget refuses is tried before the pod is deleted, when a
pool sets no ``disruptionBudgetWait``: the default ``reclaimGrace``, the time governance already
gives a warned pod. A budget frees up when a replacement replica becomes ready (seconds to
minutes); one that blocks longer is holding capacity the pool lent, not protecting a rollout."""
DEFAULT_MAX_EVICTION_GRACE = 30
"""The most ``terminationGracePeriodSeconds`` an evicted pod gets when a pool sets no
``maxEvictionGracePeriodSeconds``: the Kubernetes default, so a pod that never asked for more
loses nothing, and a tenant's larger value cannot hold the preemptor back for longer."""
MODEL_LABEL = "gpupool.io/gpu-model"
"""The node label naming the GPU model; a pool's selector may use it on every node, because
the inventory's model is exposed under it (the same name as ``kube.vocabulary.LABEL_GPU_MODEL``).
"""


DEFAULT_RESTART_COST = 600.0
"""GPU seconds a moved pod is taken to lose when its pool names no ``restartCost``: ten minutes
of work since its last checkpoint and of start-up (pulling the image, loading the model)."""


class PoolMode(enum.Enum):
    """How a pool's GPUs are handed out."""

    EXCLUSIVE = "Exclusive"
    """Whole GPUs only."""
    MIG = "MIG"
    """Slices of the node's MIG layout only."""
    SHARED = "Shared"
    """Fractions (compute and/or memory) only."""
    ANY = "Any"
    """The implicit default pool: every kind, as gpupool behaved before pools existed."""


_KINDS: dict[PoolMode, frozenset[RequestKind]] = {
    PoolMode.EXCLUSIVE: frozenset({RequestKind.WHOLE, RequestKind.NONE}),
    PoolMode.MIG: frozenset({RequestKind.MIG, RequestKind.NONE}),
    PoolMode.SHARED: frozenset({RequestKind.SHARE, RequestKind.NONE}),
    PoolMode.ANY: frozenset(RequestKind),
}


@dataclass(frozen=True, slots=True)
class GovernanceSpec:
    """A GPUPool's ``spec.governance``: when its pods are reclaimed (seconds and percent).

    The governance rules take these fields as they are (:class:`gpupool.governance.rules.Limits`
    extends this class with what the rules add), so a setting has one name from the CRD to the
    rule.

    Attributes:
        idle_threshold_percent: ``idleThreshold.gpuUtilPercent``: a pod whose SM utilisation
            stays below this is idle; ``None`` turns idle reclaim off.
        idle_period: ``idleGrace``: how long a pod may stay idle before it is warned.
        grace: ``reclaimGrace``: time between the warning and the reclaim.
        max_share_duration: ``maxShareDuration``: the longest a share may be held; ``None`` for
            no limit.
        exempt_classes: ``exemptClasses``: ``gpupool.io/class`` values never reclaimed (idle or
            duration).
    """

    idle_threshold_percent: float | None = None
    idle_period: float = DEFAULT_IDLE_GRACE
    grace: float = DEFAULT_RECLAIM_GRACE
    max_share_duration: float | None = None
    exempt_classes: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class EvictionSpec:
    """How a pool's pods leave when gpupool evicts them (preemption, reclaim, governance).

    Attributes:
        budget_wait: ``disruptionBudgetWait``: seconds an eviction that a PodDisruptionBudget
            refuses is tried before the pod is deleted directly (as kube-scheduler's preemption
            deletes its victims).
        max_grace: ``maxEvictionGracePeriodSeconds``: the most grace an evicted pod gets (the
            smaller of this and its own ``terminationGracePeriodSeconds``).
    """

    budget_wait: float = DEFAULT_DISRUPTION_BUDGET_WAIT
    max_grace: int = DEFAULT_MAX_EVICTION_GRACE


class ConsolidationMode(enum.Enum):
    """What a pool's consolidation does with a plan that pays."""

    OFF = "Disabled"
    """No plans are made (not ``Off``, which YAML reads as a boolean)."""
    REPORT_ONLY = "ReportOnly"
    """Plans are made, audited and shown; no pod is moved."""
    ON = "Enabled"
    """Plans are carried out: the moved pods are evicted, the waiting pod nominated."""


@dataclass(frozen=True, slots=True)
class ConsolidationSpec:
    """A GPUPool's ``spec.consolidation``: moving running pods so that a waiting pod fits.

    Off by default: a move evicts a running pod, which a platform team turns on knowingly (or
    tries first in ``ReportOnly``). The rule is :mod:`gpupool.governance.consolidation`.

    Attributes:
        mode: ``mode``: Disabled, ReportOnly or Enabled.
        restart_cost: ``restartCost``: seconds of GPU time a moved pod loses (its work since
            the last checkpoint and its start-up), per GPU it holds.
        class_restart_cost: ``restartCostByClass``: the same per ``gpupool.io/class`` (an
            inference server restarts in a minute, a training job from its last checkpoint).
        max_moves_per_hour: ``maxMovesPerHour``: pods the pool moves in any hour at most.
        max_moves_per_workload_per_hour: ``maxMovesPerWorkloadPerHour``: times one workload
            (the controller that owns the pods) is moved in any hour at most.
        min_wait: ``minWait``: how long a pod waits before moves are planned for it (a pod
            that waits seconds for a departure is not worth a restart).
    """

    mode: ConsolidationMode = ConsolidationMode.OFF
    restart_cost: float = DEFAULT_RESTART_COST
    class_restart_cost: tuple[tuple[str, float], ...] = ()
    max_moves_per_hour: int = 32
    max_moves_per_workload_per_hour: int = 1
    min_wait: float = 300.0

    def restart_cost_of(self, workload_class: str) -> float:
        """Seconds a moved pod of ``workload_class`` loses per GPU."""
        return dict(self.class_restart_cost).get(workload_class, self.restart_cost)


@dataclass(frozen=True, slots=True)
class ContentionSpec:
    """A GPUPool's ``spec.contention``: placement under the contention the node agents measure.

    Attributes:
        avoid_above: ``avoidAbove``: no new pod goes to a GPU whose published contention score
            (0..1, ``docs/interference.md``) is at least this; ``None``: contention does not
            steer placement.
    """

    avoid_above: float | None = None


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One GPUPool.

    Attributes:
        name: Pool name.
        mode: Exclusive, MIG or Shared (Any only for the implicit default pool).
        node_selector: Labels a node must all carry to belong to the pool.
        max_pods_per_gpu: Shared pools and the implicit default pool: most pods on one GPU
            (read it through :func:`gpupool.policy.membership.pods_per_gpu`; the default pool's
            ``None`` is no limit).
        memory_overcommit: Shared pools: GPU memory handed out per physical MiB (1.0..4.0).
        compute_overcommit: Shared pools: compute handed out per device (1.0..4.0).
        allowed_classes: ``gpupool.io/class`` values that may enter; empty means every class.
        allowed_queues: Queue names that may enter; empty means every queue.
        governance: Idle and share-duration reclaim.
        eviction: How evicted pods leave.
        consolidation: Moving running pods so that a waiting pod fits.
        contention: Placement under measured contention.
    """

    name: str
    mode: PoolMode
    node_selector: tuple[tuple[str, str], ...] = ()
    max_pods_per_gpu: int | None = None
    memory_overcommit: float = 1.0
    compute_overcommit: float = 1.0
    allowed_classes: frozenset[str] = field(default_factory=frozenset)
    allowed_queues: frozenset[str] = field(default_factory=frozenset)
    governance: GovernanceSpec = field(default_factory=GovernanceSpec)
    eviction: EvictionSpec = field(default_factory=EvictionSpec)
    consolidation: ConsolidationSpec = field(default_factory=ConsolidationSpec)
    contention: ContentionSpec = field(default_factory=ContentionSpec)

    def admits_kind(self, kind: RequestKind) -> bool:
        """Whether the pool's mode accepts a request of this shape (CPU-only pods always)."""
        return kind in _KINDS[self.mode]

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` matches the selector (an empty selector matches all)."""
        return all(labels.get(key) == value for key, value in self.node_selector)


@dataclass(frozen=True, slots=True)
class QuotaSpec:
    """A queue's share of one pool, in milli-units.

    Attributes:
        pool: Pool name.
        guaranteed: Always available to the queue; others may borrow it only until reclaimed.
        ceiling: Most the queue may hold in the pool; ``None`` means the pool's size.
    """

    pool: str
    guaranteed: int = 0
    ceiling: int | None = None


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One GPUQueue (a tenant or team).

    Attributes:
        name: Queue name.
        namespaces: Namespaces whose pods belong to the queue.
        priority: Higher is served first and may preempt lower (0..1,000,000).
        weight: Fair-share weight among queues of equal priority (> 0).
        quotas: Per-pool guarantee and ceiling.
        max_concurrent_pods: Most running pods of the queue; ``None`` for no limit.
        reclaimable: Whether what it borrows above its guarantee may be reclaimed.
        min_runtime_before_preemption: Seconds a pod runs before it may be preempted.
        max_share_duration: The longest a pod of the queue holds a share (the shorter of this
            and its pool's applies); ``None`` for no limit.
        allowed_classes: ``gpupool.io/class`` values the queue's pods may use; empty means
            every class (:func:`gpupool.policy.membership.pod_class`).
    """

    name: str
    namespaces: frozenset[str] = field(default_factory=frozenset)
    priority: int = 0
    weight: float = 1.0
    quotas: tuple[QuotaSpec, ...] = ()
    max_concurrent_pods: int | None = None
    reclaimable: bool = True
    min_runtime_before_preemption: float = 0.0
    max_share_duration: float | None = None
    allowed_classes: frozenset[str] = field(default_factory=frozenset)

    def allows_class(self, workload_class: str) -> bool:
        """Whether a pod of this queue may use ``workload_class`` (no class: always)."""
        return (
            not workload_class
            or not self.allowed_classes
            or (workload_class in self.allowed_classes)
        )

    def quota(self, pool: str) -> QuotaSpec | None:
        """The quota entry for ``pool``, if any."""
        return next((quota for quota in self.quotas if quota.pool == pool), None)


IMPLICIT_DEFAULT_POOL = PoolSpec(
    name=DEFAULT_POOL, mode=PoolMode.ANY, max_pods_per_gpu=DEFAULT_MAX_PODS_PER_GPU
)
"""The pool of every node no GPUPool selects: every kind, class and queue, and the default
number of pods per GPU (the agent advertises the same number on such a node)."""


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Every pool and queue of a cluster (the implicit defaults are added when compiled).

    Attributes:
        pools: The GPUPools.
        queues: The GPUQueues.
        default_pool_max_pods_per_gpu: Pods per GPU on the nodes no pool selects. ``None`` is
            no limit, which only the FGD trace protocol uses (its published placements know no
            per-GPU pod limit, and ``gpupool bench placement`` must reproduce them); every
            cluster, the demo and ``sim dynamic`` keep the default, the number the node agent
            advertises.
    """

    pools: tuple[PoolSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    default_pool_max_pods_per_gpu: int | None = DEFAULT_MAX_PODS_PER_GPU

    def default_pool(self) -> PoolSpec:
        """The implicit default pool with this config's pods-per-GPU limit."""
        if self.default_pool_max_pods_per_gpu == IMPLICIT_DEFAULT_POOL.max_pods_per_gpu:
            return IMPLICIT_DEFAULT_POOL
        return replace(IMPLICIT_DEFAULT_POOL, max_pods_per_gpu=self.default_pool_max_pods_per_gpu)
