"""The order pending pods are served in: queues first, then pods inside each queue.

Across queues, a tenant's pods buy nothing: what a tenant writes on its pods (a PriorityClass)
must not carry it past another queue's guarantee, or any tenant allowed a high PriorityClass
would be served before every guarantee. So:

* **queues** are ordered by the queue's own ``priority`` (set by the administrator in its
  GPUQueue), then by **fair share**: the queue furthest below its entitlement goes first. A
  queue's dominant share is its largest, over pools, holding above its guarantee as a fraction
  of the pool: negative while it is under its guarantee (the further under, the sooner it is
  served), and divided by its weight once it borrows, so a weight-2 queue may borrow twice as
  much before it yields. Queues level on both go oldest waiting pod first, then in
  configuration order;
* **pods** inside a queue are ordered by their own priority, then age (older first), then name,
  so the order is total and never depends on input order.

The simulator's fairness metric uses the same dominant share, so what is measured is what is
enforced.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from gpupool.policy.pools import PoolLayout
from gpupool.policy.quota import FloatArray, Ledger, QueueTables
from gpupool.policy.workload import Workload


def dominant_shares(tables: QueueTables, layout: PoolLayout, ledger: Ledger) -> FloatArray:
    """Per queue: weighted dominant share of what it holds above its guarantees."""
    capacity = np.maximum(layout.capacity, 1).astype(np.float64)
    above = (ledger.used - tables.guaranteed) / capacity[None, :]
    populated = layout.capacity > 0
    share = above[:, populated].max(axis=1) if populated.any() else np.zeros(len(tables.queues))
    return np.where(share > 0, share / tables.weight, share)


def priority_of(tables: QueueTables, queue: int, workload: Workload) -> tuple[int, int]:
    """(queue priority, pod priority): what preemption inside a queue and nominations compare.

    Reclaim across queues compares no priority (:mod:`.preemption`).
    """
    return (int(tables.priority[queue]), workload.priority)


def _pod_key(workload: Workload) -> tuple[int, float, str]:
    return (-workload.priority, workload.created_at, workload.name)


def order_pending(
    pending: Sequence[tuple[Workload, int]],
    tables: QueueTables,
    layout: PoolLayout,
    ledger: Ledger,
) -> list[tuple[Workload, int]]:
    """``pending`` (workload, queue index) pairs in serving order: queue by queue."""
    if len(pending) <= 1:
        return list(pending)
    shares = dominant_shares(tables, layout, ledger)
    by_queue: defaultdict[int, list[tuple[Workload, int]]] = defaultdict(list)
    for item in pending:
        by_queue[item[1]].append(item)
    for items in by_queue.values():
        items.sort(key=lambda item: _pod_key(item[0]))

    def queue_key(queue: int) -> tuple[int, float, float, int]:
        oldest = min(workload.created_at for workload, _ in by_queue[queue])
        return (-int(tables.priority[queue]), float(shares[queue]), oldest, queue)

    return [item for queue in sorted(by_queue, key=queue_key) for item in by_queue[queue]]
