"""A gang is evicted whole: when preemption or reclaim takes one of its pods, the rest go too.

The pods of a gang only make progress together; a worker evicted alone leaves its peers holding
GPUs for nothing (Kubernetes 1.37's ``disruptionMode: all``, and gpupool's default when the
PodGroup names none). So a victim choice that names a pod of such a gang is widened to every
running pod of that gang, wherever it runs, and the work they lose is added to the choice's
cost. The choice still made room on its node with the victims it named; the peers free more
than was needed, never less. A gang whose PodGroup says ``disruptionMode: single`` (the Job
controller's default) loses only the pods chosen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpupool.policy.workload import Running
from gpupool.scheduling.decisions import GangSpec
from gpupool.scheduling.preemption import VictimChoice, lost_gpu_seconds


def whole_gangs(
    choice: VictimChoice,
    running: Mapping[str, Running],
    now: float,
    gangs_asked: Mapping[str, GangSpec],
) -> VictimChoice:
    """``choice`` with every running pod of each gang one of its victims belongs to.

    Not for gangs whose PodGroup lets their pods go alone (``gangs_asked``).
    """
    gangs = {
        gang
        for name in choice.victims
        if (record := running.get(name)) is not None
        and (gang := record.workload.gang)
        and not ((spec := gangs_asked.get(gang)) is not None and spec.evict_alone)
    }
    if not gangs:
        return choice
    chosen = set(choice.victims)
    peers = tuple(
        sorted(
            name
            for name, record in running.items()
            if record.workload.gang in gangs and name not in chosen
        )
    )
    lost = sum(lost_gpu_seconds(running[name], now) for name in peers)
    return replace(
        choice, victims=choice.victims + peers, gpu_seconds_lost=choice.gpu_seconds_lost + lost
    )
