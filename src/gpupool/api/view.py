"""The read model, built from any :class:`ClusterView`: live scheduler, snapshot or simulator.

A view answers a handful of questions (the snapshot, who a pod is, which pods wait and why) and
everything the API and dashboard show is computed from those answers here, once, so the live
control plane, the tests' fixture cluster and the demo cannot show the same cluster differently.
Views are read at request time and never written to: a request that changed the scheduler's
snapshot could hand a GPU share out twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpupool.api.model import (
    Cluster,
    Gpu,
    MigSlice,
    Node,
    PendingPod,
    Pool,
    Queue,
    Share,
    Team,
)
from gpupool.core.contention import ContendedGpu
from gpupool.core.model import MILLI_PER_GPU, PodSpec, RequestKind
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.spec import DEFAULT_POOL
from gpupool.policy.units import (
    MILLI_UNITS,
    mig_milli_units,
    milli_units,
    node_milli_units,
    pod_size,
)
from gpupool.policy.usage import PoolUsage, QueueUsage
from gpupool.policy.workload import Workload
from gpupool.scheduling.wait_cause import NOT_TRIED


@dataclass(frozen=True, slots=True)
class PodInfo:
    """Who a pod is, beyond its request.

    Attributes:
        key: ``namespace/name``.
        team: The queue it is charged to (:func:`gpupool.policy.membership.pod_queue`), or
            its namespace where no policy is known.
        since: Creation time (RFC 3339), if known.
        claim: ``namespace/name`` of the DRA ResourceClaim when the holding is a claim's GPUs
            (``key`` is then the pod charged for them); None for a pod's own holding.
    """

    key: str
    team: str
    since: str | None = None
    claim: str | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending pod as a view reports it, in scheduling order.

    Attributes:
        spec: Its request (``None`` when the request cannot be read).
        info: Who it is.
        reason: The scheduler's last message ("" when not tried yet).
        attempts: Scheduling attempts so far.
        category: What holds it (:data:`~gpupool.scheduling.wait_cause.PENDING_CATEGORIES`).
        workload: The pod as the policy engine sees it (namespace, queue, class, pool wish), so
            ``explain`` can route it as the engine does; None when the view knows only the
            request.
        consolidation: What the last consolidation pass said of it ("" when none did): the
            plan moving pods so that it fits, or why there is none.
    """

    spec: PodSpec | None
    info: PodInfo
    reason: str
    attempts: int = 0
    workload: Workload | None = None
    category: str = NOT_TRIED
    consolidation: str = ""


class ClusterView(Protocol):
    """What the API reads of a cluster; implemented by the live scheduler and by snapshots."""

    @property
    def source(self) -> str:
        """``live``, ``snapshot`` or ``simulator``, with a qualifier when useful."""
        ...

    def snapshot(self) -> ClusterSnapshot | None:
        """The cluster's snapshot, or None when there is none (no nodes, a standby replica)."""
        ...

    def pod_info(self, pod_id: str) -> PodInfo:
        """Who the pod with snapshot name ``pod_id`` is."""
        ...

    def gpu_uuids(self, node: str) -> Sequence[str]:
        """UUIDs of the node's GPUs in index order (may be shorter than the GPU count)."""
        ...

    def waiting(self) -> list[Waiting]:
        """Pending pods, first to be tried first."""
        ...

    def pools(self) -> list[Pool]:
        """GPUPools (empty until pools are configured)."""
        ...

    def policy(self) -> ClusterPolicy | None:
        """The pools and queues the scheduler filters by, compiled for the snapshot's nodes.

        None when nothing is compiled (no snapshot, or a view of a bare snapshot): every node
        is then in the default pool.
        """
        ...

    def queues(self) -> list[Queue]:
        """GPUQueues with their quota use (empty until queues are configured)."""
        ...

    def contention(self) -> list[ContendedGpu]:
        """The GPUs whose node agents measured contention (empty when none did)."""
        ...

    def detached(self) -> ClusterView:
        """A copy frozen now, safe to read from another thread (taken in the owner's loop)."""
        ...


def team_of(key: str) -> str:
    """A pod's team when nothing better is known: the namespace part of ``namespace/name``."""
    namespace, sep, _ = key.partition("/")
    return namespace if sep else "default"


def nodes(view: ClusterView) -> list[Node]:
    """Every node with its GPUs and each GPU's shares.

    Built with ``model_construct`` from plain lists: the values come from the snapshot, whose
    invariants already hold, and validating tens of thousands of nested models took most of the
    time of a 1,000-node answer (bench/api_view.py).
    """
    snapshot = view.snapshot()
    if snapshot is None:
        return []
    capacity = snapshot.gpu_memory_capacity.tolist()
    free = snapshot.gpu_free.tolist()
    memory_free = snapshot.gpu_memory_free.tolist()
    shares: dict[tuple[int, int], list[Share]] = {}
    for pod_id, allocation in sorted(snapshot.allocations.items()):
        pod = allocation.pod
        info = view.pod_info(pod_id)
        whole = pod.kind is RequestKind.WHOLE
        for gpu in allocation.gpus:
            shares.setdefault((allocation.node, gpu), []).append(
                Share.model_construct(
                    pod=info.key,
                    team=info.team,
                    milli=pod.gpu_milli,
                    memory_mib=capacity[allocation.node][gpu] if whole else pod.gpu_memory_mib,
                    kind=pod.kind.value,
                    since=info.since,
                    claim=info.claim,
                )
            )
    cpu_free = snapshot.cpu_free.tolist()
    node_memory_free = snapshot.memory_free.tolist()
    slices = _mig_slices(view, snapshot)
    result = []
    for row, spec in enumerate(snapshot.nodes):
        uuids = view.gpu_uuids(spec.name)
        gpus = []
        for gpu in range(spec.gpu_count):
            held = shares.get((row, gpu), [])
            used_memory = (
                capacity[row][gpu] - memory_free[row][gpu]
                if spec.gpu_memory_mib
                else sum(share.memory_mib for share in held)
            )
            gpus.append(
                Gpu.model_construct(
                    index=gpu,
                    uuid=uuids[gpu] if gpu < len(uuids) else "",
                    model=spec.gpu_model,
                    memory_mib=spec.gpu_memory_mib,
                    used_milli=MILLI_PER_GPU - free[row][gpu],
                    used_memory_mib=used_memory,
                    shares=held,
                )
            )
        result.append(
            Node.model_construct(
                name=spec.name,
                gpu_model=spec.gpu_model,
                gpus=gpus,
                mig=slices.get(row, []),
                cpu_milli=spec.cpu_milli,
                cpu_free_milli=cpu_free[row],
                memory_mib=spec.memory_mib,
                memory_free_mib=node_memory_free[row],
                pods=len(snapshot.pods_on_node[row]),
            )
        )
    return result


def _mig_slices(view: ClusterView, snapshot: ClusterSnapshot) -> dict[int, list[MigSlice]]:
    """Per node row, its MIG slices by profile, the held ones first with their holders.

    The snapshot counts slices per profile, not which instance a pod got, so a node's held
    slices of a profile are drawn first, in pod order.
    """
    holders: dict[tuple[int, str], list[PodInfo]] = {}
    for pod_id, allocation in sorted(snapshot.allocations.items()):
        if allocation.pod.kind is RequestKind.MIG:
            key = (allocation.node, allocation.pod.mig_profile)
            holders.setdefault(key, []).append(view.pod_info(pod_id))
    result: dict[int, list[MigSlice]] = {}
    for row, profile_column in zip(*np.nonzero(snapshot.mig_capacity), strict=True):
        profile = snapshot.mig_profiles[int(profile_column)]
        units = mig_milli_units(profile) / MILLI_UNITS
        held = holders.get((int(row), profile), [])
        count = int(snapshot.mig_capacity[row, profile_column])
        result.setdefault(int(row), []).extend(
            MigSlice.model_construct(
                profile=profile,
                units=units,
                pod=held[i].key if i < len(held) else None,
                team=held[i].team if i < len(held) else None,
                claim=held[i].claim if i < len(held) else None,
            )
            for i in range(count)
        )
    return result


def pending(view: ClusterView) -> list[PendingPod]:
    """Pending pods in scheduling order, with their reasons."""
    result = []
    for position, waiting in enumerate(view.waiting(), start=1):
        spec = waiting.spec
        result.append(
            PendingPod(
                pod=waiting.info.key,
                team=waiting.info.team,
                gpu_count=spec.gpu_count if spec else 0,
                gpu_milli=spec.gpu_milli if spec else 0,
                gpu_memory_mib=spec.gpu_memory_mib if spec else 0,
                mig_profile=spec.mig_profile if spec else "",
                kind=spec.kind.value if spec else "none",
                reason=waiting.reason,
                category=waiting.category,
                position=position,
                attempts=waiting.attempts,
            )
        )
    return result


def cluster(view: ClusterView) -> Cluster:
    """The one-screen summary."""
    snapshot = view.snapshot()
    waiting = pending(view)
    by_reason = Counter(p.category for p in waiting)
    if snapshot is None:
        gpus = total = used = idle = allocated = 0
        node_count = capacity = held = 0
    else:
        node_count = snapshot.size
        gpus = snapshot.total_gpus
        total = gpus * MILLI_PER_GPU
        used = int(snapshot.used_gpu_milli)
        idle = int(((snapshot.gpu_free == MILLI_PER_GPU) & snapshot.gpu_exists).sum())
        allocated = len(snapshot.allocations)
        capacity = sum(node_milli_units(node) for node in snapshot.nodes)
        held = sum(
            milli_units(a.pod, snapshot.nodes[a.node].gpu_memory_mib)
            for a in snapshot.allocations.values()
        )
    return Cluster(
        source=view.source,
        nodes=node_count,
        gpus=gpus,
        gpu_milli_total=total,
        gpu_milli_used=used,
        capacity_units=capacity / MILLI_UNITS,
        allocated_units=held / MILLI_UNITS,
        idle_gpus=idle,
        allocated_pods=allocated,
        pending_pods=len(waiting),
        pending_by_reason=dict(sorted(by_reason.items())),
    )


def teams(view: ClusterView) -> list[Team]:
    """Per team: GPU units and memory held (as the quota and the bill count them), pods, pending."""
    used: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    pods: Counter[str] = Counter()
    snapshot = view.snapshot()
    if snapshot is not None:
        for pod_id, allocation in snapshot.allocations.items():
            info = view.pod_info(pod_id)
            team = info.team
            size = pod_size(allocation.pod, snapshot.nodes[allocation.node].gpu_memory_mib)
            used[team] += size.milli
            memory[team] += round(size.memory_gib * 1024)
            pods[team] += info.claim is None  # a claim pod is counted by its own holding
    waiting = Counter(w.info.team for w in view.waiting())
    names = sorted(set(pods) | set(waiting))
    return [
        Team(
            name=name,
            used_units=used[name] / MILLI_UNITS,
            used_memory_mib=memory[name],
            pods=pods[name],
            pending=waiting[name],
        )
        for name in names
    ]


def pools_of(usages: Sequence[PoolUsage]) -> list[Pool]:
    """The API's pools: every GPUPool, and the default pool when it has nodes."""
    return [
        Pool(
            name=use.name,
            mode=use.mode,
            nodes=use.nodes,
            capacity_units=use.capacity_milli / MILLI_UNITS,
            allocated_units=use.allocated_milli / MILLI_UNITS,
            pods=use.pods,
        )
        for use in usages
        if use.nodes or use.name != DEFAULT_POOL
    ]


def queues_of(usages: Sequence[QueueUsage]) -> list[Queue]:
    """The API's queues, the default queue included."""

    def units(milli: int | None) -> float | None:
        return None if milli is None else milli / MILLI_UNITS

    return [
        Queue(
            name=use.name,
            guaranteed_units=units(use.guaranteed_milli),
            ceiling_units=units(use.ceiling_milli),
            used_units=use.used_milli / MILLI_UNITS,
            running=use.running,
            pending=use.pending,
        )
        for use in usages
    ]
