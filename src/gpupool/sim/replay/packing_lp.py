"""The Gilmore-Gomory LP bound on packing fractional GPU shares into whole GPUs.

A share of ``s`` milli and the free space next to it can only be filled by other shares, so the
free compute left on share-hosting GPUs has a floor set by the multiset of share sizes alone:
1,078 shares of 810 milli leave at least 190 milli each unless something of at most 190 milli
joins them. This module computes that floor as the linear relaxation of the cutting-stock
problem over *maximal patterns* (multisets of sizes that fit in one GPU and admit no more),
optionally letting shares fail:

    minimise t
    subject to  t >= 1000 * sum(x_p) - volume(shares) + sum(size_s * f_s)   (sliver waste)
                t >= sum(size_s * f_s)                                       (failed volume)
                sum_p a_sp x_p + f_s >= count_s,   x, f >= 0

where ``x_p`` counts GPUs packed with pattern ``p`` and ``f_s`` the failed shares of size
``s``. The relaxation is never above any integral packing, so the value is a floor for every
policy, online or offline. ``bench/packing_floor.py`` applies it to the shares that arrive by
arrived = 100%; :mod:`gpupool.sim.replay.sweep` applies it to the shares one run placed, to show
how far that run's share-hosting GPUs are from the least free space its own shares allow.

scipy is imported only inside :func:`share_floor_milli` (it is in the ``reports`` extra), so
importing this module never fails on an install without it; calling it then raises
:class:`LPUnavailableError` with the install hint instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from gpupool.core.model import MILLI_PER_GPU, PodSpec, RequestKind


class LPUnavailableError(RuntimeError):
    """scipy, which solves the LP, is not installed."""


def is_compute_share(pod: PodSpec) -> bool:
    """A fractional GPU request with a compute share in ``1..999`` milli per GPU."""
    return pod.kind is RequestKind.SHARE and 0 < pod.gpu_milli < MILLI_PER_GPU


def share_sizes(pods: Iterable[PodSpec]) -> Counter[int]:
    """Per-GPU share sizes of the fractional GPU pods in ``pods``, one item per GPU held.

    Whole-GPU, CPU-only and MIG pods are left out, and so are memory-only shares (0 milli of
    compute), which take no compute space.
    """
    sizes: Counter[int] = Counter()
    for pod in pods:
        if is_compute_share(pod):
            sizes[pod.gpu_milli] += pod.gpu_count
    return sizes


def maximal_patterns(sizes: list[int], counts: list[int]) -> list[tuple[int, ...]]:
    """Every multiset of sizes (bounded by counts) that fits in one GPU and admits no more.

    Raises:
        ValueError: A size is not in ``1..1000`` or the two lists differ in length.
    """
    if len(sizes) != len(counts):
        raise ValueError(f"sizes and counts differ in length: {len(sizes)} != {len(counts)}")
    bad = [size for size in sizes if not 0 < size <= MILLI_PER_GPU]
    if bad:
        raise ValueError(f"share sizes must be in 1..{MILLI_PER_GPU} milli, got {bad[0]}")
    patterns: list[tuple[int, ...]] = []
    chosen: list[int] = []

    def extend(i: int, left: int) -> None:
        if i == len(sizes):
            if not any(chosen[j] < counts[j] and sizes[j] <= left for j in range(len(sizes))):
                patterns.append(tuple(chosen))
            return
        for k in range(min(counts[i], left // sizes[i]), -1, -1):
            chosen.append(k)
            extend(i + 1, left - k * sizes[i])
            chosen.pop()

    extend(0, MILLI_PER_GPU)
    return patterns


def share_floor_milli(shares: Counter[int], allow_failures: bool = True) -> float:
    """The LP lower bound, in milli-GPU, on max(sliver waste, failed volume) for ``shares``.

    With ``allow_failures=False`` every share must be placed (``f = 0``), and the value is the
    least free space the GPUs hosting them can be left with.

    Raises:
        LPUnavailableError: scipy is not installed.
        ValueError: A share size is outside ``1..1000``.
        RuntimeError: The solver did not reach an optimum.
    """
    shares = +shares  # drops zero and negative counts
    if not shares:
        return 0.0
    try:
        from scipy.optimize import linprog
    except ImportError as exc:
        raise LPUnavailableError(
            "the share-packing LP needs scipy: pip install 'gpupool[reports]'"
        ) from exc

    sizes = sorted(shares, reverse=True)
    counts = [shares[s] for s in sizes]
    patterns = np.array(maximal_patterns(sizes, counts), dtype=np.float64).T
    n_sizes, n_patterns = patterns.shape
    size_arr = np.array(sizes, dtype=np.float64)
    volume = float(size_arr @ np.array(counts, dtype=np.float64))
    # Variables: x (patterns), f (failures), t.
    cost = np.r_[np.zeros(n_patterns + n_sizes), 1.0]
    waste_row = np.r_[np.full(n_patterns, float(MILLI_PER_GPU)), size_arr, -1.0]
    failed_row = np.r_[np.zeros(n_patterns), size_arr, -1.0]
    cover = np.hstack([-patterns, -np.eye(n_sizes), np.zeros((n_sizes, 1))])
    a_ub = np.vstack([waste_row, failed_row, cover])
    b_ub = np.r_[volume, 0.0, -np.array(counts, dtype=np.float64)]
    bounds = [(0, None)] * n_patterns + [(0, None if allow_failures else 0)] * n_sizes
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[*bounds, (0, None)], method="highs")
    if result.status != 0:
        raise RuntimeError(f"LP failed: {result.message}")
    return float(result.fun)


def placed_share_floor_milli(shares: Counter[int]) -> float:
    """Least free compute, in milli-GPU, on the GPUs hosting ``shares`` if all of them are placed.

    Raises:
        LPUnavailableError: scipy is not installed.
    """
    return share_floor_milli(shares, allow_failures=False)
