"""The FGD paper's replay protocol: order, inflation and the per-seed node order.

* Pods are sorted by name and shuffled with the run's seed; timestamps are ignored.
* The workload is tuned to ``ratio`` (1.3) times the cluster's GPU capacity. Below the target,
  clones drawn uniformly with replacement from the original pods are appended after the
  shuffled originals, until the first draw that would exceed the target; as in the authors'
  code that check adds the draw's per-GPU share, not its total, so a multi-GPU draw can
  overshoot, and the overshoot stays. Above the target, uniformly random pods are removed
  until it is met.
* Score ties are broken by a random node ranking drawn once per seed.

One seed drives everything through independent child streams (numpy ``SeedSequence.spawn``), so
changing a policy's use of randomness never changes the arrivals of the same seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpupool.core.model import MILLI_PER_GPU, NodeSpec, PodSpec
from gpupool.core.snapshot import IntArray

DEFAULT_TUNE_RATIO = 1.3


@dataclass(frozen=True, slots=True)
class RunStreams:
    """Independent random streams of one seeded run."""

    order: np.random.Generator
    tuning: np.random.Generator
    nodes: np.random.Generator
    policy: np.random.Generator

    @classmethod
    def from_seed(cls, seed: int) -> RunStreams:
        """Spawn the four streams of ``seed``."""
        order, tuning, nodes, policy = (
            np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(4)
        )
        return cls(order=order, tuning=tuning, nodes=nodes, policy=policy)


def tune_arrivals(
    pods: Sequence[PodSpec],
    total_gpus: int,
    streams: RunStreams,
    ratio: float = DEFAULT_TUNE_RATIO,
) -> list[PodSpec]:
    """Shuffle the trace and inflate or deflate it to ``ratio`` of the GPU capacity.

    Raises:
        ValueError: ``ratio`` is not positive or the trace asks for no GPU at all.
    """
    if ratio <= 0:
        raise ValueError(f"tune ratio must be > 0, got {ratio}")
    ordered = sorted(pods, key=lambda pod: pod.name)
    requested = sum(pod.total_gpu_milli for pod in ordered)
    if requested <= 0:
        raise ValueError("the trace requests no GPU, so it cannot be tuned to GPU capacity")
    arrivals = [ordered[i] for i in streams.order.permutation(len(ordered))]
    target = ratio * total_gpus * MILLI_PER_GPU
    if requested < target:
        clone = 0
        while True:
            drawn = ordered[int(streams.tuning.integers(len(ordered)))]
            if requested + drawn.gpu_milli > target:
                break
            arrivals.append(replace(drawn, name=f"{drawn.name}-tuned-{clone}"))
            requested += drawn.total_gpu_milli
            clone += 1
    else:
        while requested > target:
            removed = arrivals.pop(int(streams.tuning.integers(len(arrivals))))
            requested -= removed.total_gpu_milli
    return arrivals


def tie_ranks(node_count: int, streams: RunStreams) -> IntArray:
    """A random rank per node; among equal scores the lowest rank wins."""
    return streams.nodes.permutation(node_count).astype(np.int64)


@dataclass(frozen=True, slots=True)
class SeededRun:
    """Everything one seed fixes before a replay starts.

    Attributes:
        arrivals: The shuffled, tuned arrival order.
        tie_rank: The per-seed node ranking for score ties.
        policy_rng: The stream a policy may draw from (Random's picks).
        total_gpus: GPUs in the cluster.
    """

    arrivals: list[PodSpec]
    tie_rank: IntArray
    policy_rng: np.random.Generator
    total_gpus: int


def seeded_run(
    nodes: Sequence[NodeSpec],
    pods: Sequence[PodSpec],
    seed: int,
    ratio: float = DEFAULT_TUNE_RATIO,
) -> SeededRun:
    """Draw the arrivals, the node ranking and the policy stream of ``seed``."""
    streams = RunStreams.from_seed(seed)
    total_gpus = sum(node.gpu_count for node in nodes)
    return SeededRun(
        arrivals=tune_arrivals(pods, total_gpus, streams, ratio),
        tie_rank=tie_ranks(len(nodes), streams),
        policy_rng=streams.policy,
        total_gpus=total_gpus,
    )
