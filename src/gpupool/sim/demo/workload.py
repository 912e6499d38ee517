"""The bundled workload of ``gpupool demo``: ten nodes, four teams, every kind of request.

Small enough to read on one screen, busy enough to show every rule at work:

* **nodes**: 4 H100 nodes (8 GPUs of 80 GB) in the Exclusive pool, 4 A100 nodes (8 of 80 GB)
  in the Shared pool, 2 A100 nodes cut into MIG slices (14 ``1g.10gb`` and 2 ``3g.40gb`` each);
  pools and queues in ``configs/demo.yaml``;
* **teams** (Poisson arrivals, lognormal durations with the stated medians, sigma 0.8):
  ``vision`` trains on 1, 2 or 4 whole GPUs (median 40 min); ``nlp`` on 8 (median 60 min);
  ``serving`` runs inference shares of 25-50 % of a GPU with 10-30 GB (median 90 min, priority
  50); ``research`` runs notebooks of 10-30 % with 5-15 GB and MIG slices (median 30 min), and
  one in four of its notebooks sits idle, holding its share without using it;
* **load**: the rates offer about 1.2 times what the pools hold, so queues form, ceilings and
  guarantees bite, and pods wait with reasons.

Every draw comes from one seeded generator, so a demo run is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpupool.core.model import NodeSpec, PodSpec
from gpupool.policy.workload import Workload
from gpupool.sim.demo.embedded import Submission

POOL_LABEL = "demo.gpupool.io/pool"
GPU_MEMORY_MIB = 81_920
DURATION_SIGMA = 0.8
IDLE_NOTEBOOKS = 0.25

PodMaker = Callable[[np.random.Generator, str], PodSpec]


def demo_nodes() -> list[NodeSpec]:
    """The demo's ten nodes."""
    nodes = []
    for group, model, count in (("exclusive", "H100", 4), ("shared", "A100", 4)):
        for i in range(count):
            nodes.append(
                NodeSpec(
                    name=f"{model.lower()}-{i}",
                    cpu_milli=192_000,
                    memory_mib=1_048_576,
                    gpu_count=8,
                    gpu_model=model,
                    gpu_memory_mib=GPU_MEMORY_MIB,
                    labels=((POOL_LABEL, group), ("gpupool.io/gpu-model", model)),
                )
            )
    for i in range(2):
        nodes.append(
            NodeSpec(
                name=f"a100-mig-{i}",
                cpu_milli=192_000,
                memory_mib=1_048_576,
                mig_slices=(("1g.10gb", 14), ("3g.40gb", 2)),
                labels=((POOL_LABEL, "mig"), ("gpupool.io/gpu-model", "A100")),
            )
        )
    return nodes


def _whole(counts: tuple[int, ...]) -> PodMaker:
    def make(rng: np.random.Generator, name: str) -> PodSpec:
        gpus = int(rng.choice(counts))
        return PodSpec(
            name, cpu_milli=8000 * gpus, memory_mib=65_536 * gpus, gpu_count=gpus, gpu_milli=1000
        )

    return make


def _share(low: int, high: int, memory_gb: tuple[int, int]) -> PodMaker:
    def make(rng: np.random.Generator, name: str) -> PodSpec:
        percent = int(rng.integers(low // 5, high // 5 + 1)) * 5
        memory = int(rng.integers(memory_gb[0], memory_gb[1] + 1)) * 1024
        return PodSpec(
            name,
            cpu_milli=4000,
            memory_mib=16_384,
            gpu_count=1,
            gpu_milli=percent * 10,
            gpu_memory_mib=memory,
        )

    return make


def _notebook(rng: np.random.Generator, name: str) -> PodSpec:
    if rng.random() < 0.3:
        profile = "3g.40gb" if rng.random() < 0.2 else "1g.10gb"
        return PodSpec(name, cpu_milli=2000, memory_mib=8192, mig_profile=profile)
    return _share(10, 30, (5, 15))(rng, name)


@dataclass(frozen=True, slots=True)
class Team:
    """One team's stream of pods.

    Attributes:
        name: Queue and namespace.
        workload_class: ``gpupool.io/class`` of its pods.
        per_hour: Mean arrivals per simulated hour.
        median_minutes: Median run time.
        make: Draws one pod's request.
        priority: Pod priority.
        idle: Share of its pods that sit idle.
    """

    name: str
    workload_class: str
    per_hour: float
    median_minutes: float
    make: PodMaker
    priority: int = 0
    idle: float = 0.0


TEAMS = (
    Team("vision", "training", 14.0, 40.0, _whole((1, 2, 4))),
    Team("nlp", "training", 2.0, 60.0, _whole((8,))),
    Team("serving", "inference", 22.0, 90.0, _share(25, 50, (10, 30)), priority=50),
    Team("research", "dev", 45.0, 30.0, _notebook, idle=IDLE_NOTEBOOKS),
)


class DemoArrivals:
    """Poisson arrivals of every team, drawn step by step.

    Args:
        seed: Seed of the one generator all draws come from.
    """

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def arrivals(self, now: float, seconds: float) -> list[Submission]:
        """The pods that arrive during ``seconds`` after ``now``, in time order."""
        drawn: list[tuple[float, Submission]] = []
        for team in TEAMS:
            for _ in range(int(self.rng.poisson(team.per_hour * seconds / 3600.0))):
                at = now + float(self.rng.uniform(0.0, seconds))
                drawn.append((at, self._submission(team, at)))
        drawn.sort(key=lambda item: item[0])
        return [submission for _, submission in drawn]

    def _submission(self, team: Team, at: float) -> Submission:
        self.count += 1
        name = f"{team.name}/{team.workload_class}-{self.count:05d}"
        median = team.median_minutes * 60.0
        duration = float(self.rng.lognormal(math.log(median), DURATION_SIGMA))
        workload = Workload(
            pod=team.make(self.rng, name),
            namespace=team.name,
            priority=team.priority,
            workload_class=team.workload_class,
            created_at=at,
        )
        return Submission(workload, duration, idle=bool(self.rng.random() < team.idle))
