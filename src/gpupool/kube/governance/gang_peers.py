"""When governance reclaims or cleans up a pod of a gang, its gang goes with it.

A gang's pods make progress only together: a worker reclaimed alone (idle, past its time limit,
crash-looping) leaves its peers holding GPUs for nothing. So the pod's running peers, the bound
pods of its PodGroup, go with it, each with the same rule and the gang named in
its values, unless the PodGroup lets its pods go alone (``disruptionMode: single``), as
preemption does (:mod:`gpupool.scheduling.gang_eviction`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpupool.governance.decisions import Cleanup, Reclaim
from gpupool.kube.objects.pod_groups import group_key
from gpupool.kube.objects.records import PodRecord
from gpupool.scheduling.decisions import GangSpec


def with_gang(
    pod: PodRecord,
    decision: Reclaim | Cleanup,
    pods: Mapping[str, PodRecord],
    gangs: Mapping[str, GangSpec],
) -> list[tuple[PodRecord, Reclaim | Cleanup]]:
    """``pod`` with ``decision``, then each running peer of its gang with the same rule."""
    key = group_key(pod)
    spec = gangs.get(key)
    if not key or (spec is not None and spec.evict_alone):
        return [(pod, decision)]
    peers = sorted(
        (
            peer
            for peer in pods.values()
            if peer.metadata.uid != pod.metadata.uid
            and peer.spec.node_name
            and peer.metadata.deletion_timestamp is None
            and group_key(peer) == key
        ),
        key=lambda peer: peer.key,
    )
    values = {**decision.values, "gang": key, "with": pod.key}
    return [
        (pod, decision),
        *((peer, replace(decision, pod_uid=peer.metadata.uid, values=values)) for peer in peers),
    ]
