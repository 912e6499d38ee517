"""Which nodes form which pool, and which pools a pod may enter.

Membership is decided once per node inventory by :func:`gpupool.policy.membership.node_pool`,
the rule every process uses: a node belongs to the one pool whose selector it matches, to the
implicit pool ``default`` (mode Any) when none does, and to **none** when two or more do. Such a
node is listed in :attr:`PoolLayout.conflicts` (the live controller reports it as a condition on
each of those pools) and takes no GPU pods until the selectors are fixed: guessing a winner could
let shared workloads onto a node an operator meant to be exclusive; refusing both cannot.

Every member node's GPUs are limited to :func:`gpupool.policy.membership.pods_per_gpu` pods (the
number of devices the node agent advertises per GPU, so the kubelet admits every pod bound), and
a Shared pool's overcommit is set on them, before anything is bound.

Routing a pod that names no pool: the pools whose mode accepts its request shape (Exclusive:
whole GPUs, Shared: fractions, MIG: slices; CPU-only pods go anywhere), whose allowed classes and
queues admit it, ordered by its class (training and critical serving prefer Exclusive, dev and
inference prefer Shared), then by name, the default pool last. The engine tries them in that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpupool.core.contention_rules import avoid_contention
from gpupool.core.filtering import NodeCheck
from gpupool.core.model import NodeSpec, RequestKind
from gpupool.core.snapshot import UNLIMITED_PODS_PER_GPU, BoolArray, ClusterSnapshot, IntArray
from gpupool.policy.membership import gpu_sharing, node_labels, node_pool, pods_per_gpu
from gpupool.policy.spec import IMPLICIT_DEFAULT_POOL, PoolMode, PoolSpec
from gpupool.policy.units import node_milli_units
from gpupool.policy.workload import Workload

EXCLUSIVE_CLASSES = frozenset({"training", "serving", "critical", "serving-critical"})
"""Classes routed to Exclusive pools first when a pod names no pool."""
SHARED_CLASSES = frozenset({"dev", "inference", "notebook", "light-inference"})
"""Classes routed to Shared pools first when a pod names no pool."""
NO_POOL = -1
"""``node_pool`` value of a node that two pools select."""

_KIND_MODES: dict[RequestKind, tuple[PoolMode, ...]] = {
    RequestKind.WHOLE: (PoolMode.EXCLUSIVE,),
    RequestKind.SHARE: (PoolMode.SHARED,),
    RequestKind.MIG: (PoolMode.MIG,),
    RequestKind.NONE: (PoolMode.SHARED, PoolMode.EXCLUSIVE, PoolMode.MIG),
}


@dataclass(frozen=True, slots=True)
class PoolLayout:
    """The pools of one node inventory.

    Attributes:
        pools: The configured pools, then the implicit default pool (always last).
        node_pool: Pool index per node; :data:`NO_POOL` for nodes two pools select.
        masks: Per pool, the member nodes (read-only).
        conflicts: Node name and the pools that all select it.
        capacity: Per pool, GPU capacity in milli-units: its whole GPUs and its MIG slices
            (:func:`~gpupool.policy.units.node_milli_units`).
        reference_memory: Per pool, the smallest known GPU memory in MiB (0 if unknown): a
            pending share's memory fraction is taken against it.
        node_count: Per pool, its member nodes; routing skips empty pools.
        pods_per_gpu: Per node, the most pods one of its GPUs may hold (0: in no pool).
    """

    pools: tuple[PoolSpec, ...]
    node_pool: IntArray
    masks: tuple[BoolArray, ...]
    conflicts: tuple[tuple[str, tuple[str, ...]], ...]
    capacity: IntArray
    reference_memory: IntArray
    node_count: IntArray
    pods_per_gpu: IntArray

    @classmethod
    def build(
        cls,
        pools: Sequence[PoolSpec],
        nodes: Sequence[NodeSpec],
        default_pool: PoolSpec = IMPLICIT_DEFAULT_POOL,
    ) -> PoolLayout:
        """Assign every node to at most one pool.

        Args:
            pools: The GPUPools.
            nodes: The node inventory.
            default_pool: The implicit pool of the nodes no pool selects (its pods-per-GPU limit
                comes from :meth:`~gpupool.policy.spec.PolicyConfig.default_pool`).
        """
        every = (*pools, default_pool)
        index = {pool.name: p for p, pool in enumerate(every)}
        node_pool_index = np.full(len(nodes), NO_POOL, dtype=np.int64)
        slots = np.zeros(len(nodes), dtype=np.int64)
        conflicts: list[tuple[str, tuple[str, ...]]] = []
        for i, node in enumerate(nodes):
            found = node_pool(pools, node_labels(node))
            if found.pool is None:
                conflicts.append((node.name, found.contested))
                continue
            p = index[found.pool.name]
            node_pool_index[i] = p
            slots[i] = pods_per_gpu(every[p])
        masks = []
        for p in range(len(every)):
            mask = node_pool_index == p
            mask.setflags(write=False)
            masks.append(mask)
        node_milli = np.array([node_milli_units(node) for node in nodes], dtype=np.int64)
        memory = np.array([node.gpu_memory_mib for node in nodes], dtype=np.int64)
        capacity = np.array([int(node_milli[m].sum()) for m in masks], dtype=np.int64)
        reference = np.array(
            [int(memory[m & (memory > 0)].min()) if (m & (memory > 0)).any() else 0 for m in masks],
            dtype=np.int64,
        )
        counts = np.array([int(m.sum()) for m in masks], dtype=np.int64)
        return cls(
            every,
            node_pool_index,
            tuple(masks),
            tuple(conflicts),
            capacity,
            reference,
            counts,
            slots,
        )

    def index(self, name: str) -> int | None:
        """Index of the pool called ``name``."""
        return next((p for p, pool in enumerate(self.pools) if pool.name == name), None)

    def apply_sharing(self, snapshot: ClusterSnapshot) -> None:
        """Give every pool's nodes their pods-per-GPU limit, and Shared pools their overcommit.

        Called on a fresh snapshot, before any bind. A node two pools select is left as it is:
        no pool's mask contains it, so no GPU pod is placed there. A pool that limits nothing
        (the FGD protocol's default pool) is left as it is too, so its filters keep their
        fastest path. A pool that avoids contention has its contended GPUs masked
        (:func:`~gpupool.core.contention_rules.avoid_contention`).
        """
        for p, pool in enumerate(self.pools):
            members = np.flatnonzero(self.masks[p])
            if not len(members):
                continue
            if pool.contention.avoid_above is not None:
                avoid_contention(snapshot, members, pool.contention.avoid_above)
            sharing = gpu_sharing(pool)
            overcommit = (sharing.compute_overcommit, sharing.memory_overcommit)
            if sharing.pods_per_gpu == UNLIMITED_PODS_PER_GPU and overcommit == (1.0, 1.0):
                continue
            snapshot.configure_gpu_sharing(members, sharing.pods_per_gpu, *overcommit)

    def node_checks(self, pool: int) -> tuple[NodeCheck, ...]:
        """The filter check that keeps a pod inside ``pool`` (none when the pool is every node)."""
        mask = self.masks[pool]
        if mask.all():
            return ()
        return ((f"node(s) not in pool {self.pools[pool].name}", mask),)

    def route(self, workload: Workload, queue: str) -> tuple[int, ...] | str:
        """Pools to try for ``workload`` in order, or why none may take it.

        Args:
            workload: The pod.
            queue: Its queue's name (pools may admit only some queues).
        """
        kind = workload.pod.kind
        if workload.pool:
            p = self.index(workload.pool)
            if p is None:
                return f"pool {workload.pool} does not exist"
            why = self._refusal(p, kind, workload.workload_class, queue)
            return why if why else (p,)
        preferred = _class_mode(workload.workload_class)
        modes = _KIND_MODES[kind]
        candidates = [
            p
            for p, pool in enumerate(self.pools)
            if pool.mode in modes
            and self.node_count[p]
            and not self._refusal(p, kind, workload.workload_class, queue)
        ]
        candidates.sort(
            key=lambda p: (self.pools[p].mode is not preferred, modes.index(self.pools[p].mode))
        )
        default = len(self.pools) - 1
        if self.node_count[default] and not self._refusal(
            default, kind, workload.workload_class, queue
        ):
            candidates.append(default)
        if not candidates:
            return (
                f"no pool admits a {kind.value} request of class "
                f"{workload.workload_class or '(none)'} from queue {queue}"
            )
        return tuple(candidates)

    def empty_reason(self, pool: int) -> str:
        """Why a pool has no nodes, naming the nodes that more than one pool selects."""
        name = self.pools[pool].name
        contested = [node for node, pools in self.conflicts if name in pools]
        if contested:
            return (
                f"pool {name} has no nodes: {', '.join(contested)} selected by more than one "
                "pool, so by none"
            )
        return f"pool {name} has no nodes"

    def _refusal(self, p: int, kind: RequestKind, workload_class: str, queue: str) -> str:
        pool = self.pools[p]
        if not pool.admits_kind(kind):
            return f"pool {pool.name} ({pool.mode.value}) does not take {kind.value} requests"
        if pool.allowed_classes and workload_class not in pool.allowed_classes:
            return f"pool {pool.name} does not admit class {workload_class or '(none)'}"
        if pool.allowed_queues and queue not in pool.allowed_queues:
            return f"pool {pool.name} does not admit queue {queue}"
        return ""


def _class_mode(workload_class: str) -> PoolMode | None:
    if workload_class in EXCLUSIVE_CLASSES:
        return PoolMode.EXCLUSIVE
    if workload_class in SHARED_CLASSES:
        return PoolMode.SHARED
    return None
