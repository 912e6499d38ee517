"""GPU units and GPU memory of one allocation: the quantities quotas and cost are counted in.

One whole GPU is one GPU unit, whatever its model. A share of a GPU counts as the *larger* of
its compute fraction and its memory fraction, per GPU, times the GPU count: a pod that takes
half of a GPU's memory but 10% of its compute still keeps every other pod out of that half, so
counting only compute would let a team hold most of the memory of the cluster for almost
nothing. A MIG slice counts as its compute slices over the GPU's seven (``1g.10gb`` = 1/7 of an
A100 or H100, ``3g.40gb`` = 3/7): the seven slices are what the hardware partitions, and the
profile name carries them, so the count is the same on every node.

GPU memory in GiB: a whole GPU counts all of its memory; a share counts its memory cap, or,
when it asked for compute only, its compute fraction of the GPU's memory (it has no cap, but it
is expected to use no more than its part); a MIG slice counts the memory in its profile name
(``1g.10gb`` = 10 GiB, the nominal figure NVIDIA's profile names use).

Everything works from plain values, so the scheduler's allocation record, the simulator and the
store all get the same numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpupool.core.model import MILLI_PER_GPU, RequestKind
from gpupool.governance.errors import FieldValueError

MIG_SLICES_PER_GPU = 7
"""Compute slices of a MIG-capable GPU (A100, H100, H200): ``7g`` is the whole GPU."""
MIB_PER_GIB = 1024

_MIG_PROFILE = re.compile(r"^(?P<slices>[1-7])g\.(?P<memory>[1-9][0-9]*)gb(?:\+[a-z]+)?$")


class UnitsError(FieldValueError):
    """An allocation's size cannot be counted; the message names the field."""


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
    def fraction(self) -> float:
        """The share of the GPU the slice counts as."""
        return self.compute_slices / MIG_SLICES_PER_GPU


def parse_mig_profile(profile: str) -> MigProfile:
    """Read a MIG profile name such as ``1g.10gb``, ``3g.40gb`` or ``1g.10gb+me``.

    Raises:
        UnitsError: The name does not have the ``<slices>g.<memory>gb`` form.
    """
    match = _MIG_PROFILE.match(profile)
    if match is None:
        raise UnitsError("mig_profile", f"expected <1-7>g.<memory>gb, got {profile!r}")
    return MigProfile(int(match["slices"]), int(match["memory"]))


@dataclass(frozen=True, slots=True)
class AllocationSize:
    """What one allocation holds, in the units accounting counts.

    Attributes:
        units: GPU units (a whole GPU = 1).
        memory_gib: GPU memory in GiB.
    """

    units: float
    memory_gib: float


def allocation_size(
    kind: RequestKind,
    *,
    gpu_count: int = 0,
    milli_per_gpu: int = 0,
    memory_mib_per_gpu: int = 0,
    gpu_memory_mib: int = 0,
    mig_profile: str = "",
) -> AllocationSize:
    """GPU units and GPU memory GiB of one allocation.

    Args:
        kind: The request shape.
        gpu_count: GPUs given (whole or shared); ignored for MIG and CPU-only allocations.
        milli_per_gpu: Compute share of each GPU in milli-GPU (1000 = the whole GPU).
        memory_mib_per_gpu: Memory cap on each GPU in MiB; 0 means no cap.
        gpu_memory_mib: Memory of one GPU of the node in MiB; 0 when unknown (a share then
            counts by compute only, and a whole GPU counts no memory).
        mig_profile: The MIG profile for a MIG slice.

    Raises:
        UnitsError: A value is negative, a share is larger than its GPU, or the MIG profile
            cannot be read.
    """
    for name, value in (
        ("gpu_count", gpu_count),
        ("milli_per_gpu", milli_per_gpu),
        ("memory_mib_per_gpu", memory_mib_per_gpu),
        ("gpu_memory_mib", gpu_memory_mib),
    ):
        if value < 0:
            raise UnitsError(name, f"must be >= 0, got {value}")
    if kind is RequestKind.NONE:
        return AllocationSize(0.0, 0.0)
    if kind is RequestKind.MIG:
        profile = parse_mig_profile(mig_profile)
        return AllocationSize(profile.fraction, float(profile.memory_gib))
    gpu_memory_gib = gpu_memory_mib / MIB_PER_GIB
    if kind is RequestKind.WHOLE:
        return AllocationSize(float(gpu_count), gpu_count * gpu_memory_gib)
    if milli_per_gpu > MILLI_PER_GPU:
        raise UnitsError("milli_per_gpu", f"must be <= {MILLI_PER_GPU}, got {milli_per_gpu}")
    if gpu_memory_mib and memory_mib_per_gpu > gpu_memory_mib:
        raise UnitsError(
            "memory_mib_per_gpu",
            f"{memory_mib_per_gpu} MiB is more than the GPU's {gpu_memory_mib} MiB",
        )
    compute = milli_per_gpu / MILLI_PER_GPU
    memory_fraction = memory_mib_per_gpu / gpu_memory_mib if gpu_memory_mib else 0.0
    if memory_mib_per_gpu:
        memory_gib = memory_mib_per_gpu / MIB_PER_GIB
    else:
        memory_gib = compute * gpu_memory_gib
    return AllocationSize(gpu_count * max(compute, memory_fraction), gpu_count * memory_gib)
