"""Quotas: guarantees, borrowing ceilings and concurrency, checked before placement.

Per queue and pool, in milli GPU units (:mod:`.units`):

* **guaranteed**: the queue can always get this much; others may borrow it while it is idle,
  and a queue under its guarantee with pending pods takes it back by preemption (reclaim);
* **ceiling**: the most the queue may ever hold in the pool, borrowing included (absent: no
  quota limit; the pool's size is the physical one). Admission refuses a pod that would cross
  it, so it is never exceeded, at any instant: that is what ``quota_overrun_max`` = 0 measures;
* **maxConcurrentPods**: running pods of the queue, over all pools;
* a queue that is **not reclaimable** may borrow only capacity nobody is guaranteed (otherwise
  a guarantee could be blocked by pods that may not be preempted).

:class:`Ledger` is the running tally the caller keeps up to date as pods start and end; the
engine copies it for the length of one cycle. A held pod's reason names the queue, the limit and
the pool, e.g. ``queue research: ceiling 12 GPU units reached in pool a100-shared``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpupool.core.snapshot import BoolArray, IntArray
from gpupool.policy.membership import pod_queue
from gpupool.policy.pools import PoolLayout
from gpupool.policy.spec import DEFAULT_QUEUE, QueueSpec
from gpupool.policy.units import format_units
from gpupool.policy.workload import Running

FloatArray = npt.NDArray[np.float64]
NO_LIMIT = 2**62


@dataclass(frozen=True, slots=True)
class QueueTables:
    """The queues as arrays: one row per queue, one column per pool.

    Attributes:
        queues: The configured queues, plus the default queue if none is called ``default``.
        priority: Queue priority.
        weight: Fair-share weight.
        guaranteed: Guarantee per queue and pool, milli-units.
        ceiling: Ceiling per queue and pool, milli-units (:data:`NO_LIMIT` when absent: the
            pool's size bounds it, and waiting for capacity is not a quota reason).
        max_pods: Most running pods per queue (:data:`NO_LIMIT` when absent).
        reclaimable: Whether borrowed capacity may be reclaimed from the queue.
        min_runtime: Seconds a pod of the queue runs before it may be preempted.
        limited: Whether any queue has a guarantee, a ceiling or a pod limit (if none has,
            quota can hold nothing and admission is skipped).
    """

    queues: tuple[QueueSpec, ...]
    priority: IntArray
    weight: FloatArray
    guaranteed: IntArray
    ceiling: IntArray
    max_pods: IntArray
    reclaimable: BoolArray
    min_runtime: FloatArray
    limited: bool
    _charged: dict[tuple[str, str], int] = field(default_factory=dict, repr=False, compare=False)
    """:meth:`queue_of`'s answers so far (a handful of namespaces and labels per cluster)."""

    @classmethod
    def build(cls, queues: Sequence[QueueSpec], layout: PoolLayout) -> QueueTables:
        """Compile ``queues`` against the pools of ``layout``."""
        every = list(queues)
        if not any(queue.name == DEFAULT_QUEUE for queue in every):
            every.append(QueueSpec(name=DEFAULT_QUEUE))
        n_queues, n_pools = len(every), len(layout.pools)
        guaranteed = np.zeros((n_queues, n_pools), dtype=np.int64)
        ceiling = np.full((n_queues, n_pools), NO_LIMIT, dtype=np.int64)
        for q, queue in enumerate(every):
            for quota in queue.quotas:
                p = layout.index(quota.pool)
                if p is None:
                    continue
                guaranteed[q, p] = quota.guaranteed
                if quota.ceiling is not None:
                    ceiling[q, p] = quota.ceiling
        max_pods = np.array(
            [NO_LIMIT if q.max_concurrent_pods is None else q.max_concurrent_pods for q in every],
            dtype=np.int64,
        )
        return cls(
            queues=tuple(every),
            priority=np.array([q.priority for q in every], dtype=np.int64),
            weight=np.array([q.weight for q in every], dtype=np.float64),
            guaranteed=guaranteed,
            ceiling=ceiling,
            max_pods=max_pods,
            reclaimable=np.array([q.reclaimable for q in every], dtype=np.bool_),
            min_runtime=np.array([q.min_runtime_before_preemption for q in every]),
            limited=bool(
                guaranteed.any() or (ceiling < NO_LIMIT).any() or (max_pods < NO_LIMIT).any()
            ),
        )

    def queue_of(self, namespace: str, label: str = "") -> int:
        """Index of the queue a pod of ``namespace`` with queue label ``label`` is charged to.

        The rule is :func:`gpupool.policy.membership.pod_queue` (a label counts only if its
        queue serves the namespace); answers are remembered, since every cycle asks per pod.
        """
        key = (namespace, label)
        found = self._charged.get(key)
        if found is None:
            name = pod_queue(self.queues, namespace, label)
            found = next(q for q, queue in enumerate(self.queues) if queue.name == name)
            self._charged[key] = found
        return found


class Ledger:
    """What every queue holds now: milli-units per pool, running pods, and their priorities.

    Args:
        queues: Number of queues.
        pools: Number of pools.
    """

    def __init__(self, queues: int, pools: int) -> None:
        self.used: IntArray = np.zeros((queues, pools), dtype=np.int64)
        self.pods: IntArray = np.zeros(queues, dtype=np.int64)
        self.priorities: list[Counter[int]] = [Counter() for _ in range(queues)]

    def add(self, running: Running) -> None:
        """Charge a started pod to its queue."""
        self.used[running.queue, running.pool] += running.units
        self.pods[running.queue] += 1
        self.priorities[running.queue][running.workload.priority] += 1

    def remove(self, running: Running) -> None:
        """Credit an ended or preempted pod back."""
        self.used[running.queue, running.pool] -= running.units
        self.pods[running.queue] -= 1
        counter = self.priorities[running.queue]
        counter[running.workload.priority] -= 1
        if counter[running.workload.priority] <= 0:
            del counter[running.workload.priority]

    def copy(self) -> Ledger:
        """An independent copy (the engine's scratch tally for one cycle)."""
        clone = Ledger(0, 0)
        clone.used = self.used.copy()
        clone.pods = self.pods.copy()
        clone.priorities = [Counter(counter) for counter in self.priorities]
        return clone

    def overrun(self, tables: QueueTables) -> int:
        """Largest amount any queue holds above its ceiling in any pool (0 when none)."""
        return max(0, int((self.used - tables.ceiling).max()))


def hold_reason(
    tables: QueueTables,
    layout: PoolLayout,
    ledger: Ledger,
    queue: int,
    pool: int,
    units: int,
    pods: int = 1,
) -> str:
    """Why quota holds ``pods`` pods of ``units`` in all from ``queue`` out of ``pool`` ("": go).

    Several pods at once for a gang, which is admitted whole or not at all.
    """
    name = tables.queues[queue].name
    pool_name = layout.pools[pool].name
    if ledger.pods[queue] + pods > tables.max_pods[queue]:
        return f"queue {name}: maxConcurrentPods {tables.max_pods[queue]} reached"
    if units == 0:
        return ""
    used = int(ledger.used[queue, pool])
    ceiling = int(tables.ceiling[queue, pool])
    if used + units > ceiling:
        return (
            f"queue {name}: ceiling {format_units(ceiling)} GPU units reached in pool {pool_name}"
        )
    guaranteed = int(tables.guaranteed[queue, pool])
    if not tables.reclaimable[queue] and used + units > guaranteed:
        others = np.maximum(ledger.used[:, pool], tables.guaranteed[:, pool])
        others[queue] = 0
        room = int(layout.capacity[pool] - others.sum())
        if used + units > room:
            return (
                f"queue {name}: not reclaimable, so it borrows only unguaranteed capacity, and "
                f"pool {pool_name} has {format_units(max(0, room - used))} GPU units of it left"
            )
    return ""
