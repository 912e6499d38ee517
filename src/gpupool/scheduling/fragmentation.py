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
                snapshot.memory_free[stale],
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
        memory: IntArray,
        count: IntArray,
        big: FloatArray,
    ) -> FloatArray:
        """Fragmentation (times ``W``) of nodes ``rows`` in a given, possibly hypothetical, state.

        Args:
            rows: Node index of each state (may repeat).
            gpu_total: Free GPU milli of each state.
            cpu: Free CPU of each state.
            memory: Free memory of each state (FGD's measure ignores it).
            count: ``cnt`` per state and shape.
            big: ``big`` per state and shape (integer-valued floats, so sums stay exact).
        """
        usable: FloatArray = self.usable(rows, cpu, memory, count, big) @ self.workload.weight
        return self.total_weight * gpu_total - usable

    def shape_fits(self, rows: IntArray, cpu: IntArray, count: IntArray) -> BoolArray:
        """Per state and shape: the node has the model, enough fitting GPUs and the CPU."""
        wl = self.workload
        fits: BoolArray = (
            self.access[rows]
            & (count >= wl.gpu_count[None, :])
            & (cpu[:, None] >= wl.cpu_milli[None, :])
        )
        return fits

    def usable(
        self, rows: IntArray, cpu: IntArray, memory: IntArray, count: IntArray, big: FloatArray
    ) -> FloatArray:
        """Per state and shape, the free GPU milli the shape can use: ``big`` where it fits."""
        usable: FloatArray = big * self.shape_fits(rows, cpu, count)
        return usable

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
        memory: int = 0,
    ) -> FloatArray:
        """Fragmentation (times ``W``) if each node in ``rows`` gave ``share`` milli to each GPU.

        Args:
            snapshot: The cluster (already refreshed through :meth:`refresh`).
            rows: Node index per hypothetical state.
            touched: Free milli of the GPUs each state takes from, shape ``(states, k)``.
            share: Milli taken from each touched GPU.
            cpu: CPU taken from the node.
            memory: Memory taken from the node.
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
        return self.scaled_after(
            rows,
            gpu_total,
            snapshot.cpu_free[rows] - cpu,
            snapshot.memory_free[rows] - memory,
            count,
            big,
        )


class ResourceAwareIndex(FragmentationIndex):
    """FGD's measure, with the GPU a shape can use capped by the node's CPU and memory.

    FGD counts all of ``big_m`` as usable by shape ``m`` as soon as *one* pod of ``m`` fits
    the node's CPU. A node of 8 free GPUs and 12 free vCPU is then as good for 1-GPU pods of
    11 vCPU as one with 96 vCPU, although only one of its GPUs can ever be used; FGD only sees
    the loss when the last pod's worth of CPU goes, so it lets CPU-only and CPU-heavy pods
    drain the CPU of nodes whose GPUs then stay idle. Here shape ``m`` can use at most as
    much GPU as the copies of it that the free CPU and memory hold would take::

        usable_m = min(big_m, floor(cpu * G_m / c_m), floor(memory * G_m / mem_m))

    with ``G_m = k_m * u_m`` the shape's GPU milli (floored so that sums stay exact). Memory
    enters only when the workload knows each shape's memory (the online learner does) and
    ``use_memory`` is left on (``bench/placement_ablation.py`` turns it off to measure it), and
    a shape then also needs its memory to fit at all.
    """

    def __init__(
        self, snapshot: ClusterSnapshot, workload: TargetWorkload, *, use_memory: bool = True
    ) -> None:
        gpu_milli = (workload.gpu_count * workload.gpu_milli).astype(np.float64)
        self._gpu_per_cpu = gpu_milli / np.maximum(workload.cpu_milli, 1)
        memory = workload.memory_mib if use_memory else None
        self._memory_need = memory
        self._gpu_per_memory = None if memory is None else gpu_milli / np.maximum(memory, 1.0)
        super().__init__(snapshot, workload)

    def usable(
        self, rows: IntArray, cpu: IntArray, memory: IntArray, count: IntArray, big: FloatArray
    ) -> FloatArray:
        """As :meth:`FragmentationIndex.usable`, with CPU and memory capping ``big``.

        The arrays are ``states x shapes`` (about 2,000 x 35 for a share on the openb cluster),
        so every step works in place: each temporary of that size costs as much as the
        arithmetic on it.
        """
        fits = self.shape_fits(rows, cpu, count)
        usable = _floored_outer(cpu, self._gpu_per_cpu)
        np.minimum(usable, big, out=usable)
        if self._gpu_per_memory is not None and self._memory_need is not None:
            fits &= memory[:, None] >= self._memory_need[None, :]
            np.minimum(usable, _floored_outer(memory, self._gpu_per_memory), out=usable)
        usable *= fits
        return usable


def _floored_outer(amounts: IntArray, per_unit: FloatArray) -> FloatArray:
    """``floor(amounts[:, None] * per_unit[None, :])``: GPU milli that the amounts can feed."""
    out: FloatArray = np.multiply.outer(amounts.astype(np.float64), per_unit)
    np.floor(out, out=out)
    return out
