"""The "never fits" verdict: a pod no node of its pools could hold, however much were freed.

Its own module because it is a question apart from placing a pod this cycle: it asks what no
release of capacity could change, memoises the answer per pod shape across cycles
(:meth:`~gpupool.scheduling.engine.PolicyEngine.never_fits_memo`), and its verdict makes the
cycle treat the pod differently (it waits with the filter's reason and :data:`NEVER_FITS`, and
never blocks a pool, holds a reservation or has victims sought for it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from gpupool.core.decisions import Reject
from gpupool.core.filtering import NodeCheck, admissible, filter_nodes, mask_of
from gpupool.policy.workload import Workload
from gpupool.scheduling.candidates import could_hold
from gpupool.scheduling.decisions import CycleRequest, Wait
from gpupool.scheduling.wait_cause import WaitCause, rejected

if TYPE_CHECKING:
    from gpupool.scheduling.engine import PolicyEngine

NEVER_FITS = "no node could ever hold it"
"""Added to the filter's reason for a pod no node of its pools could hold even if empty."""

ChecksOf = Callable[[int, Workload, int], tuple[NodeCheck, ...]]
"""A pod's node checks in a pool: ``(pool, workload, queue) -> checks``."""


class NeverFits:
    """The "never fits" verdicts of one cycle.

    Args:
        engine: The engine (pool checks, routes, and the memo of verdicts by pod shape).
        request: What the cycle decides from (snapshot and claim eligibility).
    """

    def __init__(self, engine: PolicyEngine, request: CycleRequest) -> None:
        self.engine = engine
        self.request = request
        self.snapshot = request.snapshot
        self._by_shape = engine.never_fits_memo(request.snapshot)

    def in_pool(self, workload: Workload, pool: int) -> bool:
        """Whether no node of ``pool`` could ever hold the pod, however much were freed.

        No node there passes its static checks (selector, affinity, taints, readiness, GPU
        model, a claim's eligible devices) or has the capacity, empty, for its request
        (:func:`~gpupool.scheduling.candidates.could_hold`). Such a pod found no room only
        because there never is any: blocking the pool for it held a reservation nothing could
        fill and kept pods that fit waiting behind it, and with reservations that hold across
        cycles, for ever (a 200-CPU pod on 64-CPU nodes deferred a ``cpu: 2`` pod silently).
        """
        pod = workload.pod
        eligibility = self.request.eligibility.get(workload.name)
        # everything admissible() and could_hold() read: a field left out of the key let one
        # pod's verdict condemn another (a NIC no node had made a plain pod of its size wait)
        key = (
            pool, pod.cpu_milli, pod.memory_mib, pod.gpu_count, pod.gpu_milli,
            pod.gpu_memory_mib, pod.gpu_models, pod.mig_profile, pod.constraints,
            pod.extra_resources, pod.terms,
        )  # fmt: skip
        known = self._by_shape.get(key) if eligibility is None else None
        if known is not None:
            return known
        snapshot = self.snapshot
        mask = mask_of(snapshot.size, self.engine.pool_checks(pool))
        mask &= admissible(snapshot, pod) & could_hold(snapshot, pod)
        if eligibility is not None:
            mask &= eligibility.once_freed(snapshot, pod)[1]
            return not mask.any()
        never = self._by_shape[key] = not mask.any()
        return never

    def wait(self, workload: Workload, queue: int, checks: ChecksOf) -> Wait | None:
        """The pod's wait if no node of any of its pools could ever hold it, else ``None``."""
        policy = self.engine.policy
        routes = self.engine.route(workload, policy.tables.queues[queue].name)
        if isinstance(routes, str):
            return None
        pools = [pool for pool in routes if policy.layout.node_count[pool]]
        if not pools or not all(self.in_pool(workload, pool) for pool in pools):
            return None
        pod = workload.pod
        found = filter_nodes(self.snapshot, pod, checks(pools[0], workload, queue))
        reject = Reject(pod=pod, message=found.message(), reasons=found.reasons())
        return Wait(workload, queue, never_fits(reject))


def never_fits(reject: Reject) -> WaitCause:
    """The wait of a pod ``reject`` refused, saying that no node could ever hold it."""
    saying = replace(reject, message=f"{reject.message.rstrip('.')} ({NEVER_FITS}).")
    return rejected(saying, never=True)
