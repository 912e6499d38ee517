"""A gang is evicted whole: when preemption or reclaim takes one of its pods, the rest go too.

The pods of a gang only make progress together; a worker evicted alone leaves its peers holding
GPUs for nothing (Kubernetes 1.37 calls this ``disruptionMode: All``). So a victim choice that
names a pod of a gang is widened to every running pod of that gang, wherever it runs, and the
work they lose is added to the choice's cost. The choice still made room on its node with the
victims it named; the peers free more than was needed, never less.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gpupool.policy.workload import Running
from gpupool.scheduling.preemption import VictimChoice, lost_gpu_seconds


def whole_gangs(choice: VictimChoice, running: Mapping[str, Running], now: float) -> VictimChoice:
    """``choice`` with every running pod of each gang one of its victims belongs to."""
    gangs = {
        record.workload.gang
        for name in choice.victims
        if (record := running.get(name)) is not None and record.workload.gang
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
