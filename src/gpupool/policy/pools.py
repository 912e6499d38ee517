"""Which nodes form which pool, and which pools a pod may enter.

Membership is decided once per node inventory: a node belongs to the one pool whose selector it
matches. Two rules close the gaps a selector leaves:

* a node no pool selects belongs to the implicit pool ``default`` (mode Any), so a cluster with
  no GPUPool objects behaves exactly as before pools existed;
* a node that two or more pools select belongs to **none**: it is listed in
  :attr:`PoolLayout.conflicts` (the live controller reports it as a condition on each of those
  pools) and takes no GPU pods until the selectors are fixed. Guessing a winner could let shared
  workloads onto a node an operator meant to be exclusive; refusing both cannot.

Routing a pod that names no pool: the pools whose mode accepts its request shape (Exclusive:
whole GPUs, Shared: fractions, MIG: slices; CPU-only pods go anywhere), whose allowed classes and
queues admit it, ordered by its class (training and critical serving prefer Exclusive, dev and
inference prefer Shared), then by name, the default pool last. The engine tries them in that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpupool.core.filtering import NodeCheck
from gpupool.core.model import NodeSpec, RequestKind
from gpupool.core.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.policy.spec import DEFAULT_POOL, MODEL_LABEL, PoolMode, PoolSpec
from gpupool.policy.units import MILLI_UNITS
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


def node_labels(node: NodeSpec) -> dict[str, str]:
    """A node's labels plus the GPU model under :data:`MODEL_LABEL`."""
    labels = dict(node.labels)
    if node.gpu_model:
        labels.setdefault(MODEL_LABEL, node.gpu_model)
    return labels


@dataclass(frozen=True, slots=True)
class PoolLayout:
    """The pools of one node inventory.

    Attributes:
        pools: The configured pools, then the implicit default pool (always last).
        node_pool: Pool index per node; :data:`NO_POOL` for nodes two pools select.
        masks: Per pool, the member nodes (read-only).
        conflicts: Node name and the pools that all select it.
        capacity: Per pool, GPU capacity in milli-units.
        reference_memory: Per pool, the smallest known GPU memory in MiB (0 if unknown): a
            pending share's memory fraction is taken against it.
        node_count: Per pool, its member nodes; routing skips empty pools.
    """

    pools: tuple[PoolSpec, ...]
    node_pool: IntArray
    masks: tuple[BoolArray, ...]
    conflicts: tuple[tuple[str, tuple[str, ...]], ...]
    capacity: IntArray
    reference_memory: IntArray
    node_count: IntArray

    @classmethod
    def build(cls, pools: Sequence[PoolSpec], nodes: Sequence[NodeSpec]) -> PoolLayout:
        """Assign every node to at most one pool."""
        every = (*pools, PoolSpec(name=DEFAULT_POOL, mode=PoolMode.ANY))
        default_index = len(every) - 1
        node_pool = np.full(len(nodes), default_index, dtype=np.int64)
        conflicts: list[tuple[str, tuple[str, ...]]] = []
        for i, node in enumerate(nodes):
            labels = node_labels(node)
            chosen = [p for p, pool in enumerate(pools) if pool.selects(labels)]
            if len(chosen) == 1:
                node_pool[i] = chosen[0]
            elif chosen:
                node_pool[i] = NO_POOL
                conflicts.append((node.name, tuple(pools[p].name for p in chosen)))
        masks = []
        for p in range(len(every)):
            mask = node_pool == p
            mask.setflags(write=False)
            masks.append(mask)
        gpus = np.array([node.gpu_count for node in nodes], dtype=np.int64)
        memory = np.array([node.gpu_memory_mib for node in nodes], dtype=np.int64)
        capacity = np.array([int(gpus[m].sum()) * MILLI_UNITS for m in masks], dtype=np.int64)
        reference = np.array(
            [int(memory[m & (memory > 0)].min()) if (m & (memory > 0)).any() else 0 for m in masks],
            dtype=np.int64,
        )
        counts = np.array([int(m.sum()) for m in masks], dtype=np.int64)
        return cls(every, node_pool, tuple(masks), tuple(conflicts), capacity, reference, counts)

    def index(self, name: str) -> int | None:
        """Index of the pool called ``name``."""
        return next((p for p, pool in enumerate(self.pools) if pool.name == name), None)

    def apply_sharing(self, snapshot: ClusterSnapshot) -> None:
        """Give Shared pools' nodes their pod-per-GPU limit and overcommit (before any bind)."""
        for p, pool in enumerate(self.pools):
            if pool.mode is not PoolMode.SHARED:
                continue
            for node in np.flatnonzero(self.masks[p]):
                snapshot.configure_gpu_sharing(
                    int(node),
                    pool.max_pods_per_gpu,
                    pool.compute_overcommit,
                    pool.memory_overcommit,
                )

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
