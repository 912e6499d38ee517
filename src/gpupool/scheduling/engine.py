"""The policy engine: one scheduling cycle over the pending pods, with every policy rule.

The simulator and the live scheduler both call :meth:`PolicyEngine.cycle` with the same data
(:class:`~gpupool.scheduling.decisions.CycleRequest`: the snapshot, the running pods with what
they were charged, the ledger, the pending pods, the outstanding nominations and ``now``). It
returns decisions as data (:mod:`gpupool.scheduling.decisions`) and changes none of its inputs
(binds made during the cycle, so that later pods see them, are undone before it returns;
preemption and backfill what-ifs restore what they release).

Per pending pod, in serving order (:mod:`gpupool.scheduling.ordering`): route to pools; per pool,
quota admission (:mod:`gpupool.policy.quota`); then, if an earlier pod of the pool is blocked,
strict order (no backfill) or EASY backfill (:mod:`gpupool.scheduling.backfill`); placement by the
placement policy inside the pool's nodes, away from nodes nominated to pods of at least its
priority, on nodes the pod's own constraints allow (:func:`gpupool.core.filtering.node_checks`);
if nothing fits, preemption (:mod:`gpupool.scheduling.victims`), else the pod becomes the pool's
blocked head or waits. The algorithm is :mod:`gpupool.scheduling.cycle`; this class holds what
outlives a cycle (the compiled policy, memoised routes and pool masks).
"""

from __future__ import annotations

import numpy as np

from gpupool.core.filtering import NodeCheck
from gpupool.core.framework import Scheduler
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.workload import Workload
from gpupool.scheduling.cycle import Cycle
from gpupool.scheduling.decisions import CycleRequest, CycleResult, EngineOptions
from gpupool.scheduling.runtime import RuntimeEstimator

MAX_NEVER_FITS_KEPT = 8192
"""Shapes whose never-fits verdict an engine keeps for its snapshot."""


class PolicyEngine:
    """Pools, quotas, order, preemption and backfill around one placement scheduler.

    Args:
        scheduler: The placement scheduler (policy and tie ranks).
        policy: The compiled pools and queues.
        options: Mechanisms and bounds.
    """

    def __init__(
        self, scheduler: Scheduler, policy: ClusterPolicy, options: EngineOptions | None = None
    ) -> None:
        self.scheduler = scheduler
        self.policy = policy
        self.options = options or EngineOptions()
        self._routes: dict[tuple[object, ...], tuple[int, ...] | str] = {}
        self.populated_pools = int(np.count_nonzero(policy.layout.node_count))
        self.default_runtimes = RuntimeEstimator()
        """Used when a request brings none: it never learns, so estimates are the default."""
        self._pool_checks: dict[int, tuple[NodeCheck, ...]] = {}
        self._never: tuple[ClusterSnapshot | None, dict[tuple[object, ...], bool]] = (None, {})

    def never_fits_memo(self, snapshot: ClusterSnapshot) -> dict[tuple[object, ...], bool]:
        """Per pool and request shape, whether no node of ``snapshot`` could ever hold it.

        Kept while the snapshot is the same object: what it asks (capacities, the nodes' static
        checks) does not change with what runs. Across cycles, because the simulator's pods
        rarely share a shape and each verdict costs passes over every node; bounded, so a
        stream of distinct shapes cannot grow it without limit.
        """
        held, memo = self._never
        if held is not snapshot or len(memo) >= MAX_NEVER_FITS_KEPT:
            memo = {}
            self._never = (snapshot, memo)
        return memo

    def pool_checks(self, pool: int) -> tuple[NodeCheck, ...]:
        """The filter check that keeps a pod inside ``pool`` (memoised per pool)."""
        checks = self._pool_checks.get(pool)
        if checks is None:
            checks = self.policy.layout.node_checks(pool)
            self._pool_checks[pool] = checks
        return checks

    def route(self, workload: Workload, queue: str) -> tuple[int, ...] | str:
        """Pools to try for ``workload`` (memoised: routing reads only these four fields)."""
        key = (workload.pod.kind, workload.workload_class, workload.pool, queue)
        routes = self._routes.get(key)
        if routes is None:
            routes = self.policy.layout.route(workload, queue)
            self._routes[key] = routes
        return routes

    def observe(self, workload: Workload) -> None:
        """Show an arriving pod to the placement policy (once per arrival)."""
        self.scheduler.observe(workload.pod)

    def cycle(self, request: CycleRequest) -> CycleResult:
        """Decide for every pending pod; the inputs are left as they were."""
        return Cycle(self, request).run()
