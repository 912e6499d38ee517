"""The topology domains a gang may start in: nodes sharing one value of its PodGroup's label.

Kubernetes 1.37's PodGroup ``schedulingConstraints.topology[].key`` (for example
``topology.kubernetes.io/rack``) asks for every pod of the group in one domain: the nodes whose
label has one value. A node without the label is in no domain. A gang with pods already running
may only add to their domain; otherwise the domains are tried fullest first (least free GPU,
then by value), so a gang packs into the domain it fills best and leaves the emptier ones whole
for larger gangs, as the placement policy packs GPUs on nodes.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpupool.core.filtering import NodeCheck
from gpupool.core.snapshot import ClusterSnapshot


def domain_checks(
    snapshot: ClusterSnapshot, key: str, running_nodes: Iterable[int]
) -> list[NodeCheck]:
    """One node check per domain of ``key`` the gang may use, in the order to try them."""
    values = [dict(node.labels).get(key) for node in snapshot.nodes]
    held = {values[node] for node in running_nodes}
    if held:
        allowed = sorted(value for value in held if value is not None)[:1] if len(held) == 1 else []
    else:
        allowed = sorted({value for value in values if value is not None})
    labels = np.array([value or "" for value in values], dtype=object)
    masks = {value: labels == value for value in allowed}
    free = {value: int(snapshot.gpu_free_total[mask].sum()) for value, mask in masks.items()}
    order = sorted(allowed, key=lambda value: (free[value], value))
    return [(f"node(s) outside {key}={value}", masks[value]) for value in order]
