"""Plots of placement curves: unallocated GPU share against arrived load.

matplotlib is an optional dependency (the ``reports`` extra) and is imported only here, only when
a plot is asked for, with the headless Agg backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np


def plot_unallocated(
    curves: Mapping[str, Sequence[Sequence[float | None]]],
    out: Path,
    title: str,
    x_range: tuple[int, int] = (70, 130),
) -> None:
    """Median and 25-75 percentile band over seeds, one line per label.

    Args:
        curves: Label to per-seed curves (index = arrived percent, ``None`` = no data).
        out: PNG path to write.
        title: Plot title.
        x_range: Arrived-percent range shown.

    Raises:
        RuntimeError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("plotting needs matplotlib: pip install 'gpupool[reports]'") from exc
    lo, hi = x_range
    xs = np.arange(lo, hi + 1)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, runs in curves.items():
        data = np.array(
            [[np.nan if v is None else v for v in run] for run in runs], dtype=np.float64
        )[:, lo : hi + 1]
        median = np.nanmedian(data, axis=0)
        q25, q75 = np.nanpercentile(data, [25, 75], axis=0)
        (line,) = ax.plot(xs, median, label=label)
        ax.fill_between(xs, q25, q75, color=line.get_color(), alpha=0.2)
    ax.plot(xs, np.clip(100 - xs, 0, None), color="grey", linestyle=":", label="ideal")
    ax.set_xlabel("Arrived GPU workload (% of cluster GPU capacity)")
    ax.set_ylabel("Unallocated GPUs (% of capacity)")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
