"""Where the unallocated GPU capacity of a replay goes at arrived = 100%.

One number, "unallocated GPU %", hides three different losses, and a policy can only work on
some of them:

* **share slivers** (part a): free compute on GPUs that host at least one share (a GPU whose
  free compute is below 1000 milli). Only other shares can fill it; its floor is set by the
  share sizes (see :mod:`gpupool.sim.replay.packing_lp`).
* **stranded whole GPUs** (part b): fully free GPUs on nodes that no GPU pod of the arrived
  workload fits on, because the node's free CPU and memory together are below every GPU pod's
  CPU and memory request (a node is *short* when, for every GPU pod shape ``(cpu, memory)``,
  ``cpu > free cpu`` or ``memory > free memory``). These GPUs are lost to CPU or memory, not to
  packing. The same test applied to share-hosting GPUs tells how much of part a sits on such
  nodes, where no share can fill it whatever its size.
* **other whole free GPUs** (part c): fully free GPUs on nodes with the CPU and memory for at
  least one GPU pod (what GPU-model constraints or multi-GPU shapes leave).

a + b + c is the unallocated capacity exactly (integers in milli-GPU; MIG slices are not
counted, as the replay does not count them). Next to them, part d is the failed share volume:
the compute that shares which arrived by the mark asked for and did not get. Without part d a
run that fails shares looks as good as one that packs them, which is how the "no policy can go
below 3.82%" claim went wrong: that floor holds only when no arrived share fails.

The snapshot at the mark is rebuilt from the replay's final snapshot by releasing the pods that
arrived after the mark (arrivals only, no departures, so the state is a function of the bound
set), then restored; the replay loop itself pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.core.snapshot import BoolArray, ClusterSnapshot
from gpupool.sim.replay.packing_lp import is_compute_share, share_sizes


@dataclass(frozen=True, slots=True)
class UnallocatedBreakdown:
    """The unallocated GPU compute of one snapshot, split by cause, in milli-GPU.

    Attributes:
        capacity_milli: GPU compute of the cluster.
        share_gpu_free_milli: (a) free compute on GPUs hosting at least one share.
        share_gpu_free_on_short_milli: The part of (a) on nodes short of CPU or memory, which
            no share can use either.
        short_node_free_milli: (b) fully free GPUs on nodes short of CPU or memory.
        other_free_milli: (c) fully free GPUs on the other nodes.
        failed_share_milli: (d) compute asked by failed shares (not part of the sum).
        failed_shares: How many shares failed.
        failed_gpu_milli: Compute asked by every failed GPU pod, shares and whole GPUs. At an
            exact mark of capacity it equals the unallocated compute, since what arrived and
            did not fail is what is allocated.
        short_nodes: Nodes with at least one fully free GPU that are short of CPU or memory.
    """

    capacity_milli: int
    share_gpu_free_milli: int
    share_gpu_free_on_short_milli: int
    short_node_free_milli: int
    other_free_milli: int
    failed_share_milli: int
    failed_shares: int
    failed_gpu_milli: int
    short_nodes: int

    @property
    def unallocated_milli(self) -> int:
        """Parts a + b + c: all free GPU compute."""
        return self.share_gpu_free_milli + self.short_node_free_milli + self.other_free_milli

    def pct(self, milli: float) -> float:
        """``milli`` as a percentage of the cluster's GPU capacity."""
        return milli / self.capacity_milli * 100.0


def split_unallocated(
    snapshot: ClusterSnapshot, workload: Sequence[PodSpec], failed: Sequence[PodSpec]
) -> UnallocatedBreakdown:
    """Split ``snapshot``'s free GPU compute into parts a, b and c, and measure part d.

    Args:
        snapshot: The cluster state to split.
        workload: The pods that define "short": a node is short when none of the GPU pods
            among them fits its free CPU and memory. With no GPU pod, no node is short.
        failed: The pods that failed; their shares give part d.

    Raises:
        ValueError: The snapshot has no GPU.
    """
    if snapshot.total_gpus == 0:
        raise ValueError("the snapshot has no GPU, so there is no GPU capacity to split")
    exists = snapshot.gpu_exists
    free = snapshot.gpu_free
    partly_used = exists & (free < MILLI_PER_GPU)
    whole_free = exists & (free == MILLI_PER_GPU)
    whole_free_per_node = whole_free.sum(axis=1)
    short = _short_nodes(snapshot, workload)
    failed_shares = share_sizes(failed)
    return UnallocatedBreakdown(
        capacity_milli=snapshot.total_gpus * MILLI_PER_GPU,
        share_gpu_free_milli=int(free[partly_used].sum()),
        share_gpu_free_on_short_milli=int(free[partly_used & short[:, None]].sum()),
        short_node_free_milli=int(whole_free_per_node[short].sum()) * MILLI_PER_GPU,
        other_free_milli=int(whole_free_per_node[~short].sum()) * MILLI_PER_GPU,
        failed_share_milli=sum(size * count for size, count in failed_shares.items()),
        failed_shares=sum(1 for pod in failed if is_compute_share(pod)),
        failed_gpu_milli=sum(pod.total_gpu_milli for pod in failed),
        short_nodes=int(np.count_nonzero(short & (whole_free_per_node > 0))),
    )


def _short_nodes(snapshot: ClusterSnapshot, workload: Sequence[PodSpec]) -> BoolArray:
    """Nodes whose free CPU and memory fit none of the GPU pods' (cpu, memory) requests."""
    shapes = {(pod.cpu_milli, pod.memory_mib) for pod in workload if pod.gpu_count > 0}
    if not shapes:
        return np.zeros(snapshot.size, dtype=np.bool_)
    wanted = np.array(sorted(shapes), dtype=np.int64)
    fits = (snapshot.cpu_free[:, None] >= wanted[None, :, 0]) & (
        snapshot.memory_free[:, None] >= wanted[None, :, 1]
    )
    short: BoolArray = ~np.any(fits, axis=1)
    return short


@dataclass(frozen=True, slots=True)
class MarkSplit:
    """A replay's state when the arrived GPU demand reached a mark.

    Attributes:
        arrived: Pods that arrived by the mark (cumulative arrived GPU milli <= mark).
        breakdown: The unallocated split of the snapshot right after the last of them.
        placed_shares: Per-GPU share sizes of the shares placed by then (for the LP floor).
    """

    arrived: int
    breakdown: UnallocatedBreakdown
    placed_shares: dict[int, int]


def arrived_by(arrivals: Sequence[PodSpec], mark_milli: int) -> int:
    """How many of ``arrivals`` arrive before their cumulative GPU milli exceeds ``mark_milli``."""
    arrived = 0
    for count, pod in enumerate(arrivals):
        arrived += pod.total_gpu_milli
        if arrived > mark_milli:
            return count
    return len(arrivals)


def split_at_mark(
    final: ClusterSnapshot, arrivals: Sequence[PodSpec], mark_milli: int
) -> MarkSplit:
    """Split the unallocated capacity as it stood when the arrived demand reached ``mark_milli``.

    ``final`` is the snapshot an arrivals-only replay of ``arrivals`` ended with (every pod bound
    once or failed for good). The pods that arrived after the mark are released for the split
    and bound again afterwards, so ``final`` is unchanged when this returns.
    """
    count = arrived_by(arrivals, mark_milli)
    before, after = arrivals[:count], arrivals[count:]
    placed = [pod for pod in before if _bound(final, pod)]
    failed = [pod for pod in before if not _bound(final, pod)]
    later = [pod.name for pod in after if _bound(final, pod)]
    restore = final.simulate_removal(later)
    try:
        breakdown = split_unallocated(final, before, failed)
    finally:
        restore()
    return MarkSplit(arrived=count, breakdown=breakdown, placed_shares=dict(share_sizes(placed)))


def _bound(snapshot: ClusterSnapshot, pod: PodSpec) -> bool:
    allocation = snapshot.allocations.get(pod.name)
    return allocation is not None and allocation.pod is pod
