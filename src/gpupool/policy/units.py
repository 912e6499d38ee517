"""GPU units: the one count of whole GPUs, shares and MIG slices that quota, cost and status use.

One whole GPU is one GPU unit, whatever its model. A share counts as the *larger* of its compute
and memory fractions, per GPU, times the GPU count: a pod holding 20% of the compute and 60% of
the memory keeps a 0.6 GPU from everyone else, and counting only compute would let a team hold
most of the memory of a cluster for almost nothing (peers' users report that fractional GPUs "do
not fit into quotas": counting shares this way is what lets them). A MIG slice counts as its
compute slices over the seven of an A100/H100/H200 (``1g.10gb`` = 1/7, ``3g.40gb`` = 3/7); an
attribute (``1g.10gb+me``) does not change the slice. Two rules keep a count from ever being
smaller than what is held:

* a memory cap on a GPU whose memory is unknown counts as the whole GPU (its fraction cannot be
  known, and a cap must not buy a share under a quota for nothing);
* a MIG profile that cannot be read counts as a whole GPU.

Units are integer milli-units, so quota sums are exact: a ceiling is never exceeded by a rounding
error, and ``quota_overrun_max`` can honestly be 0. Every other process (the cost ledger, the
GPUPool/GPUQueue status, the REST API, the reports and the dashboard) counts through
:func:`allocation_size` or :func:`milli_units`, so a team's bill, its quota and what the
dashboard shows cannot disagree (``tests/unit/test_one_gpu_unit.py``).

GPU memory held, in GiB, is counted here too: a whole GPU all of its memory, a share its cap or,
with no cap, its compute part of the GPU's memory (it has no cap but is expected to use no more
than its part), a MIG slice the memory its profile names (the nominal figure NVIDIA uses).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpupool.core.model import MILLI_PER_GPU, NodeSpec, PodSpec, RequestKind

MILLI_UNITS = 1000
"""Milli-units per GPU unit."""
MIG_COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU (A100, H100, H200): ``7g`` is the whole GPU."""
MIB_PER_GIB = 1024
_MIG_PROFILE = re.compile(r"^(?P<slices>[1-7])g\.(?P<memory>[1-9][0-9]*)gb(?:\+[a-z]+)?$")


class UnitsError(ValueError):
    """An allocation's size cannot be counted; the message starts with the field's name."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field_name = field_name


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG profile read from its name (``<slices>g.<memory>gb[+attribute]``).

    Attributes:
        compute_slices: Compute slices of the GPU instance (1 to 7).
        memory_gib: Nominal memory of the instance, from the name.
    """

    compute_slices: int
    memory_gib: int

    @property
    def milli_units(self) -> int:
        """Milli-units of one slice, rounded up (a slice never counts smaller than it is)."""
        return math.ceil(MILLI_UNITS * self.compute_slices / MIG_COMPUTE_SLICES)


def parse_mig_profile(profile: str) -> MigProfile | None:
    """Read a MIG profile name such as ``1g.10gb``, ``3g.40gb`` or ``1g.10gb+me``; None if odd."""
    match = _MIG_PROFILE.match(profile)
    if match is None:
        return None
    return MigProfile(int(match["slices"]), int(match["memory"]))


def mig_milli_units(profile: str) -> int:
    """Milli-units of one slice of ``profile`` (an unreadable name counts as a whole GPU)."""
    parsed = parse_mig_profile(profile)
    return parsed.milli_units if parsed is not None else MILLI_UNITS


def _share_milli(gpu_count: int, milli_per_gpu: int, memory_mib: int, gpu_memory_mib: int) -> int:
    compute = milli_per_gpu * MILLI_UNITS // MILLI_PER_GPU
    memory = 0
    if memory_mib:
        memory = (
            math.ceil(MILLI_UNITS * memory_mib / gpu_memory_mib) if gpu_memory_mib else MILLI_UNITS
        )
    return gpu_count * min(MILLI_UNITS, max(compute, memory))


def milli_units(pod: PodSpec, gpu_memory_mib: int) -> int:
    """Milli-units ``pod`` holds on GPUs of ``gpu_memory_mib`` MiB (0 when unknown).

    The quota's hot path (once per admitted pod): the same count as :func:`allocation_size`,
    without building the memory figure.

    Args:
        pod: The request.
        gpu_memory_mib: Memory of one GPU where the pod runs; the smallest of its pool when the
            node is not chosen yet, so a pending pod is never counted smaller than it will be.
    """
    kind = pod.kind
    if kind is RequestKind.NONE:
        return 0
    if kind is RequestKind.MIG:
        return mig_milli_units(pod.mig_profile)
    if kind is RequestKind.WHOLE:
        return pod.gpu_count * MILLI_UNITS
    return _share_milli(pod.gpu_count, pod.gpu_milli, pod.gpu_memory_mib, gpu_memory_mib)


def compute_fraction(pod: PodSpec) -> float:
    """The part of each of its GPUs' compute a pod was given: a share's compute, else all of it.

    NVML reports a process's SM utilisation as a part of the whole GPU, so a share capped at
    10 % of the compute reads at most about 10 % however hard it works. Thresholds on that
    number (the idle rule's) are scaled by this fraction; without it every share smaller than
    the threshold would look idle while it ran flat out. A MIG slice is its own device to NVML.
    """
    if pod.kind is RequestKind.SHARE:
        return max(1, min(pod.gpu_milli, MILLI_PER_GPU)) / MILLI_PER_GPU
    return 1.0


@dataclass(frozen=True, slots=True)
class AllocationSize:
    """What one allocation holds.

    Attributes:
        milli: GPU milli-units (the quota's integer count).
        memory_gib: GPU memory in GiB.
    """

    milli: int
    memory_gib: float

    @property
    def units(self) -> float:
        """GPU units (a whole GPU = 1): exactly the milli-units over 1000."""
        return self.milli / MILLI_UNITS


def allocation_size(
    kind: RequestKind,
    *,
    gpu_count: int = 0,
    milli_per_gpu: int = 0,
    memory_mib_per_gpu: int = 0,
    gpu_memory_mib: int = 0,
    mig_profile: str = "",
) -> AllocationSize:
    """GPU units and GPU memory of one allocation, from plain values (a record, a request).

    Args:
        kind: The request shape.
        gpu_count: GPUs given (whole or shared); ignored for MIG and CPU-only allocations.
        milli_per_gpu: Compute share of each GPU in milli-GPU (1000 = the whole GPU).
        memory_mib_per_gpu: Memory cap on each GPU in MiB; 0 means no cap.
        gpu_memory_mib: Memory of one GPU of the node in MiB; 0 when unknown.
        mig_profile: The MIG profile for a MIG slice.

    Raises:
        UnitsError: A value is negative, or a compute share is larger than its GPU.
    """
    for name, value in (
        ("gpu_count", gpu_count),
        ("milli_per_gpu", milli_per_gpu),
        ("memory_mib_per_gpu", memory_mib_per_gpu),
        ("gpu_memory_mib", gpu_memory_mib),
    ):
        if value < 0:
            raise UnitsError(name, f"must be >= 0, got {value}")
    if milli_per_gpu > MILLI_PER_GPU:
        raise UnitsError("milli_per_gpu", f"must be <= {MILLI_PER_GPU}, got {milli_per_gpu}")
    gpu_memory_gib = gpu_memory_mib / MIB_PER_GIB
    if kind is RequestKind.NONE:
        return AllocationSize(0, 0.0)
    if kind is RequestKind.MIG:
        profile = parse_mig_profile(mig_profile)
        if profile is None:
            return AllocationSize(MILLI_UNITS, gpu_memory_gib)
        return AllocationSize(profile.milli_units, float(profile.memory_gib))
    if kind is RequestKind.WHOLE:
        return AllocationSize(gpu_count * MILLI_UNITS, gpu_count * gpu_memory_gib)
    milli = _share_milli(gpu_count, milli_per_gpu, memory_mib_per_gpu, gpu_memory_mib)
    if memory_mib_per_gpu:
        memory_gib = memory_mib_per_gpu / MIB_PER_GIB
    else:
        memory_gib = milli_per_gpu / MILLI_PER_GPU * gpu_memory_gib
    return AllocationSize(milli, gpu_count * memory_gib)


def pod_size(pod: PodSpec, gpu_memory_mib: int) -> AllocationSize:
    """:func:`allocation_size` of a request placed on GPUs of ``gpu_memory_mib`` MiB."""
    return allocation_size(
        pod.kind,
        gpu_count=pod.gpu_count,
        milli_per_gpu=pod.gpu_milli,
        memory_mib_per_gpu=pod.gpu_memory_mib,
        gpu_memory_mib=gpu_memory_mib,
        mig_profile=pod.mig_profile,
    )


def node_milli_units(node: NodeSpec) -> int:
    """GPU milli-units a node offers: its whole GPUs and its MIG slices (a pool's capacity)."""
    slices = sum(count * mig_milli_units(profile) for profile, count in node.mig_slices)
    return node.gpu_count * MILLI_UNITS + slices


def format_units(milli: int) -> str:
    """``12000`` -> ``"12"``, ``2500`` -> ``"2.5"``: how GPU units appear in reasons."""
    return f"{milli / MILLI_UNITS:g}"
