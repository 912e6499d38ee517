"""What each pool and queue holds, from the ledger quotas are enforced with.

GPUPool/GPUQueue status (``kubectl get gpool/gq``), the REST API's ``/pools`` and ``/queues``
and the dashboard all read these two tables, so what they show is exactly what quota admission
counts, in the same GPU units (:mod:`gpupool.policy.units`); a MIG pool's capacity is its slices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.quota import NO_LIMIT, Ledger
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.workload import Running


@dataclass(frozen=True, slots=True)
class PoolUsage:
    """One pool (the implicit default pool included).

    Attributes:
        name: Pool name.
        mode: ``Exclusive``, ``MIG``, ``Shared`` or ``Any`` (the default pool).
        nodes: Member nodes.
        gpus: Capacity in whole GPUs (MIG slices counted as their fractions of a GPU).
        capacity_milli: Capacity in GPU milli-units.
        allocated_milli: Milli-units charged to the queues' pods in the pool.
        pods: Running pods charged in the pool.
    """

    name: str
    mode: str
    nodes: int
    gpus: int
    capacity_milli: int
    allocated_milli: int
    pods: int


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """One queue (the default queue included), over all pools.

    Attributes:
        name: Queue name.
        guaranteed_milli: Guarantees summed over pools; ``None`` when it has none.
        ceiling_milli: Ceilings summed over the pools that set one; ``None`` when none does.
        used_milli: Milli-units its running pods hold.
        running: Its running pods.
        pending: Its pending pods.
    """

    name: str
    guaranteed_milli: int | None
    ceiling_milli: int | None
    used_milli: int
    running: int
    pending: int


def pool_usage(
    policy: ClusterPolicy, ledger: Ledger, running: Iterable[Running]
) -> list[PoolUsage]:
    """Every pool's capacity and what is charged in it."""
    layout = policy.layout
    pods = Counter(pod.pool for pod in running)
    used = ledger.used.sum(axis=0)
    return [
        PoolUsage(
            name=pool.name,
            mode=pool.mode.value,
            nodes=int(layout.node_count[p]),
            gpus=int(layout.capacity[p]) // MILLI_UNITS,
            capacity_milli=int(layout.capacity[p]),
            allocated_milli=int(used[p]),
            pods=pods[p],
        )
        for p, pool in enumerate(layout.pools)
    ]


def queue_usage(
    policy: ClusterPolicy, ledger: Ledger, pending_queues: Iterable[int]
) -> list[QueueUsage]:
    """Every queue's quota and use; ``pending_queues``: the queue index of each pending pod."""
    tables = policy.tables
    pending = Counter(pending_queues)
    result = []
    for q, queue in enumerate(tables.queues):
        ceilings = [int(c) for c in tables.ceiling[q] if c < NO_LIMIT]
        result.append(
            QueueUsage(
                name=queue.name,
                guaranteed_milli=int(tables.guaranteed[q].sum()) or None,
                ceiling_milli=sum(ceilings) if ceilings else None,
                used_milli=int(ledger.used[q].sum()),
                running=int(ledger.pods[q]),
                pending=pending[q],
            )
        )
    return result
