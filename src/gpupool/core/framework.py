"""The scheduling cycle in kube-scheduler vocabulary, with numpy signatures.

Learning is separate from deciding: the caller shows each arriving pod to the policy once, through
:meth:`Scheduler.observe` (online policies learn the workload mix there), and
:meth:`Scheduler.schedule` is a pure request -> decision that may be asked again and again for a
pod that waits, or for a what-if, without teaching the policy anything twice. One cycle for one
pod: ``filter`` (a mask over nodes, :mod:`gpupool.core.filtering`), ``score`` (one array over
nodes from the policy), select (highest score, ties broken first by kube's soft pod rules,
preferred inter-pod affinity and ScheduleAnyway spread, then by a fixed node order), and GPU choice
inside the chosen node. The result is a decision (:mod:`gpupool.core.decisions`); applying it
(reserve and bind) is the backend's job, so the cycle itself never mutates the snapshot.

Tie-breaking follows the FGD simulator: every node has a fixed rank (a random permutation drawn
once per seed in the simulator, the name order by default), and among equal scores the lowest
rank wins. This behaves like first-fit inside a score band, which matters for packing policies.
When exactly one node is feasible it is taken without scoring, as kube-scheduler does.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpupool.core.decisions import Bind, Decision, Reject
from gpupool.core.filtering import NodeCheck, filter_nodes
from gpupool.core.model import PodSpec
from gpupool.core.pod_relative import prefer
from gpupool.core.snapshot import Allocation, BoolArray, ClusterSnapshot, IntArray

FloatArray = npt.NDArray[np.float64]


class PlacementPolicy(Protocol):
    """A placement policy: scores nodes for a pod and picks GPUs inside the chosen node."""

    name: str

    def observe(self, pod: PodSpec) -> None:
        """See a pod as it arrives, before it is scheduled (whether or not it fits)."""

    def score(self, snapshot: ClusterSnapshot, pod: PodSpec, feasible: BoolArray) -> FloatArray:
        """Score every node; only entries where ``feasible`` is true are read. Higher wins."""

    def select_gpus(self, snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> tuple[int, ...]:
        """Choose the GPU indexes on ``node`` (a feasible node) for ``pod``."""


class Scheduler:
    """Runs the scheduling cycle for one pod at a time with one policy.

    Args:
        policy: The placement policy.
        tie_rank: Rank of each node for breaking score ties (lower wins); defaults to the
            snapshot's node order.
    """

    def __init__(self, policy: PlacementPolicy, tie_rank: IntArray | None = None) -> None:
        self.policy = policy
        self.tie_rank = tie_rank

    def observe(self, pod: PodSpec) -> None:
        """Show an arriving pod to the policy; call it once per arrival, before scheduling it."""
        self.policy.observe(pod)

    def schedule(
        self,
        snapshot: ClusterSnapshot,
        pod: PodSpec,
        extra_checks: tuple[NodeCheck, ...] = (),
    ) -> Decision:
        """Decide where ``pod`` goes on ``snapshot``: reads it, teaches the policy nothing.

        ``extra_checks`` are the caller's per-node rules (a pool's nodes, nominations); the
        pod's own constraints come with its request (see
        :func:`~gpupool.core.filtering.filter_nodes`).
        """
        result = filter_nodes(snapshot, pod, extra_checks)
        feasible = np.flatnonzero(result.mask)
        if feasible.size == 0:
            return Reject(pod=pod, message=result.message(), reasons=result.reasons())
        score: float | None = None
        if feasible.size == 1:
            node = int(feasible[0])
        else:
            scores = self.policy.score(snapshot, pod, result.mask)
            node, score = self._select(scores, feasible, snapshot, pod)
        gpus = self.policy.select_gpus(snapshot, pod, node)
        return Bind(
            pod=pod,
            node=node,
            node_name=snapshot.node_names[node],
            gpus=gpus,
            score=score,
            feasible_nodes=int(feasible.size),
        )

    def _select(
        self, scores: FloatArray, feasible: IntArray, snapshot: ClusterSnapshot, pod: PodSpec
    ) -> tuple[int, float]:
        candidate_scores = scores[feasible]
        best = candidate_scores.max()
        # preferred (anti-)affinity and ScheduleAnyway spread break the policy's ties only
        tied = prefer(snapshot, pod, feasible[candidate_scores == best])
        if tied.size > 1 and self.tie_rank is not None:
            node = int(tied[np.argmin(self.tie_rank[tied])])
        else:
            node = int(tied[0])
        return node, float(best)


def apply(snapshot: ClusterSnapshot, decision: Decision) -> Allocation | None:
    """Reserve a :class:`Bind` on the snapshot; a :class:`Reject` changes nothing."""
    if isinstance(decision, Bind):
        return snapshot.bind(decision.pod, decision.node, decision.gpus)
    return None
