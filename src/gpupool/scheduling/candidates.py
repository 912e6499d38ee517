"""The nodes a pending pod could ever be placed on: every filter the engine applies but room.

``gpupool explain`` answers "what would have to free up" and must not name a node the scheduler
would never use: a node of another pool, with a GPU model the pod does not allow, one its
selector or affinity excludes, one with a taint it does not tolerate, or one not ready or
cordoned. :func:`candidate_nodes` composes exactly the functions the engine filters with: the
pools the pod is routed to (:meth:`~gpupool.policy.pools.PoolLayout.route`), their node masks
(:meth:`~gpupool.policy.pools.PoolLayout.node_checks`) and the pod's own checks
(:func:`~gpupool.core.filtering.admissible`), leaving out only what depends on what runs now
(free resources, nominations, reservations). A copy of those rules would drift from them, and an
explanation that contradicts the pod's own pending reason is worse than none.

:func:`could_hold` is the other half, room on an empty node: the engine asks it before a pod
that did not fit may block its pool (a pod no node could ever hold holds no reservation and
keeps no pod behind it), and the explanation counts the nodes that could take the pod once freed.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.filtering import admissible, mask_of
from gpupool.core.model import PodSpec, RequestKind
from gpupool.core.snapshot import BoolArray, ClusterSnapshot
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.workload import Workload


def candidate_nodes(
    snapshot: ClusterSnapshot, policy: ClusterPolicy | None, workload: Workload
) -> BoolArray:
    """Nodes of the pools ``workload`` is routed to that its constraints and the nodes allow.

    Args:
        snapshot: The cluster.
        policy: The pools and queues compiled for ``snapshot``'s nodes (None: no pools, every
            node is in the default pool).
        workload: The pending pod.
    """
    allowed = admissible(snapshot, workload.pod)
    if policy is None:
        return allowed
    tables, layout = policy.tables, policy.layout
    queue = tables.queues[tables.queue_of(workload.namespace, workload.queue)].name
    routes = layout.route(workload, queue)
    in_pools = np.zeros(snapshot.size, dtype=np.bool_)
    if not isinstance(routes, str):
        for pool in routes:
            in_pools |= mask_of(snapshot.size, layout.node_checks(pool))
    return allowed & in_pools


def could_hold(snapshot: ClusterSnapshot, pod: PodSpec) -> BoolArray:
    """Nodes whose capacity, with nothing running there, holds ``pod``'s request.

    CPU, memory and a pod slot; every extra resource it asks for; a free slice of its MIG
    profile; ``gpu_count`` GPUs whose compute, memory and pod slots (as a pool's sharing sets
    them) hold one of its per-GPU shares. Unhealthy GPUs count: they may recover. What the
    pod's constraints allow is :func:`~gpupool.core.filtering.admissible`'s, not this.
    """
    fits: BoolArray = (
        (snapshot.cpu_capacity >= pod.cpu_milli)
        & (snapshot.memory_capacity >= pod.memory_mib)
        & (snapshot.pods_capacity >= 1)
    )
    if pod.extra_resources:
        fits &= snapshot.extras.could_ever_fit(pod.extra_resources, snapshot.size)
    kind = pod.kind
    if kind is RequestKind.MIG:
        if pod.mig_profile not in snapshot.mig_profiles:
            return np.zeros(snapshot.size, dtype=np.bool_)
        column = snapshot.mig_profiles.index(pod.mig_profile)
        return fits & (snapshot.mig_capacity[:, column] >= 1)
    if kind is RequestKind.NONE:
        return fits
    gpus: BoolArray = (
        snapshot.gpu_exists
        & (snapshot.gpu_milli_capacity >= pod.gpu_milli)
        & (snapshot.gpu_memory_capacity >= pod.gpu_memory_mib)
        & (snapshot.gpu_pods_capacity >= 1)
    )
    enough: BoolArray = gpus.sum(axis=1) >= pod.gpu_count
    return fits & enough
