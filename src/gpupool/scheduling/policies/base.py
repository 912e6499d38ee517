"""Shared defaults for placement policies."""

from __future__ import annotations

from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.gpu_choice import best_fit_gpus

MAX_SPEC_CPU = 128_000
"""Normalising constant for CPU in milli-cores (the FGD simulator's ``MaxSpecCpu``)."""
MAX_SPEC_GPU = 8_000
"""Normalising constant for GPU in milli-GPU (the FGD simulator's ``MaxSpecGpu``)."""


class PolicyBase:
    """Defaults: no online learning, best-fit GPU choice."""

    name = "base"

    def observe(self, pod: PodSpec) -> None:
        """Offline policies ignore arrivals."""

    def select_gpus(self, snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> tuple[int, ...]:
        """Best fit inside the node."""
        return best_fit_gpus(snapshot, pod, node)
