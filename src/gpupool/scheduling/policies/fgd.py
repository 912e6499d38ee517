"""FGD (Fragmentation Gradient Descent): place where expected fragmentation grows least.

For each candidate node the policy forms the node after a hypothetical placement and scores
``trunc(100 * sigmoid((F_before - F_after) / 1000))``: 50 when fragmentation does not change,
more when it falls. A single share tries every GPU that fits and keeps the best (first index on
ties); whole, multi-GPU and CPU-only pods take the GPUs the simulator's ``Sub`` would take (the
first ``k`` fitting GPUs in ascending free order). The GPU chosen while scoring is the GPU used.

The target workload is given up front: this is the published policy, which knows the trace's
request mix in advance. gpupool's own policy learns it online instead.
"""

from __future__ import annotations

import numpy as np

from gpupool.core.filtering import eligible_gpus
from gpupool.core.framework import FloatArray
from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.core.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.scheduling.fragmentation import FragmentationIndex
from gpupool.scheduling.gpu_choice import best_fit_gpus
from gpupool.scheduling.policies.base import PolicyBase
from gpupool.scheduling.workload import TargetWorkload

_NEVER = np.iinfo(np.int64).max


def fgd_score(delta_scaled: FloatArray, total_weight: float) -> FloatArray:
    """``trunc(100 * sigmoid(delta / 1000))`` for fragmentation deltas kept times ``W``."""
    return np.trunc(100.0 / (1.0 + np.exp(-(delta_scaled / total_weight) / 1000.0)))


def _first_of_equal_values(free: IntArray, eligible: BoolArray) -> BoolArray:
    """Eligible GPUs whose free value does not occur at a lower eligible index of the same row.

    GPUs with equal free compute give identical hypothetical nodes, so only the first needs
    scoring, and the first index is also the one FGD picks on a tie.
    """
    width = free.shape[1]
    lower = np.tri(width, width, -1, dtype=np.bool_)
    same = (free[:, :, None] == free[:, None, :]) & eligible[:, None, :] & lower[None, :, :]
    first: BoolArray = eligible & ~same.any(axis=2)
    return first


class FGDPolicy(PolicyBase):
    """The published FGD policy with an oracle target workload.

    Args:
        workload: The typical request shapes of the whole trace.
    """

    name = "fgd"

    def __init__(self, workload: TargetWorkload) -> None:
        self.workload = workload
        self._index: FragmentationIndex | None = None
        self._snapshot: ClusterSnapshot | None = None
        self._chosen_pod: PodSpec | None = None
        self._chosen_on: ClusterSnapshot | None = None
        self._chosen_gpu: IntArray = np.zeros(0, dtype=np.int64)
        self._chosen_gen: IntArray = np.zeros(0, dtype=np.int64)

    def to_score(self, delta_scaled: FloatArray, total_weight: float) -> FloatArray:
        """Turn fragmentation deltas (times ``W``) into scores: FGD's truncated sigmoid."""
        return fgd_score(delta_scaled, total_weight)

    def share_pair_scores(
        self,
        snapshot: ClusterSnapshot,
        pod: PodSpec,
        nodes: IntArray,
        gpus: IntArray,
        delta_scaled: FloatArray,
        total_weight: float,
    ) -> FloatArray:
        """Scores of the candidate (node, GPU) pairs of a single share; FGD uses the delta only."""
        return self.to_score(delta_scaled, total_weight)

    def new_index(self, snapshot: ClusterSnapshot) -> FragmentationIndex:
        """A fresh index of ``snapshot`` against the current workload: FGD's own measure."""
        return FragmentationIndex(snapshot, self.workload)

    def index(self, snapshot: ClusterSnapshot) -> FragmentationIndex:
        """The fragmentation index of ``snapshot``, built on first use and kept current."""
        if (
            self._index is None
            or self._snapshot is not snapshot
            or self._index.workload is not self.workload
        ):
            self._index = self.new_index(snapshot)
            self._snapshot = snapshot
        self._index.refresh(snapshot)
        return self._index

    def score(self, snapshot: ClusterSnapshot, pod: PodSpec, feasible: BoolArray) -> FloatArray:
        """FGD score per feasible node; remembers the GPU each node would use."""
        rows = np.flatnonzero(feasible)
        node_scores, node_gpu = self._score_rows(snapshot, pod, rows)
        scores = np.zeros(snapshot.size, dtype=np.float64)
        scores[rows] = node_scores
        self._chosen_pod = pod
        self._chosen_on = snapshot
        self._chosen_gpu = np.full(snapshot.size, -1, dtype=np.int64)
        self._chosen_gpu[rows] = node_gpu
        self._chosen_gen = snapshot.node_gen.copy()
        return scores

    def select_gpus(self, snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> tuple[int, ...]:
        """The GPU found while scoring for a share; the ``Sub`` choice otherwise.

        The remembered GPU is used only if the node has not changed since that scoring: the
        scheduler skips scoring when one node is feasible, and the same pod may have been
        scored before on a what-if (a victim search) where the GPU was free, which handed
        out a GPU without room (found in the simulator with 16 reservations per pool).
        """
        if not is_single_share(pod):
            return best_fit_gpus(snapshot, pod, node)
        if (
            self._chosen_pod is pod
            and self._chosen_on is snapshot
            and self._chosen_gen[node] == snapshot.node_gen[node]
            and self._chosen_gpu[node] >= 0
        ):
            return (int(self._chosen_gpu[node]),)
        _, gpu = self._score_rows(snapshot, pod, np.array([node], dtype=np.int64))
        return (int(gpu[0]),)

    def _score_rows(
        self, snapshot: ClusterSnapshot, pod: PodSpec, rows: IntArray
    ) -> tuple[FloatArray, IntArray]:
        index = self.index(snapshot)
        before = index.scaled[rows]
        if is_single_share(pod):
            return self._score_share(snapshot, pod, rows, index, before)
        if pod.gpu_count:
            ok = eligible_gpus(snapshot, pod, rows)
            ordered = np.sort(np.where(ok, snapshot.gpu_free[rows], _NEVER), axis=1)
            touched = ordered[:, : pod.gpu_count]
        else:
            touched = np.zeros((rows.size, 0), dtype=np.int64)
        after = index.after_changes(
            snapshot, rows, touched, pod.gpu_milli, pod.cpu_milli, pod.memory_mib
        )
        scores = self.to_score(before - after, index.total_weight)
        return scores, np.full(rows.size, -1, dtype=np.int64)

    def _score_share(
        self,
        snapshot: ClusterSnapshot,
        pod: PodSpec,
        rows: IntArray,
        index: FragmentationIndex,
        before: FloatArray,
    ) -> tuple[FloatArray, IntArray]:
        free = snapshot.gpu_free[rows]
        candidates = _first_of_equal_values(free, eligible_gpus(snapshot, pod, rows))
        local, gpu = np.nonzero(candidates)
        touched = free[local, gpu][:, None]
        after = index.after_changes(
            snapshot, rows[local], touched, pod.gpu_milli, pod.cpu_milli, pod.memory_mib
        )
        pair_scores = self.share_pair_scores(
            snapshot, pod, rows[local], gpu, before[local] - after, index.total_weight
        )
        starts = np.flatnonzero(np.r_[True, local[1:] != local[:-1]])
        node_scores = np.maximum.reduceat(pair_scores, starts)
        group = np.cumsum(np.r_[False, local[1:] != local[:-1]])
        best = pair_scores == node_scores[group]
        first_best = np.flatnonzero(best)
        _, first = np.unique(local[first_best], return_index=True)
        return node_scores, gpu[first_best[first]]


def is_single_share(pod: PodSpec) -> bool:
    """One GPU, less than all of it: the pods whose GPU FGD chooses by score."""
    return pod.gpu_count == 1 and pod.gpu_milli < MILLI_PER_GPU
