"""Placing a pod whose GPUs come from a DRA claim: the same snapshot and policy, fewer GPUs.

A claim's request becomes an ordinary :class:`~gpupool.core.model.PodSpec` (whole, share or
MIG), so quotas, units, preemption and the placement policies treat it like any other pod. What a
claim adds is *which* GPUs it may use: its CEL selectors admit some devices of a node and not
others. That is a per-(node, GPU) mask over the snapshot's GPU columns, and it enters placement
in two places, both without changing the core:

* feasibility: :meth:`GpuEligibility.check` is a named node check (like a node selector) true
  where the node has enough GPUs that are both eligible and free for the pod;
* GPU choice: the policy chooses as usual; :func:`restrict_choice` keeps its choice when every
  chosen GPU is eligible (the common case: selectors that admit whole nodes), and otherwise takes
  the best fit among the eligible GPUs, so a selector is never overruled by a policy.

MIG slices are counted per profile in the snapshot; which instance a claim gets is a device
choice (:func:`choose_mig_device`) among the eligible instances no other claim holds.

Everything here is pure: the caller (the live scheduler, a test) owns the snapshot and binds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

import numpy as np

from gpupool.core.filtering import NodeCheck, eligible_gpus
from gpupool.core.model import PodSpec, RequestKind
from gpupool.core.snapshot import BoolArray, ClusterSnapshot

REASON_NO_ELIGIBLE = "node(s) had no free device matching the claim's selectors"
_NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class GpuEligibility:
    """The GPU columns a claim may use, per node row (absent rows: none).

    Attributes:
        columns: Node row to eligible GPU columns.
        mig_devices: Node row to eligible MIG device names (MIG requests only).
        mask: ``columns`` as a (node, GPU) mask of one snapshot's shape (:meth:`over`), so
            that the checks are array operations rather than a loop over the nodes, on every
            try of every claim pod.
    """

    columns: Mapping[int, frozenset[int]]
    mig_devices: Mapping[int, tuple[str, ...]] | None = None
    mask: BoolArray | None = field(default=None, compare=False, repr=False)

    @classmethod
    def over(
        cls, snapshot: ClusterSnapshot, columns: Mapping[int, frozenset[int]]
    ) -> GpuEligibility:
        """GPU columns of a whole-GPU or share claim, with their mask over ``snapshot``."""
        mask = np.zeros(snapshot.gpu_free.shape, dtype=np.bool_)
        for row, eligible in columns.items():
            mask[row, list(eligible)] = True
        return cls(columns, None, mask)

    def mask_for(self, snapshot: ClusterSnapshot) -> BoolArray | None:
        """The mask, if it was made for a snapshot of this shape."""
        mask = self.mask
        return mask if mask is not None and mask.shape == snapshot.gpu_free.shape else None

    def row_mask(self, snapshot: ClusterSnapshot, node: int) -> BoolArray:
        """Eligible GPU columns of one node as a mask over the snapshot's width."""
        mask = np.zeros(snapshot.gpu_free.shape[1], dtype=np.bool_)
        mask[list(self.columns.get(node, ()))] = True
        return mask

    def check(
        self, snapshot: ClusterSnapshot, pod: PodSpec, taken: Set[str] = frozenset()
    ) -> NodeCheck:
        """Nodes with enough eligible, free GPUs (or a free eligible MIG instance) for ``pod``."""
        passed = np.zeros(snapshot.size, dtype=np.bool_)
        if pod.kind is RequestKind.MIG:
            for node, names in (self.mig_devices or {}).items():
                passed[node] = any(name not in taken for name in names)
            return REASON_NO_ELIGIBLE, passed
        mask = self.mask_for(snapshot)
        if mask is not None:
            free = (eligible_gpus(snapshot, pod) & mask).sum(axis=1)
            return REASON_NO_ELIGIBLE, free >= pod.gpu_count
        for node in self.columns:
            free = eligible_gpus(snapshot, pod, node) & self.row_mask(snapshot, node)
            passed[node] = int(free.sum()) >= pod.gpu_count
        return REASON_NO_ELIGIBLE, passed

    def once_freed(self, snapshot: ClusterSnapshot, pod: PodSpec) -> NodeCheck:
        """Nodes whose eligible GPUs (or MIG instances) could hold ``pod`` once their pods went.

        For the victim search and backfill reservations, which ask where room could be made
        or will come: :meth:`check` passes only nodes with room now, so a claim pod on a full
        cluster found no node to preempt on and never held a reservation (a 2-GPU claim pod of
        priority 1000 waited for ever behind a 4-GPU one of priority 10). Which GPUs the victims
        free is the core's what-if; the placement after them is checked with :meth:`check`.
        """
        passed = np.zeros(snapshot.size, dtype=np.bool_)
        if pod.kind is RequestKind.MIG:
            passed[list((self.mig_devices or {}).keys())] = True
            return REASON_NO_ELIGIBLE, passed
        mask = self.mask_for(snapshot)
        if mask is not None:
            return REASON_NO_ELIGIBLE, mask.sum(axis=1) >= pod.gpu_count
        for node, columns in self.columns.items():
            passed[node] = len(columns) >= pod.gpu_count
        return REASON_NO_ELIGIBLE, passed


def fails_by_size(eligibility: GpuEligibility | None, snapshot: ClusterSnapshot) -> bool:
    """Whether a pod that found no room says that no pod of its shape finds room this cycle.

    Yes for a pod by extended resource (``None``) and for a claim pod whose selectors exclude
    no GPU (a claim of gpupool's class without any); a claim pod that failed for its selectors
    says nothing of others'. Without the second case the same pods asking by claim were tried
    where those by extended resource were skipped, and a skipped pod becomes the pool's blocked
    pod only behind another: ``gpupool sim dynamic --claims 1`` counted two backfills more in
    1,109 than the same run by extended resource.
    """
    if eligibility is None:
        return True
    if eligibility.mig_devices is not None:
        return False
    mask = eligibility.mask_for(snapshot)
    if mask is not None:
        return bool(np.all(mask | ~snapshot.gpu_exists))
    columns = eligibility.columns
    return all(
        columns.get(row, frozenset()).issuperset(range(node.gpu_count))
        for row, node in enumerate(snapshot.nodes)
    )


def restrict_choice(
    snapshot: ClusterSnapshot,
    pod: PodSpec,
    node: int,
    eligibility: GpuEligibility,
    chosen: Sequence[int],
) -> tuple[int, ...] | None:
    """The policy's GPUs if all eligible, else the best fit among eligible ones (None: none fit)."""
    allowed = eligibility.columns.get(node, frozenset())
    if set(chosen) <= allowed and len(chosen) == pod.gpu_count:
        return tuple(chosen)
    ok = eligible_gpus(snapshot, pod, node) & eligibility.row_mask(snapshot, node)
    if int(ok.sum()) < pod.gpu_count:
        return None
    key = np.where(ok, snapshot.gpu_free[node], _NEVER)
    return tuple(int(i) for i in np.argsort(key, kind="stable")[: pod.gpu_count])


def choose_mig_device(eligibility: GpuEligibility, node: int, taken: Set[str]) -> str | None:
    """The first eligible MIG instance of ``node`` no claim holds."""
    for name in (eligibility.mig_devices or {}).get(node, ()):
        if name not in taken:
            return name
    return None
