"""Learning the workload mix online, from the pods that have arrived so far.

A real scheduler is never handed the trace: it sees pods one at a time. :class:`OnlineWorkload`
keeps an exponentially decayed count per request shape (the same shape key FGD uses), so the
mix tracks drift, and turns it into a :class:`~gpupool.scheduling.workload.TargetWorkload`
every few pods, with the mean memory request of each shape (the key has no memory, but a node
whose memory runs out strands its GPUs as surely as one whose CPU does). Decay is applied
lazily: instead of multiplying every count by ``gamma`` on each arrival, new arrivals are added
with weight ``gamma ** -n``; only the ratios matter.

Weights are rounded to integers (after scaling) when the workload is built, so that the
fragmentation sums computed from them stay exact (see :mod:`gpupool.scheduling.workload`).
"""

from __future__ import annotations

from collections import defaultdict

from gpupool.core.model import PodSpec
from gpupool.scheduling.workload import DEFAULT_COVERAGE, ShapeKey, TargetWorkload, shape_key

WEIGHT_RESOLUTION = 1000.0
"""The heaviest shape gets about this integer weight when a workload is built."""
FORGET_BELOW = 1e-6
"""A shape whose decayed weight falls below this share of a new arrival's is forgotten."""
MAX_SHAPES = 4096
"""Most distinct shapes kept; beyond it the lightest are forgotten first.

Without a bound, a long-running scheduler that sees ever new request shapes (every notebook
asking for a slightly different memory size) would keep every shape it ever saw: the decay makes
old shapes irrelevant to the decision, but not to memory.
"""


class OnlineWorkload:
    """A decayed histogram of request shapes.

    During the first ``rebuild_every`` arrivals the workload is rebuilt on every arrival, so the
    first pods are already placed against the mix seen so far.

    Args:
        half_life: Arrivals after which an observation counts half as much.
        rebuild_every: Arrivals between two rebuilds of the target workload.
        coverage: Share of the (decayed) pods the typical shapes must cover.
    """

    def __init__(
        self,
        half_life: float = 5000.0,
        rebuild_every: int = 50,
        coverage: float = DEFAULT_COVERAGE,
    ) -> None:
        if half_life <= 0:
            raise ValueError(f"half_life must be > 0, got {half_life}")
        if rebuild_every < 1:
            raise ValueError(f"rebuild_every must be >= 1, got {rebuild_every}")
        self.coverage = coverage
        self.rebuild_every = rebuild_every
        self._growth = 2.0 ** (1.0 / half_life)
        self._boost = 1.0
        self._counts: defaultdict[ShapeKey, float] = defaultdict(float)
        self._memory: defaultdict[ShapeKey, float] = defaultdict(float)
        """Decayed sum of the memory requests per shape, weighted as ``_counts``."""
        self._since_build = 0
        self._built: TargetWorkload | None = None
        self.observed = 0

    def observe(self, pod: PodSpec) -> None:
        """Count one arrival."""
        key = shape_key(pod)
        self._counts[key] += self._boost
        self._memory[key] += self._boost * pod.memory_mib
        self._boost *= self._growth
        self.observed += 1
        self._since_build += 1
        if self._boost > 1e100:  # renormalise long before floats overflow
            self._counts = _scaled(self._counts, 1.0 / self._boost)
            self._memory = _scaled(self._memory, 1.0 / self._boost)
            self._boost = 1.0
        if len(self._counts) > MAX_SHAPES:
            self._prune()

    def _prune(self) -> None:
        """Forget shapes that no longer count, and the lightest beyond :data:`MAX_SHAPES`."""
        floor = self._boost * FORGET_BELOW
        kept = sorted(
            ((v, k) for k, v in self._counts.items() if v >= floor),
            key=lambda item: item[0],
            reverse=True,
        )[: MAX_SHAPES // 2]
        self._counts = defaultdict(float, {k: v for v, k in kept})
        self._memory = defaultdict(float, {k: self._memory[k] for _, k in kept})

    def shares(self) -> dict[ShapeKey, float]:
        """Current decayed share of each shape (sums to 1)."""
        total = sum(self._counts.values())
        return {key: value / total for key, value in self._counts.items()}

    def current(self) -> TargetWorkload | None:
        """The workload to plan for now; ``None`` before the first arrival."""
        if not self._counts:
            return None
        warming_up = self.observed <= self.rebuild_every
        if self._built is None or warming_up or self._since_build >= self.rebuild_every:
            top = max(self._counts.values())
            scaled = {
                key: max(1.0, round(value / top * WEIGHT_RESOLUTION))
                for key, value in self._counts.items()
            }
            memory = {key: self._memory[key] / value for key, value in self._counts.items()}
            self._built = TargetWorkload.from_counts(scaled, self.coverage, memory)
            self._since_build = 0
        return self._built


def _scaled(values: dict[ShapeKey, float], factor: float) -> defaultdict[ShapeKey, float]:
    return defaultdict(float, {key: value * factor for key, value in values.items()})
