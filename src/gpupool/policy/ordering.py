"""The order pending pods are served in: priority, then fair share, then age.

* **priority**: the queue's priority, then the pod's own priority inside it;
* **fair share**: among equal priorities, the queue furthest below its entitlement goes first.
  A queue's dominant share is its largest, over pools, holding above its guarantee as a
  fraction of the pool: negative while it is under its guarantee (the further under, the sooner
  it is served), and divided by its weight once it borrows, so a weight-2 queue may borrow
  twice as much before it yields;
* **age**: older first, then the name, so the order is total and never depends on input order.

The same key orders preemption victims' protection and the simulator's fairness metric uses
the same dominant share, so what is measured is what is enforced.
"""

from __future__ import annotations

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
    """The priority that orders and preempts: (queue priority, pod priority)."""
    return (int(tables.priority[queue]), workload.priority)


def order_pending(
    pending: Sequence[tuple[Workload, int]],
    tables: QueueTables,
    layout: PoolLayout,
    ledger: Ledger,
) -> list[tuple[Workload, int]]:
    """``pending`` (workload, queue index) pairs in serving order."""
    if len(pending) <= 1:
        return list(pending)
    shares = dominant_shares(tables, layout, ledger)

    def key(item: tuple[Workload, int]) -> tuple[int, int, float, float, str]:
        workload, queue = item
        return (
            -int(tables.priority[queue]),
            -workload.priority,
            float(shares[queue]),
            workload.created_at,
            workload.name,
        )

    return sorted(pending, key=key)
