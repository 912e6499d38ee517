"""A progress bar on stderr for multi-seed runs, fed by per-seed completion fractions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpupool.sim.replay.sweep import ProgressSink


@contextmanager
def seed_progress(seeds: Sequence[int], label: str) -> Iterator[ProgressSink]:
    """Yield a sink that takes ``(seed, fraction)`` and draws the overall progress."""
    done = dict.fromkeys(seeds, 0.0)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as progress:
        task = progress.add_task(label, total=float(len(seeds)))

        def update(seed: int, fraction: float) -> None:
            done[seed] = fraction
            progress.update(task, completed=sum(done.values()))

        yield update
