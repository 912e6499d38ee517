"""The cluster snapshot: every node's free resources as numpy arrays, and who holds what.

Scheduling reads the snapshot as a struct of arrays (one row per node, one column per GPU slot) so
that a filter is a handful of vectorised comparisons and a score is one array, whatever the
cluster size. Binding and releasing touch one row in place; nothing is rebuilt per pod.

Invariants, enforced here and not by callers:

* a GPU's free compute share stays within ``0..1000`` milli and its free memory within
  ``0..capacity``: :meth:`ClusterSnapshot.bind` refuses any allocation that does not fit, so no
  share is ever given twice;
* CPU, memory, pod slots, per-GPU pod slots, MIG slices and every extra resource
  (:mod:`gpupool.core.resources`: other vendors' extended resources, hugepages, ephemeral
  storage) are never oversubscribed, and no two pods on a node hold conflicting host ports;
* a GPU's compute and memory capacity are its physical ones unless a Shared pool set an
  overcommit ratio on its node (:meth:`ClusterSnapshot.configure_gpu_sharing`, capped at
  :data:`MAX_OVERCOMMIT`, the GPUPool CRD's limit); a whole GPU always takes all of both, so
  overcommit can never let a share meet an exclusive pod on one device;
* a GPU the node reports unhealthy (:attr:`NodeSpec.unhealthy_gpus`) is never eligible for a
  new pod (``gpu_usable``), whatever is free on it;
* every change bumps the node's generation counter (``node_gen``), which lets policies keep
  per-node caches and refresh only the rows that changed.

``simulate_removal`` gives the cheap, reversible what-if that preemption and backfill need: it
releases pods and returns a closure that puts them back exactly as they were.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gpupool.core.bind_check import bind_problem
from gpupool.core.model import MILLI_PER_GPU, NodeSpec, PodSpec, RequestKind, overcommitted
from gpupool.core.resources import ExtraColumns, PortsInUse

if TYPE_CHECKING:
    from gpupool.core.constraints import NodeConstraints

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

UNKNOWN_GPU_MEMORY = np.int64(2**40)
"""Free GPU memory recorded for nodes whose GPU memory is not reported: large enough to pass."""
UNLIMITED_PODS_PER_GPU = 2**31
"""Pod slots of a GPU whose pool sets no ``maxPodsPerGPU`` (compute and memory still bound it)."""
MAX_OVERCOMMIT = 4.0
"""Largest compute or memory overcommit ratio (the GPUPool CRD's ``maximum``)."""


class AllocationError(RuntimeError):
    """A bind or release that would break the snapshot's invariants."""


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a pod runs and what it holds there.

    Attributes:
        pod: The pod's request.
        node: Row index of the node in the snapshot.
        gpus: Indexes of the GPUs it holds on that node (empty for CPU-only and MIG pods).
    """

    pod: PodSpec
    node: int
    gpus: tuple[int, ...]


def _refused_masks(nodes: Sequence[NodeSpec]) -> dict[RequestKind, BoolArray]:
    """Per request kind some node's agent refuses lately, the nodes that still take it.

    Empty when no node refuses anything (the common case: the filter then adds no check).
    """
    kinds = {kind for node in nodes for kind in node.refused_kinds}
    return {
        kind: np.array([kind not in node.refused_kinds for node in nodes], dtype=np.bool_)
        for kind in kinds
    }


class ClusterSnapshot:
    """Mutable, array-backed state of a cluster for one scheduler.

    Args:
        nodes: The node inventory; names must be unique.
    """

    contention_limited = False
    """True once a pool keeps new pods off contended GPUs: filters then read :attr:`gpu_calm`."""
    gpu_calm: BoolArray
    """GPUs calm enough for a new pod (:func:`gpupool.core.contention_rules.avoid_contention`,
    a pool's ``spec.contention.avoidAbove``); set with :attr:`contention_limited`."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        if not nodes:
            raise ValueError("a cluster snapshot needs at least one node")
        names = [node.name for node in nodes]
        if len(set(names)) != len(names):
            dup = next(name for name in names if names.count(name) > 1)
            raise ValueError(f"duplicate node name {dup!r}")
        self.nodes: tuple[NodeSpec, ...] = tuple(nodes)
        self.node_names: tuple[str, ...] = tuple(names)
        self.node_index: dict[str, int] = {name: i for i, name in enumerate(names)}
        n = len(nodes)
        width = max(1, max(node.gpu_count for node in nodes))

        self.models: tuple[str, ...] = tuple(sorted({nd.gpu_model for nd in nodes if nd.gpu_model}))
        model_ids = {model: i for i, model in enumerate(self.models)}
        self.model_id: IntArray = np.array(
            [model_ids.get(node.gpu_model, -1) for node in nodes], dtype=np.int64
        )
        self.cpu_capacity: IntArray = np.array([nd.cpu_milli for nd in nodes], dtype=np.int64)
        self.memory_capacity: IntArray = np.array([nd.memory_mib for nd in nodes], dtype=np.int64)
        self.pods_capacity: IntArray = np.array([nd.max_pods for nd in nodes], dtype=np.int64)
        self.gpu_count: IntArray = np.array([nd.gpu_count for nd in nodes], dtype=np.int64)
        self.gpu_exists: BoolArray = np.arange(width)[None, :] < self.gpu_count[:, None]
        self.gpu_usable: BoolArray = self.gpu_exists.copy()
        """GPUs new pods may take: those that exist, less the unhealthy ones. Pods already on an
        unhealthy GPU stay held there (bind checks room, not health), so releasing them never
        makes the GPU look free, and the ledger keeps charging them until they end."""
        for row, node in enumerate(nodes):
            self.gpu_usable[row, list(node.unhealthy_gpus)] = False
        self.unhealthy_gpus: int = int(self.gpu_exists.sum() - self.gpu_usable.sum())
        """How many GPUs are unhealthy (0: the filter skips the unhealthy reason)."""
        self.refused = _refused_masks(nodes)
        mem_per_gpu = np.array(
            [nd.gpu_memory_mib or UNKNOWN_GPU_MEMORY for nd in nodes], dtype=np.int64
        )
        self.gpu_memory_capacity: IntArray = np.where(self.gpu_exists, mem_per_gpu[:, None], 0)
        self.gpu_milli_capacity: IntArray = np.where(self.gpu_exists, MILLI_PER_GPU, 0)
        self.gpu_pods_capacity: IntArray = np.where(self.gpu_exists, UNLIMITED_PODS_PER_GPU, 0)
        self.sharing_limited = False
        """True once a node has a per-GPU pod limit or overcommit: filters then check both."""

        self.mig_profiles: tuple[str, ...] = tuple(
            sorted({profile for nd in nodes for profile, _ in nd.mig_slices})
        )
        self.mig_capacity: IntArray = np.zeros((n, len(self.mig_profiles)), dtype=np.int64)
        for i, node in enumerate(nodes):
            for profile, count in node.mig_slices:
                self.mig_capacity[i, self.mig_profiles.index(profile)] += count

        self.cpu_free: IntArray = self.cpu_capacity.copy()
        self.memory_free: IntArray = self.memory_capacity.copy()
        self.pods_free: IntArray = self.pods_capacity.copy()
        self.gpu_free: IntArray = np.where(self.gpu_exists, MILLI_PER_GPU, 0).astype(np.int64)
        self.gpu_free_total: IntArray = self.gpu_free.sum(axis=1)
        self.gpu_memory_free: IntArray = self.gpu_memory_capacity.copy()
        self.gpu_pods_free: IntArray = self.gpu_pods_capacity.copy()
        self.mig_free: IntArray = self.mig_capacity.copy()
        self.extras = ExtraColumns(nodes)
        """The extra resources' names and allocatable amounts (fixed with the inventory)."""
        self.extra_free: IntArray = self.extras.new_free()
        self.ports = PortsInUse(n)
        self.node_gen: IntArray = np.zeros(n, dtype=np.int64)

        self.total_gpus = int(self.gpu_count.sum())
        self.used_gpu_milli = 0
        self.allocations: dict[str, Allocation] = {}
        self.pods_on_node: list[set[str]] = [set() for _ in range(n)]
        self.pods_with_terms: set[str] = set()
        """Bound pods whose inter-pod terms bear on other pods (:attr:`PodTerms.bears_on_others`):
        while it is empty and a pod names none, no pod-relative check or score has anything to
        do."""
        self._model_masks: dict[frozenset[str], BoolArray] = {}
        self.constraint_checks: dict[NodeConstraints | None, tuple[tuple[str, BoolArray], ...]] = {}
        """Per distinct constraint set (None: a pod that names none), the masks of the nodes it
        rules out (filtering.node_checks)."""
        self.node_preferences: dict[
            NodeConstraints | None, tuple[FloatArray, FloatArray] | None
        ] = {}
        """Per distinct constraint set, the raw preferred-affinity and soft-taint scores of every
        node (core.node_preference); None where all are 0."""

    @property
    def size(self) -> int:
        """Number of nodes."""
        return len(self.nodes)

    def model_mask(self, models: frozenset[str]) -> BoolArray:
        """Nodes whose GPU model is one of ``models`` (every GPU node when ``models`` is empty)."""
        mask = self._model_masks.get(models)
        if mask is None:
            if models:
                wanted = [i for i, model in enumerate(self.models) if model in models]
                mask = np.isin(self.model_id, wanted)
            else:
                mask = self.model_id >= 0
            mask.setflags(write=False)
            self._model_masks[models] = mask
        return mask

    def configure_gpu_sharing(
        self,
        node: int | Sequence[int] | IntArray,
        max_pods_per_gpu: int | None = None,
        compute_overcommit: float = 1.0,
        memory_overcommit: float = 1.0,
    ) -> None:
        """Set how nodes' GPUs may be shared (their pool's pods per GPU and overcommit).

        Args:
            node: Row index, or row indexes (a pool's nodes at once: one call per pool keeps a
                rebuild of thousands of nodes cheap); the nodes must hold no pods, so no running
                share is ever judged against capacity it was not given.
            max_pods_per_gpu: Most pods on one GPU; ``None`` for no limit.
            compute_overcommit: Compute capacity of each GPU as a multiple of the device.
            memory_overcommit: GPU memory capacity as a multiple of the physical memory.

        Raises:
            AllocationError: A node holds pods, or a value is out of range.
        """
        rows = np.atleast_1d(np.asarray(node, dtype=np.int64))
        busy = next((int(row) for row in rows if self.pods_on_node[int(row)]), None)
        if busy is not None:
            raise AllocationError(
                f"node {self.node_names[busy]!r}: cannot change GPU sharing while pods run there"
            )
        if max_pods_per_gpu is not None and max_pods_per_gpu < 1:
            raise AllocationError(f"max_pods_per_gpu must be >= 1, got {max_pods_per_gpu}")
        for name, ratio in (("compute", compute_overcommit), ("memory", memory_overcommit)):
            if not 1.0 <= ratio <= MAX_OVERCOMMIT:
                raise AllocationError(
                    f"{name} overcommit must be within 1.0..{MAX_OVERCOMMIT}, got {ratio}"
                )
        exists = self.gpu_exists[rows]
        pods = UNLIMITED_PODS_PER_GPU if max_pods_per_gpu is None else max_pods_per_gpu
        self.gpu_pods_capacity[rows] = np.where(exists, pods, 0)
        self.gpu_pods_free[rows] = self.gpu_pods_capacity[rows]
        compute = overcommitted(MILLI_PER_GPU, compute_overcommit)
        self.gpu_milli_capacity[rows] = np.where(exists, compute, 0)
        self.gpu_free[rows] = self.gpu_milli_capacity[rows]
        self.gpu_free_total[rows] = self.gpu_free[rows].sum(axis=1)
        physical = np.array([self.nodes[int(row)].gpu_memory_mib for row in rows], dtype=np.int64)
        known = rows[physical > 0]
        if len(known):
            scaled = np.array(
                [overcommitted(int(mib), memory_overcommit) for mib in physical[physical > 0]],
                dtype=np.int64,
            )
            self.gpu_memory_capacity[known] = np.where(exists[physical > 0], scaled[:, None], 0)
            self.gpu_memory_free[known] = self.gpu_memory_capacity[known]
        self.sharing_limited = True
        self.node_gen[rows] += 1

    def bind(
        self, pod: PodSpec, node: int, gpus: Sequence[int] = (), *, running: bool = False
    ) -> Allocation:
        """Give ``pod`` its resources on ``node`` and the GPUs ``gpus``.

        Args:
            pod: The pod's request.
            node: Row index of the node.
            gpus: The GPUs it takes there.
            running: The pod already holds them (a record read back, or a what-if put back):
                an unhealthy GPU still holds it. A new placement (the default) is refused one,
                so no policy, preemption or backfill can hand out a broken GPU by mistake.

        Raises:
            AllocationError: The pod is already placed, the node or a GPU lacks the room, or
                a new placement names an unhealthy GPU.
        """
        if pod.name in self.allocations:
            raise AllocationError(f"pod {pod.name!r} is already bound")
        if not 0 <= node < self.size:
            raise AllocationError(f"pod {pod.name!r}: no node at index {node}")
        problem = bind_problem(self, pod, node, tuple(gpus))
        if problem is not None:
            raise AllocationError(problem)
        if not running and self.unhealthy_gpus:
            broken = [gpu for gpu in gpus if not self.gpu_usable[node, gpu]]
            if broken:
                raise AllocationError(
                    f"pod {pod.name!r} on node {self.node_names[node]!r}: GPU {broken[0]} is "
                    "unhealthy"
                )
        allocation = Allocation(pod=pod, node=node, gpus=tuple(gpus))
        self._apply(allocation, sign=-1)
        self.allocations[pod.name] = allocation
        self.pods_on_node[node].add(pod.name)
        if pod.terms is not None and pod.terms.bears_on_others:
            self.pods_with_terms.add(pod.name)
        return allocation

    def unhealthy_held(self, pod_name: str) -> tuple[int, ...]:
        """The unhealthy GPUs a bound pod holds (none for an unbound pod).

        The live scheduler tells such a pod's owner once: its GPU broke under it, and nothing
        else would say why its work fails while new pods avoid the GPU.
        """
        allocation = self.allocations.get(pod_name)
        if allocation is None or not self.unhealthy_gpus:
            return ()
        return tuple(gpu for gpu in allocation.gpus if not self.gpu_usable[allocation.node, gpu])

    def release(self, pod_name: str) -> Allocation:
        """Return a bound pod's resources to its node.

        Raises:
            AllocationError: The pod is not bound.
        """
        allocation = self.allocations.pop(pod_name, None)
        if allocation is None:
            raise AllocationError(f"pod {pod_name!r} is not bound")
        self._apply(allocation, sign=+1)
        self.pods_on_node[allocation.node].discard(pod_name)
        self.pods_with_terms.discard(pod_name)
        return allocation

    MUTABLE_ARRAYS = (
        "cpu_free",
        "memory_free",
        "pods_free",
        "gpu_free",
        "gpu_free_total",
        "gpu_memory_free",
        "gpu_pods_free",
        "mig_free",
        "extra_free",
        "node_gen",
    )
    """The arrays that bind and release change; the others are fixed once sharing is set."""

    def copy(self) -> ClusterSnapshot:
        """A copy that later binds and releases on this snapshot do not change.

        The inventory and capacities are shared (a snapshot never changes them after its
        sharing limits are set; a new inventory is a new snapshot); the free resources and the
        holdings are copied. Listed here, next to the arrays, so a new one cannot be missed.
        """
        clone = copy.copy(self)
        for name in self.MUTABLE_ARRAYS:
            setattr(clone, name, getattr(self, name).copy())
        clone.allocations = dict(self.allocations)
        clone.pods_on_node = [set(pods) for pods in self.pods_on_node]
        clone.ports = self.ports.copy()
        clone.pods_with_terms = set(self.pods_with_terms)
        clone.constraint_checks = dict(self.constraint_checks)  # a copy may be read elsewhere
        clone.node_preferences = dict(self.node_preferences)
        return clone

    def simulate_removal(self, pod_names: Iterable[str]) -> Callable[[], None]:
        """Release pods for a what-if and return a closure that restores them exactly."""
        removed = [self.release(name) for name in pod_names]

        def restore() -> None:
            for allocation in reversed(removed):
                self.bind(allocation.pod, allocation.node, allocation.gpus, running=True)

        return restore

    def _apply(self, allocation: Allocation, sign: int) -> None:
        pod, node = allocation.pod, allocation.node
        self.cpu_free[node] += sign * pod.cpu_milli
        self.memory_free[node] += sign * pod.memory_mib
        self.pods_free[node] += sign
        if allocation.gpus:
            idx = list(allocation.gpus)
            if pod.kind is RequestKind.WHOLE:
                taken = self.gpu_milli_capacity[node, idx]
                self.gpu_free[node, idx] += sign * taken
                self.gpu_memory_free[node, idx] += sign * self.gpu_memory_capacity[node, idx]
                self.gpu_free_total[node] += sign * taken.sum()
            else:
                self.gpu_free[node, idx] += sign * pod.gpu_milli
                self.gpu_memory_free[node, idx] += sign * pod.gpu_memory_mib
                self.gpu_free_total[node] += sign * pod.total_gpu_milli
            self.gpu_pods_free[node, idx] += sign
            self.used_gpu_milli -= sign * pod.total_gpu_milli
        if pod.mig_profile:
            self.mig_free[node, self.mig_profiles.index(pod.mig_profile)] += sign
        if pod.extra_resources:
            self.extras.apply(self.extra_free, node, pod.extra_resources, sign)
        if pod.host_ports:
            self.ports.apply(node, pod.host_ports, sign)
        self.node_gen[node] += 1
