"""The dynamic workload: Poisson arrivals at a stated load, trace shapes, heavy-tailed durations.

The openb timestamps cannot be replayed as they are: pods are created over 149 days and every
deletion falls in the last 35, so a literal replay keeps about 1% of the cluster busy. Instead:

* **shapes** (CPU, memory, GPU count and share) are drawn uniformly, with replacement, from the
  trace's pods, so the mix of whole, shared and CPU-only requests is the trace's;
* **durations** are lognormal with a median of :data:`DURATION_MEDIAN_S` (15 minutes) and
  sigma :data:`DURATION_SIGMA` (1.2; mean about 31 minutes, 1% of pods over 4 hours), capped at
  :data:`DURATION_CAP_S` (24 hours). Job-length studies of shared GPU clusters (Philly, Helios,
  Alibaba PAI) report medians of minutes with a tail of jobs running for many hours; a
  lognormal has that heavy right tail yet a finite variance. The sigma is a compromise: half
  of the GPU time goes to pods longer than about an hour, and the cluster still reaches a steady
  state within the simulator's three-hour warm-up (a sigma of 1.5 needs more than ten hours).
  Duration is independent of shape (no trace field links them);
* **arrivals** are Poisson with rate ``rho * capacity / E[units * duration]``: the offered load,
  in GPU units, is ``rho`` times the cluster's GPUs;
* **teams** by a fixed rule on the shape (see :func:`assign`): whole-GPU pods are training,
  split between teams ``vision`` (60%) and ``nlp`` (40%) by a seeded draw; shares of at least
  half a GPU are ``serving`` (class inference); smaller shares and CPU-only pods are
  ``research`` (class dev). 10% of pods, drawn per pod, are urgent (pod priority 100), which
  exercises priority preemption inside a team;
* **declared runtimes**: half the pods declare ``gpupool.io/expected-runtime`` as their true
  duration times a uniform factor in [1, 3] (users overestimate); the others are learned;
* **node constraints**: a team may be given a node selector, required affinity and tolerations
  (``team_constraints``); every pod of that team carries them, as if its namespace's pods all
  had them in their spec. None by default, so the draws and the pods are the same as without.

All draws come from one seeded ``numpy`` generator, split into independent streams.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpupool.core.constraints import NodeConstraints
from gpupool.core.model import MILLI_PER_GPU, PodSpec, RequestKind
from gpupool.policy.workload import Workload

DURATION_MEDIAN_S = 900.0
DURATION_SIGMA = 1.2
DURATION_CAP_S = 24 * 3600.0
URGENT_FRACTION = 0.1
URGENT_PRIORITY = 100
DECLARED_FRACTION = 0.5
VISION_FRACTION = 0.6


def mean_duration() -> float:
    """Mean of the (uncapped) lognormal duration, seconds."""
    return DURATION_MEDIAN_S * math.exp(DURATION_SIGMA**2 / 2)


@dataclass(frozen=True, slots=True)
class Arrival:
    """One arriving pod of the process.

    Attributes:
        at: Arrival time, seconds.
        workload: The pod as policy sees it.
        duration: How long it runs once started, seconds.
    """

    at: float
    workload: Workload
    duration: float


def assign(pod: PodSpec, coin: float) -> tuple[str, str]:
    """Team (namespace) and class of a pod, by the rule of the module docstring."""
    kind = pod.kind
    if kind is RequestKind.WHOLE:
        return ("vision" if coin < VISION_FRACTION else "nlp"), "training"
    if kind is RequestKind.SHARE and pod.gpu_milli >= MILLI_PER_GPU // 2:
        return "serving", "inference"
    return "research", "dev"


class ArrivalProcess:
    """Draws arrivals one at a time.

    Args:
        shapes: Trace pods to draw shapes from.
        capacity_gpus: GPUs of the simulated cluster.
        rho: Offered load as a fraction of GPU capacity.
        rng: The run's generator.
        team_constraints: Node constraints of every pod of a team (by namespace).
    """

    def __init__(
        self,
        shapes: Sequence[PodSpec],
        capacity_gpus: int,
        rho: float,
        rng: np.random.Generator,
        team_constraints: Mapping[str, NodeConstraints] | None = None,
    ) -> None:
        if rho <= 0:
            raise ValueError(f"load must be > 0, got {rho}")
        if not shapes:
            raise ValueError("no pod shapes to draw from")
        self.shapes = list(shapes)
        self.rng = rng
        self.team_constraints = dict(team_constraints or {})
        mean_units = float(np.mean([pod.total_gpu_milli for pod in shapes])) / MILLI_PER_GPU
        if mean_units <= 0:
            raise ValueError("the trace requests no GPU, so load cannot be set by GPU capacity")
        self.rate = rho * capacity_gpus / (mean_units * mean_duration())
        """Arrivals per second."""
        self.clock = 0.0
        self.count = 0

    def next(self) -> Arrival:
        """The next arrival."""
        rng = self.rng
        self.clock += float(rng.exponential(1.0 / self.rate))
        shape = self.shapes[int(rng.integers(len(self.shapes)))]
        duration = min(
            DURATION_CAP_S, float(rng.lognormal(math.log(DURATION_MEDIAN_S), DURATION_SIGMA))
        )
        team, workload_class = assign(shape, float(rng.random()))
        urgent = float(rng.random()) < URGENT_FRACTION
        declared = None
        if float(rng.random()) < DECLARED_FRACTION:
            declared = duration * float(rng.uniform(1.0, 3.0))
        pod = replace(
            shape,
            name=f"p{self.count}",
            workload_class=workload_class,
            constraints=self.team_constraints.get(team),
        )
        self.count += 1
        workload = Workload(
            pod=pod,
            namespace=team,
            priority=URGENT_PRIORITY if urgent else 0,
            workload_class=workload_class,
            created_at=self.clock,
            expected_runtime=declared,
        )
        return Arrival(at=self.clock, workload=workload, duration=duration)
