"""What a GPU hole is worth: the free compute it is expected to keep for good.

FGD's fragmentation looks one pod ahead: a hole of ``h`` milli counts as fragment for every
shape that does not fit in it *now*. That is why it happily puts a 320-milli share into the
530-milli hole next to a 470 share: the 210 milli left are "fragment" either way, and the
530 were fragment for every shape above 530. But the 530 hole would most likely have been
closed by the next 470 (60 milli left for good), while the 210 hole stays open for good on
the openb traces: only about 1.4% of the GPU pods are small enough for it, and a thousand
190-milli holes next to 810-milli shares compete for them.

:func:`expected_leftover` puts a number on that. For a hole of ``h`` milli, the next GPU pod
that fits is drawn from the learned mix (shapes weighted by how often they arrive); it leaves
``h - u`` and the recursion goes on until nothing fits::

    E(h) = (1 - a(h)) * h + a(h) * sum_m p_m [u_m <= h] E(h - u_m) / P(h)
    P(h) = sum_m p_m [u_m <= h],   a(h) = min(1, P(h) / FILL_SHARE)

``a(h)`` is the chance that the hole is filled at all. It models scarcity: a hole that many
arriving pods fit is filled for sure, a hole that only a rare few fit is mostly left as it is,
since many such holes compete for the few pods. Without it (``a = 1`` whenever anything fits)
every hole looks fillable and the term stops discriminating: measured, it then gains nothing
(docs/benchmarks.md, section 3).

A hole can only be filled by a pod that also finds CPU and memory on its node. A hole on a node
whose free CPU or memory is below what every pod that fits the hole asks for is kept for good,
whatever ``E`` says: :meth:`HoleTable.kept` counts it at its full size. Without that check the
term happily leaves a 530-milli hole next to a CPU-heavy 470 share on a node with 4 vCPU left
(the 470 shares of the default trace ask for 8 to 12 vCPU); at arrived = 100% such dead holes
were 0.87 of the 4.46 points of share slivers, and with the check 0.59 (seeds 42-44). The check
uses the least CPU and the least memory over the fitting shapes, which may come from two
different shapes, so it errs on the side of calling a hole alive.

Placing a share of ``s`` milli on a GPU with ``h`` free then changes what the GPU is expected to
keep for good by ``kept(h - s, cpu - c, memory - m) - kept(h, cpu, memory)``; the policy adds
that to FGD's fragmentation delta.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.core.snapshot import IntArray
from gpupool.scheduling.workload import TargetWorkload

FloatArray = npt.NDArray[np.float64]

FILL_SHARE = 0.03
"""Share of the arriving GPU pods that must fit a hole for it to count as sure to be filled.

An empirical setting, not a derived one: on the default openb trace (seeds 42-44, before the
CPU/memory check below went in) 0.01 to 0.07 all helped and 0.03 most (docs/benchmarks.md,
section 3). About 1.4% of that trace's GPU pods fit the 190-milli holes next to 810-milli
shares, so such a hole counts as half likely to be closed; in the runs about 7% are."""


def expected_leftover(
    workload: TargetWorkload, capacity: int, fill_share: float = FILL_SHARE
) -> FloatArray:
    """``E(h)`` for ``h = 0 .. capacity`` milli (see the module docstring).

    Computed in blocks: ``E(h)`` only reads values at least the smallest GPU shape below
    ``h``, so a block of that width is one vectorised step.

    Raises:
        ValueError: ``capacity`` is negative or ``fill_share`` is not positive.
    """
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    if fill_share <= 0:
        raise ValueError(f"fill_share must be > 0, got {fill_share}")
    gpu = workload.gpu_milli > 0
    sizes = workload.gpu_milli[gpu]
    leftover = np.arange(capacity + 1, dtype=np.float64)
    if sizes.size == 0:
        return leftover
    share = workload.weight[gpu] / workload.weight[gpu].sum()
    step = int(sizes.min())
    for start in range(step, capacity + 1, step):
        holes = np.arange(start, min(start + step, capacity + 1))
        fits = sizes[None, :] <= holes[:, None]
        weights = fits * share[None, :]
        fitting = weights.sum(axis=1)
        after = leftover[np.where(fits, holes[:, None] - sizes[None, :], 0)]
        filled = np.divide(
            (weights * after).sum(axis=1), fitting, out=holes.astype(np.float64), where=fitting > 0
        )
        chance = np.minimum(1.0, fitting / fill_share)
        leftover[holes] = (1.0 - chance) * holes + chance * filled
    return leftover


def least_needs(workload: TargetWorkload, capacity: int) -> tuple[FloatArray, FloatArray]:
    """Per hole size ``0 .. capacity``: the least CPU and memory of a GPU shape that fits it.

    Infinite where no shape fits; memory 0 when the workload does not know it.
    """
    gpu = workload.gpu_milli > 0
    sizes = workload.gpu_milli[gpu]
    memory = workload.memory_mib
    needs = (
        workload.cpu_milli[gpu].astype(np.float64),
        np.zeros(sizes.size) if memory is None else memory[gpu],
    )
    fits = sizes[None, :] <= np.arange(capacity + 1)[:, None]
    cpu, mem = (np.where(fits, need[None, :], np.inf).min(axis=1, initial=np.inf) for need in needs)
    return cpu, mem


@dataclass(frozen=True, slots=True)
class HoleTable:
    """What a hole of each size is expected to keep for good, and what a pod filling it needs.

    Attributes:
        leftover: ``E(h)`` for ``h = 0 .. capacity`` (:func:`expected_leftover`).
        cpu_need: Least CPU of a GPU shape that fits ``h``.
        memory_need: Least memory of a GPU shape that fits ``h``.
    """

    leftover: FloatArray
    cpu_need: FloatArray
    memory_need: FloatArray

    @classmethod
    def build(
        cls, workload: TargetWorkload, capacity: int, fill_share: float = FILL_SHARE
    ) -> HoleTable:
        """The table for ``workload`` on GPUs of at most ``capacity`` milli."""
        cpu_need, memory_need = least_needs(workload, capacity)
        return cls(expected_leftover(workload, capacity, fill_share), cpu_need, memory_need)

    def kept(self, free: IntArray, cpu: IntArray, memory: IntArray) -> FloatArray:
        """Expected milli kept for good by holes of ``free`` milli, given the node's CPU and memory.

        ``E(free)`` if a pod that fits the hole could still find its CPU and memory there,
        ``free`` otherwise.
        """
        alive = (cpu >= self.cpu_need[free]) & (memory >= self.memory_need[free])
        kept: FloatArray = np.where(alive, self.leftover[free], free)
        return kept
