"""GPU fragmentation of nodes with respect to a target workload (the FGD measure), vectorised.

For a node with per-GPU free compute ``g`` (total ``G``) and free CPU ``c``, and a task shape
``m`` (``u_m`` milli on each of ``k_m`` GPUs, ``c_m`` CPU, allowed models):

* if the task is CPU-only, or the node's model is not allowed, or fewer than ``k_m`` GPUs have
  ``g_i >= u_m``, or ``c < c_m``: every idle GPU milli is fragment (``G``);
* otherwise only the GPUs too small for the task are fragment: ``sum(g_i for g_i < u_m)``.

The node's fragmentation is the weighted mean over shapes. Writing ``big_m = sum(g_i for
g_i >= u_m)`` and ``cnt_m = #(g_i >= u_m)`` it becomes

    F = G - sum_m p_m * [task m fits] * big_m,

which only needs ``cnt`` and ``big`` per node and shape. Both are cached per node and refreshed
only for nodes whose generation changed, and a hypothetical placement changes them by amounts
that depend only on the GPU values it touches. Scoring all candidate (node, GPU) pairs for a pod
is therefore a few array operations of size ``pairs x shapes`` instead of a re-evaluation of the
whole node per candidate, as the authors' Go code does.

All sums are kept multiplied by the total weight ``W`` (see :mod:`gpupool.scheduling.workload`)
so that they stay exact.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpupool.core.snapshot import BoolArray, ClusterSnapshot, IntArray
from gpupool.scheduling.workload import TargetWorkload

FloatArray = npt.NDArray[np.float64]


class FragmentationIndex:
    """Per-node fragmentation of one snapshot against one target workload, kept current.

    Args:
        snapshot: The cluster; its node set must not change during the index's life.
        workload: The target workload.
    """

    def __init__(self, snapshot: ClusterSnapshot, workload: TargetWorkload) -> None:
        self.workload = workload
        self.total_weight = workload.total_weight
        n = snapshot.size
        gpu_shapes = workload.gpu_milli > 0
        model_ok = np.ones((n, workload.size), dtype=np.bool_)
        for m, models in enumerate(workload.gpu_models):
            if models:
                model_ok[:, m] = snapshot.model_mask(models)
        self.access: BoolArray = gpu_shapes[None, :] & model_ok & (snapshot.gpu_count > 0)[:, None]
        self.count: IntArray = np.zeros((n, workload.size), dtype=np.int64)
        self.big: FloatArray = np.zeros((n, workload.size), dtype=np.float64)
        self.scaled: FloatArray = np.zeros(n, dtype=np.float64)
        self._seen_gen = np.full(n, -1, dtype=np.int64)
        self.refresh(snapshot)

    def refresh(self, snapshot: ClusterSnapshot) -> FloatArray:
        """Recompute the nodes that changed; return the per-node fragmentation (times ``W``)."""
        stale = np.flatnonzero(self._seen_gen != snapshot.node_gen)
        if stale.size:
            free = snapshot.gpu_free[stale]
            fits = free[:, :, None] >= self.workload.gpu_milli[None, None, :]
            self.count[stale] = fits.sum(axis=1)
            self.big[stale] = (fits * free[:, :, None]).sum(axis=1)
            self.scaled[stale] = self.scaled_after(
                stale,
                snapshot.gpu_free_total[stale],
                snapshot.cpu_free[stale],
                self.count[stale],
                self.big[stale],
            )
            self._seen_gen[stale] = snapshot.node_gen[stale]
        return self.scaled

    def scaled_after(
        self,
        rows: IntArray,
        gpu_total: IntArray,
        cpu: IntArray,
        count: IntArray,
        big: FloatArray,
    ) -> FloatArray:
        """Fragmentation (times ``W``) of nodes ``rows`` in a given, possibly hypothetical, state.

        Args:
            rows: Node index of each state (may repeat).
            gpu_total: Free GPU milli of each state.
            cpu: Free CPU of each state.
            count: ``cnt`` per state and shape.
            big: ``big`` per state and shape (integer-valued floats, so sums stay exact).
        """
        wl = self.workload
        fits = (
            self.access[rows]
            & (count >= wl.gpu_count[None, :])
            & (cpu[:, None] >= wl.cpu_milli[None, :])
        )
        usable: FloatArray = (big * fits) @ wl.weight
        return self.total_weight * gpu_total - usable

    def node_fragmentation(self, snapshot: ClusterSnapshot) -> FloatArray:
        """Per-node fragmentation in milli-GPU."""
        return self.refresh(snapshot) / self.total_weight

    def after_changes(
        self,
        snapshot: ClusterSnapshot,
        rows: IntArray,
        touched: IntArray,
        share: int,
        cpu: int,
    ) -> FloatArray:
        """Fragmentation (times ``W``) if each node in ``rows`` gave ``share`` milli to each GPU.

        Args:
            snapshot: The cluster (already refreshed through :meth:`refresh`).
            rows: Node index per hypothetical state.
            touched: Free milli of the GPUs each state takes from, shape ``(states, k)``.
            share: Milli taken from each touched GPU.
            cpu: CPU taken from the node.
        """
        u = self.workload.gpu_milli
        if touched.shape[1] == 1:
            # One touched GPU (every share and single-GPU pod): stay two-dimensional.
            before = touched
            after = before - share
            fit_before = before >= u
            fit_after = after >= u
            count = self.count[rows] + fit_after - fit_before
            big = self.big[rows] + (fit_after * after - fit_before * before)
        else:
            before3 = touched[:, :, None]
            after3 = before3 - share
            fit_before3 = before3 >= u
            fit_after3 = after3 >= u
            count = self.count[rows] + (fit_after3.sum(axis=1) - fit_before3.sum(axis=1))
            big = self.big[rows] + (fit_after3 * after3 - fit_before3 * before3).sum(axis=1)
        gpu_total = snapshot.gpu_free_total[rows] - share * touched.shape[1]
        return self.scaled_after(rows, gpu_total, snapshot.cpu_free[rows] - cpu, count, big)
