"""gpupool's own placement policy: FGD's fragmentation descent without knowing the future.

What it keeps from FGD: a fragmentation measure against a target workload and FGD's integer
score, ``trunc(100 * sigmoid(delta / 1000))``. Measurements showed that the truncation is not
an accident to be refined away: scoring with the exact delta strands more GPUs (5.8% instead of
4.8% on the default trace), because the coarse score leaves ties, and breaking ties by a fixed
node order concentrates load on few nodes and keeps the others whole.

What it changes (docs/benchmarks.md, section 3, measures each step):

* the workload is learned online (:class:`~gpupool.scheduling.online_workload.OnlineWorkload`)
  from the pods that have arrived, never from the trace file;
* the fragmentation counts a node's GPUs as usable by a shape only as far as the node's free
  CPU and memory hold copies of it
  (:class:`~gpupool.scheduling.fragmentation.ResourceAwareIndex`), so CPU-only and CPU-heavy
  pods stop draining the CPU of nodes whose GPUs then stay idle;
* a share's delta also counts how much of its GPU's hole is expected to stay free for good
  (:mod:`gpupool.scheduling.hole_value`): FGD looks one pod ahead and so fills a 530-milli hole
  with a 320 share, leaving 210 milli that almost nothing fits, where the next 470 share would
  have closed it;
* ties are broken by what the coarse score cannot see: a CPU-only pod prefers the node with the
  least free GPU in absolute terms, and a GPU pod prefers a node that already runs pods, so
  empty nodes stay empty for the multi-GPU pods that need them;
* it explains itself: :meth:`GpupoolPolicy.explain` reports, for a node, each of these terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpupool.core.framework import FloatArray
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.scheduling.fragmentation import FragmentationIndex, ResourceAwareIndex
from gpupool.scheduling.hole_value import FILL_SHARE, HoleTable
from gpupool.scheduling.online_workload import OnlineWorkload
from gpupool.scheduling.policies.base import MAX_SPEC_GPU
from gpupool.scheduling.policies.fgd import FGDPolicy, is_single_share
from gpupool.scheduling.workload import TargetWorkload

TIE_BREAK_WEIGHT = 0.5
"""Largest tie-break bonus; below 1 so that it never overrides a difference in the score."""
HOLE_WEIGHT = 2.0
"""Weight of a share's change in expected leftover against FGD's fragmentation delta.

Measured on the default trace (seeds 42-44, before the CPU/memory check of the holes went in;
docs/benchmarks.md section 3): 0.5 gained less, 1 to 4 about the same."""


@dataclass(frozen=True, slots=True)
class NodeExplanation:
    """Why a node scored what it did for a pod.

    Attributes:
        node: Node name.
        fragmentation_before: Expected fragmentation of the node now, in GPUs (CPU and memory
            aware, against the learned workload).
        fragmentation_after: The same after placing the pod (on ``gpus``), in GPUs.
        leftover_change: For a share, how much more of its GPU is expected to stay free for
            good once it is placed, in GPUs, times :data:`HOLE_WEIGHT`; 0 for other pods.
        fgd_score: ``trunc(100 * sigmoid((before - after - leftover_change) / 1 GPU))``.
        tie_break: The bonus added to break score ties, and why.
        total: ``fgd_score`` plus the bonus: the value compared across nodes.
        gpus: GPUs the pod would take on this node.
    """

    node: str
    fragmentation_before: float
    fragmentation_after: float
    leftover_change: float
    fgd_score: float
    tie_break: tuple[float, str]
    total: float
    gpus: tuple[int, ...]

    def __str__(self) -> str:
        bonus, why = self.tie_break
        return (
            f"{self.node}: fragmentation {self.fragmentation_before:.3f} -> "
            f"{self.fragmentation_after:.3f} GPUs, leftover {self.leftover_change:+.3f} GPUs, "
            f"score {self.fgd_score:.0f}, tie-break +{bonus:.3f} ({why}), "
            f"total {self.total:.3f}, GPUs {list(self.gpus)}"
        )


class GpupoolPolicy(FGDPolicy):
    """Resource-aware fragmentation descent on an online-learned workload.

    Args:
        learner: The online workload learner; a default one when omitted.
        hole_weight: Weight of the expected-leftover term (0 turns it off).
        fill_share: See :data:`gpupool.scheduling.hole_value.FILL_SHARE`.
    """

    name = "default"

    def __init__(
        self,
        learner: OnlineWorkload | None = None,
        hole_weight: float = HOLE_WEIGHT,
        fill_share: float = FILL_SHARE,
    ) -> None:
        self.learner = learner or OnlineWorkload()
        self.hole_weight = hole_weight
        self.fill_share = fill_share
        self._holes: HoleTable | None = None
        self._holes_for: tuple[TargetWorkload, int] | None = None
        empty = TargetWorkload.from_counts({(100, 0, 0, ""): 1.0})
        super().__init__(empty)

    def observe(self, pod: PodSpec) -> None:
        """Learn from the arriving pod; the plan follows the mix seen so far."""
        self.learner.observe(pod)
        current = self.learner.current()
        if current is not None:
            self.workload = current

    def new_index(self, snapshot: ClusterSnapshot) -> FragmentationIndex:
        """Fragmentation that knows CPU and memory strand GPUs too."""
        return ResourceAwareIndex(snapshot, self.workload)

    def score(self, snapshot: ClusterSnapshot, pod: PodSpec, feasible: BoolArray) -> FloatArray:
        """Score on the learned workload plus a tie-break bonus below one point."""
        return super().score(snapshot, pod, feasible) + self.tie_break(snapshot, pod)[0]

    def share_pair_scores(
        self,
        snapshot: ClusterSnapshot,
        pod: PodSpec,
        nodes: IntArray,
        gpus: IntArray,
        delta_scaled: FloatArray,
        total_weight: float,
    ) -> FloatArray:
        """FGD's delta minus the weighted growth of what the GPU keeps for good, scored."""
        growth = self.leftover_growth(snapshot, pod, nodes, gpus)
        return self.to_score(delta_scaled - total_weight * growth, total_weight)

    def leftover_growth(
        self, snapshot: ClusterSnapshot, pod: PodSpec, nodes: IntArray, gpus: IntArray
    ) -> FloatArray:
        """Weighted growth, in milli, of what each (node, GPU) keeps for good with the share."""
        if self.hole_weight == 0.0:
            return np.zeros(nodes.shape, dtype=np.float64)
        holes = self.holes(snapshot)
        free = snapshot.gpu_free[nodes, gpus]
        cpu, memory = snapshot.cpu_free[nodes], snapshot.memory_free[nodes]
        before = holes.kept(free, cpu, memory)
        after = holes.kept(free - pod.gpu_milli, cpu - pod.cpu_milli, memory - pod.memory_mib)
        growth: FloatArray = self.hole_weight * (after - before)
        return growth

    def holes(self, snapshot: ClusterSnapshot) -> HoleTable:
        """The hole table for the current workload, rebuilt only when the workload changes."""
        capacity = int(snapshot.gpu_milli_capacity.max(initial=0))
        built = self._holes_for
        if (
            self._holes is None
            or built is None
            or built[0] is not self.workload
            or (built[1] != capacity)
        ):
            self._holes = HoleTable.build(self.workload, capacity, self.fill_share)
            self._holes_for = (self.workload, capacity)
        return self._holes

    @staticmethod
    def tie_break(snapshot: ClusterSnapshot, pod: PodSpec) -> tuple[FloatArray, str]:
        """Per-node bonus in ``[0, TIE_BREAK_WEIGHT]`` and a phrase saying what it rewards."""
        if pod.gpu_count == 0:
            taken = 1.0 - snapshot.gpu_free_total / MAX_SPEC_GPU
            return TIE_BREAK_WEIGHT * taken, "CPU-only pod: little free GPU on this node"
        in_use = snapshot.pods_free < snapshot.pods_capacity
        return TIE_BREAK_WEIGHT * in_use.astype(np.float64), "GPU pod: node already in use"

    def explain(self, snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> NodeExplanation:
        """Which terms decided ``node``'s score for ``pod`` (the node must be feasible)."""
        rows = np.array([node], dtype=np.int64)
        index = self.index(snapshot)
        score, _ = self._score_rows(snapshot, pod, rows)
        gpus = self.select_gpus(snapshot, pod, node)
        touched = snapshot.gpu_free[node, list(gpus)][None, :]
        after = index.after_changes(
            snapshot, rows, touched, pod.gpu_milli, pod.cpu_milli, pod.memory_mib
        )
        growth = 0.0
        if is_single_share(pod):
            growth = float(self.leftover_growth(snapshot, pod, rows, np.array(gpus))[0])
        bonus, why = self.tie_break(snapshot, pod)
        return NodeExplanation(
            node=snapshot.node_names[node],
            fragmentation_before=float(index.scaled[node] / index.total_weight / 1000),
            fragmentation_after=float(after[0] / index.total_weight / 1000),
            leftover_change=growth / 1000,
            fgd_score=float(score[0]),
            tie_break=(float(bonus[node]), why),
            total=float(score[0] + bonus[node]),
            gpus=gpus,
        )
