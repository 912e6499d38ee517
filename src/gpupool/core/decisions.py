"""Decisions are data: the core says what should happen and a backend makes it happen.

The simulator applies a :class:`Bind` to its snapshot; the Kubernetes backend turns it into a
Binding plus the allocation annotation, and a :class:`Reject` into an Event and a pod condition.
Each decision carries what is needed to explain it later.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.core.model import PodSpec


@dataclass(frozen=True, slots=True)
class Bind:
    """Place ``pod`` on a node and give it the listed GPUs.

    Attributes:
        pod: The pod being placed.
        node: Row index of the chosen node in the snapshot.
        node_name: Name of the chosen node.
        gpus: GPU indexes on that node (empty for CPU-only and MIG pods).
        score: The winning score, or ``None`` when only one node was feasible and scoring was
            skipped.
        feasible_nodes: How many nodes passed the filter.
    """

    pod: PodSpec
    node: int
    node_name: str
    gpus: tuple[int, ...]
    score: float | None
    feasible_nodes: int


@dataclass(frozen=True, slots=True)
class Reject:
    """No node can take ``pod`` now.

    Attributes:
        pod: The pod that could not be placed.
        message: A kube-scheduler style sentence, e.g. ``"0/3 nodes are available: ..."``.
        reasons: Rejected-node counts per reason, most frequent first.
    """

    pod: PodSpec
    message: str
    reasons: tuple[tuple[str, int], ...]


Decision = Bind | Reject
