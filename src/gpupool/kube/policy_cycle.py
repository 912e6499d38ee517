"""The placement scheduler the live engine runs, with each pod's own node checks added.

:class:`~gpupool.scheduling.engine.PolicyEngine` filters nodes by pool and by nominations; what a
live pod adds (its node selector and required affinity, taints it does not tolerate, cordoned
and not-ready nodes: :mod:`gpupool.kube.node_checks`) is per pod and known only to the cache.
:class:`PodCheckedScheduler` adds those checks to every placement the engine asks for, looked up
by the pod's name, so the engine needs no Kubernetes knowledge and a pod is never placed on a
node kube-scheduler would refuse it.

The engine's victim search does not ask the placement scheduler, so it cannot see these checks;
:func:`node_allows` lets the caller refuse a preemption whose node the pod could not use (rather
than evicting pods for nothing). See the report on :mod:`gpupool.scheduling.engine`.
"""

from __future__ import annotations

from gpupool.core.decisions import Decision
from gpupool.core.filtering import NodeCheck
from gpupool.core.framework import PlacementPolicy, Scheduler
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot


class PodCheckedScheduler(Scheduler):
    """A :class:`~gpupool.core.framework.Scheduler` that adds ``checks[pod.name]``.

    Args:
        policy: The placement policy.
    """

    def __init__(self, policy: PlacementPolicy) -> None:
        super().__init__(policy)
        self.checks: dict[str, tuple[NodeCheck, ...]] = {}

    def schedule(
        self,
        snapshot: ClusterSnapshot,
        pod: PodSpec,
        extra_checks: tuple[NodeCheck, ...] = (),
        *,
        retry: bool | None = None,
    ) -> Decision:
        """Place ``pod`` with the engine's checks and the pod's own."""
        own = self.checks.get(pod.name, ())
        return super().schedule(snapshot, pod, (*extra_checks, *own) if own else extra_checks)


def node_allows(checks: tuple[NodeCheck, ...], node: int) -> bool:
    """Whether every check passes ``node``."""
    return all(bool(passed[node]) for _, passed in checks)


def ordering_wait(reason: str) -> bool:
    """Whether the engine held a pod only behind others of this cycle, not for itself.

    Such a pod (behind a blocked pod of its pool, past the cycle's backfill depth, or the same
    size as one that failed this cycle) has had no verdict of its own: it is tried again in the
    next cycle instead of being parked until capacity changes, and no reason is written for it,
    so every pending pod ends with its own reason, as under kube-scheduler.
    """
    return reason.startswith(("waiting behind ", "backfill: ")) or reason.endswith(" this cycle")
