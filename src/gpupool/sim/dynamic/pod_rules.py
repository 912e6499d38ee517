"""A share of the simulated workload that carries kube's pod rules, to measure what they cost.

Inference services spread their replicas: one per node by required pod anti-affinity, or evenly
by a topology spread constraint. gpupool honours both (:mod:`gpupool.core.pod_relative`), and
both cost placement freedom: a replica may not go to the node fragmentation would choose. Here a
chosen share of the GPU pods joins one of :data:`GROUPS` replica groups (label ``app``) with one
of the two rules over ``kubernetes.io/hostname``, so ``gpupool sim dynamic --anti-affinity F
--spread F`` measures that cost against the same run without them. The choice hashes the pod's
name, as the claims share does: the same pods in every run and for every setting.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

from gpupool.core.model import PodSpec, RequestKind
from gpupool.core.pod_terms import (
    DO_NOT_SCHEDULE,
    AffinityTerm,
    LabelSelector,
    PodTerms,
    SpreadConstraint,
)

HOSTNAME = "kubernetes.io/hostname"
"""The topology key of both rules; the simulated nodes carry it, as kubelets label theirs."""
GROUP_LABEL = "app"
GROUPS = 64
DRAW = 10_000
RULED_KINDS = (RequestKind.WHOLE, RequestKind.SHARE)


@dataclass(frozen=True, slots=True)
class PodRuleShares:
    """Fractions of the GPU pods with each rule (a pod gets one at most).

    Attributes:
        anti_affinity: Required anti-affinity to their group on the hostname.
        spread: A DoNotSchedule spread of their group over hostnames, maxSkew 1.
    """

    anti_affinity: float = 0.0
    spread: float = 0.0

    def __post_init__(self) -> None:
        for name in ("anti_affinity", "spread"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}: must be within 0..1, got {getattr(self, name)}")
        if self.anti_affinity + self.spread > 1:
            raise ValueError("anti_affinity + spread: must be at most 1")

    @property
    def any(self) -> bool:
        """Whether any pod gets a rule."""
        return self.anti_affinity > 0 or self.spread > 0


def _draw(text: str) -> int:
    return zlib.crc32(text.encode()) % DRAW


def with_pod_rules(pod: PodSpec, shares: PodRuleShares) -> tuple[PodSpec, str]:
    """``pod`` with its group's label and rule if the draw chooses it, and the rule's name."""
    if not shares.any or pod.kind not in RULED_KINDS:
        return pod, ""
    draw = _draw(pod.name)
    if draw < shares.anti_affinity * DRAW:
        rule = "anti_affinity"
    elif draw < (shares.anti_affinity + shares.spread) * DRAW:
        rule = "spread"
    else:
        return pod, ""
    group = (GROUP_LABEL, f"g{_draw(pod.name + '/group') % GROUPS}")
    selector = LabelSelector(match_labels=(group,))
    if rule == "anti_affinity":
        terms = PodTerms(anti_affinity=(AffinityTerm(HOSTNAME, selector, None),))
    else:
        terms = PodTerms(spread=(SpreadConstraint(1, HOSTNAME, DO_NOT_SCHEDULE, selector),))
    labels = tuple(sorted({**dict(pod.labels), group[0]: group[1]}.items()))
    return replace(pod, labels=labels, terms=terms), rule
