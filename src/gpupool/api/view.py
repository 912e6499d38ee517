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

from gpupool.api.model import Cluster, Gpu, Node, PendingPod, Pool, Queue, Share, Team
from gpupool.core.model import MILLI_PER_GPU, PodSpec, RequestKind
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.metrics import pending_reason


@dataclass(frozen=True, slots=True)
class PodInfo:
    """Who a pod is, beyond its request.

    Attributes:
        key: ``namespace/name``.
        team: Its queue (``gpupool.io/queue``) or namespace.
        since: Creation time (RFC 3339), if known.
    """

    key: str
    team: str
    since: str | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending pod as a view reports it, in scheduling order.

    Attributes:
        spec: Its request (``None`` when the request cannot be read).
        info: Who it is.
        reason: The scheduler's last message ("" when not tried yet).
        attempts: Scheduling attempts so far.
    """

    spec: PodSpec | None
    info: PodInfo
    reason: str
    attempts: int = 0


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

    def queues(self) -> list[Queue]:
        """GPUQueues with their quota use (empty until queues are configured)."""
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
                )
            )
    cpu_free = snapshot.cpu_free.tolist()
    node_memory_free = snapshot.memory_free.tolist()
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
                cpu_milli=spec.cpu_milli,
                cpu_free_milli=cpu_free[row],
                memory_mib=spec.memory_mib,
                memory_free_mib=node_memory_free[row],
                pods=len(snapshot.pods_on_node[row]),
            )
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
                kind=spec.kind.value if spec else "none",
                reason=waiting.reason,
                category=pending_reason(waiting.reason),
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
        node_count = 0
    else:
        node_count = snapshot.size
        gpus = snapshot.total_gpus
        total = gpus * MILLI_PER_GPU
        used = int(snapshot.used_gpu_milli)
        idle = int(((snapshot.gpu_free == MILLI_PER_GPU) & snapshot.gpu_exists).sum())
        allocated = len(snapshot.allocations)
    return Cluster(
        source=view.source,
        nodes=node_count,
        gpus=gpus,
        gpu_milli_total=total,
        gpu_milli_used=used,
        idle_gpus=idle,
        allocated_pods=allocated,
        pending_pods=len(waiting),
        pending_by_reason=dict(sorted(by_reason.items())),
    )


def teams(view: ClusterView) -> list[Team]:
    """Per team: GPU share held, pods, pending pods."""
    used: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    pods: Counter[str] = Counter()
    snapshot = view.snapshot()
    if snapshot is not None:
        for pod_id, allocation in snapshot.allocations.items():
            team = view.pod_info(pod_id).team
            spec = allocation.pod
            used[team] += spec.total_gpu_milli
            per_gpu = spec.gpu_memory_mib
            if spec.kind is RequestKind.WHOLE:
                per_gpu = int(
                    np.sum(snapshot.gpu_memory_capacity[allocation.node, list(allocation.gpus)])
                )
                memory[team] += per_gpu
            else:
                memory[team] += per_gpu * spec.gpu_count
            pods[team] += 1
    waiting = Counter(w.info.team for w in view.waiting())
    names = sorted(set(pods) | set(waiting))
    return [
        Team(
            name=name,
            used_milli=used[name],
            used_memory_mib=memory[name],
            pods=pods[name],
            pending=waiting[name],
        )
        for name in names
    ]
