"""Per-event metrics binned by arrived load, as the authors' analysis scripts do.

After every pod event the replay records the allocated GPU milli, the cumulative GPU milli that
has arrived (failed pods included) and the cluster's fragmentation. The x axis is
``round(arrived / total_gpus / 10)``, the arrived load in percent of GPU capacity, rounded half
to even like Python's ``round``; each point is the mean over the events in its bin, or over the
bins on either side when the bin itself is empty.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

MAX_ARRIVED_PCT = 130
REPORTED_ARRIVED_PCT = (90, 95, 100, 110, 120, 130)
"""Arrived loads the benchmark JSON reports."""


def arrived_percent(arrived_milli: npt.NDArray[np.int64], total_gpus: int) -> FloatArray:
    """Arrived GPU load in percent of capacity, per event (unrounded)."""
    return arrived_milli / total_gpus / 10


def bin_by_arrival(
    arrived_milli: npt.NDArray[np.int64],
    values: FloatArray,
    total_gpus: int,
    max_pct: int = MAX_ARRIVED_PCT,
) -> FloatArray:
    """Mean of ``values`` per integer arrived percent ``0..max_pct``; NaN where no event is near."""
    bins = np.rint(arrived_percent(arrived_milli, total_gpus)).astype(np.int64)
    keep = (bins >= 0) & (bins <= max_pct + 1)
    sums = np.bincount(bins[keep], weights=values[keep], minlength=max_pct + 2)
    counts = np.bincount(bins[keep], minlength=max_pct + 2).astype(np.float64)
    out = np.full(max_pct + 1, np.nan)
    for x in range(max_pct + 1):
        if counts[x]:
            out[x] = sums[x] / counts[x]
        else:
            lo, hi = max(x - 1, 0), x + 2
            near = counts[lo:hi].sum()
            if near:
                out[x] = sums[lo:hi].sum() / near
    return out
