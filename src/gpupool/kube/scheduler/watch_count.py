"""How many watches one scheduler replica holds open: its client needs a connection for each.

The replica's client keeps a fixed pool of connections (:meth:`KubeAPI.from_kubeconfig`), and
a watch holds one for as long as it runs. A pool sized for the binds and the report writers but
short of the watches lets the watches take the binds' connections; short by more than the binds
have, and a request waits for a connection until it times out. Every group of informers states
its count here, so adding one cannot leave the pool short again (the default topology spread's
and the PodGroups' watches once did, and a governance test's requests timed out).
"""

from __future__ import annotations

from gpupool.kube.scheduler.default_spread import SPREAD_WATCHES
from gpupool.kube.scheduler.dra.claim_informers import CLAIM_WATCHES
from gpupool.kube.scheduler.gang_book import GANG_WATCHES
from gpupool.kube.scheduler.volume_informers import VOLUME_WATCHES

CORE_WATCHES = 5
"""Pods, nodes, GPUPools, GPUQueues and PodDisruptionBudgets."""


def scheduler_watches(claims: bool) -> int:
    """The watches of a replica (``claims``: it places DRA claim pods, four watches more)."""
    return (
        CORE_WATCHES
        + VOLUME_WATCHES
        + SPREAD_WATCHES
        + GANG_WATCHES
        + (CLAIM_WATCHES if claims else 0)
    )
