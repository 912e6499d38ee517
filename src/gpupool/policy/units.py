"""GPU units: one number for whole GPUs, shares and MIG slices, so one quota can hold them all.

A whole GPU is one unit; a share counts as the larger of its compute and memory fractions (a
pod holding 20% of the compute and 60% of the memory keeps a 0.6 GPU from everyone else); a MIG
slice counts as its compute slices over the seven of an A100/H100. Peers' users report that
fractional GPUs "do not fit into quotas": counting shares this way is what lets them.

Units are kept as integer milli-units so that quota sums are exact: a ceiling is never exceeded
by a rounding error, and ``quota_overrun_max`` can honestly be 0.
"""

from __future__ import annotations

import math
import re

from gpupool.core.model import MILLI_PER_GPU, PodSpec, RequestKind

MILLI_UNITS = 1000
"""Milli-units per GPU unit."""
MIG_COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU (A100, H100)."""
_MIG_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb$")


def mig_milli_units(profile: str) -> int:
    """Milli-units of one slice of ``profile`` (``"3g.40gb"`` is 3/7 of a GPU).

    An unreadable profile counts as a whole GPU, so an odd name can never slip under a quota.
    """
    match = _MIG_PROFILE.match(profile)
    if match is None:
        return MILLI_UNITS
    slices = min(int(match.group(1)), MIG_COMPUTE_SLICES)
    return math.ceil(MILLI_UNITS * slices / MIG_COMPUTE_SLICES)


def milli_units(pod: PodSpec, gpu_memory_mib: int) -> int:
    """Milli-units ``pod`` holds on GPUs of ``gpu_memory_mib`` MiB (0 when unknown).

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
    compute = pod.gpu_milli * MILLI_UNITS // MILLI_PER_GPU
    memory = 0
    if pod.gpu_memory_mib:
        memory = (
            math.ceil(MILLI_UNITS * pod.gpu_memory_mib / gpu_memory_mib)
            if gpu_memory_mib
            else MILLI_UNITS
        )
    return pod.gpu_count * min(MILLI_UNITS, max(compute, memory))


def format_units(milli: int) -> str:
    """``12000`` -> ``"12"``, ``2500`` -> ``"2.5"``: how GPU units appear in reasons."""
    return f"{milli / MILLI_UNITS:g}"
