"""Policy names as the CLI and configuration spell them, and how to build each policy.

A policy may need the seeded generator of its run (Random) or the trace's target workload (FGD,
which is given the workload mix in advance, as in the paper). ``default`` is gpupool's own policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpupool.core.framework import PlacementPolicy
from gpupool.core.model import PodSpec
from gpupool.scheduling.policies.bestfit import BestFitPolicy
from gpupool.scheduling.policies.clustering import ClusteringPolicy
from gpupool.scheduling.policies.dotprod import DotProdPolicy
from gpupool.scheduling.policies.fgd import FGDPolicy
from gpupool.scheduling.policies.gpupool_default import GpupoolPolicy
from gpupool.scheduling.policies.packing import PackingPolicy
from gpupool.scheduling.policies.randomfit import RandomPolicy
from gpupool.scheduling.workload import TargetWorkload


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy may be built from.

    Attributes:
        rng: The run's seeded generator for policy randomness.
        trace_pods: The whole trace, for policies that are told the workload in advance.
    """

    rng: np.random.Generator
    trace_pods: Sequence[PodSpec]


PolicyFactory = Callable[[PolicyContext], PlacementPolicy]

PUBLISHED: dict[str, PolicyFactory] = {
    "random": lambda ctx: RandomPolicy(ctx.rng),
    "dotprod": lambda ctx: DotProdPolicy(),
    "clustering": lambda ctx: ClusteringPolicy(),
    "packing": lambda ctx: PackingPolicy(),
    "bestfit": lambda ctx: BestFitPolicy(),
    "fgd": lambda ctx: FGDPolicy(TargetWorkload.from_pods(ctx.trace_pods)),
}
"""The six policies of the FGD paper, in the paper's order."""

DEFAULT_POLICY = "default"
"""gpupool's own policy, which learns the workload online."""


def policy_names() -> list[str]:
    """Every accepted policy name."""
    return [*PUBLISHED, DEFAULT_POLICY]


def build_policy(name: str, context: PolicyContext) -> PlacementPolicy:
    """Construct the policy called ``name``.

    Raises:
        ValueError: Unknown name; the message lists the valid ones.
    """
    if name == DEFAULT_POLICY:
        return GpupoolPolicy()
    factory = PUBLISHED.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(policy_names())}")
    return factory(context)
