"""Pools and queues as values: the ``spec`` of the GPUPool and GPUQueue CRDs (docs/crds.md).

These are what the API server has already validated in a live cluster and what
:mod:`gpupool.policy.config` parses from a file for the simulator; every rule reads them and
nothing else. Quantities in GPU units are held as integer milli-units (:mod:`.units`).

Two objects exist even when nobody wrote them, so that a cluster without any GPUPool or GPUQueue
behaves exactly as before: the pool :data:`DEFAULT_POOL` (every node no pool selects; accepts
every kind of request, class and queue) and the queue :data:`DEFAULT_QUEUE` (every namespace no
queue lists; priority 0, weight 1, no guarantee, no ceiling below the pool's size).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gpupool.core.model import RequestKind

DEFAULT_POOL = "default"
DEFAULT_QUEUE = "default"
MODEL_LABEL = "gpupool.io/gpu-model"
"""The node label naming the GPU model; a pool's selector may use it on every node, because
the inventory's model is exposed under it (the same name as ``kube.vocabulary.LABEL_GPU_MODEL``).
"""


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
class PoolSpec:
    """One GPUPool.

    Attributes:
        name: Pool name.
        mode: Exclusive, MIG or Shared (Any only for the implicit default pool).
        node_selector: Labels a node must all carry to belong to the pool.
        max_pods_per_gpu: Shared pools: most pods on one GPU.
        memory_overcommit: Shared pools: GPU memory handed out per physical MiB (1.0..4.0).
        compute_overcommit: Shared pools: compute handed out per device (1.0..4.0).
        allowed_classes: ``gpupool.io/class`` values that may enter; empty means every class.
        allowed_queues: Queue names that may enter; empty means every queue.
    """

    name: str
    mode: PoolMode
    node_selector: tuple[tuple[str, str], ...] = ()
    max_pods_per_gpu: int | None = None
    memory_overcommit: float = 1.0
    compute_overcommit: float = 1.0
    allowed_classes: frozenset[str] = field(default_factory=frozenset)
    allowed_queues: frozenset[str] = field(default_factory=frozenset)

    def admits_kind(self, kind: RequestKind) -> bool:
        """Whether the pool's mode accepts a request of this shape (CPU-only pods always)."""
        return kind in _KINDS[self.mode]

    def selects(self, labels: dict[str, str]) -> bool:
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
    """

    name: str
    namespaces: frozenset[str] = field(default_factory=frozenset)
    priority: int = 0
    weight: float = 1.0
    quotas: tuple[QuotaSpec, ...] = ()
    max_concurrent_pods: int | None = None
    reclaimable: bool = True
    min_runtime_before_preemption: float = 0.0

    def quota(self, pool: str) -> QuotaSpec | None:
        """The quota entry for ``pool``, if any."""
        return next((quota for quota in self.quotas if quota.pool == pool), None)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Every pool and queue of a cluster (the implicit defaults are added when compiled).

    Attributes:
        pools: The GPUPools.
        queues: The GPUQueues.
    """

    pools: tuple[PoolSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
