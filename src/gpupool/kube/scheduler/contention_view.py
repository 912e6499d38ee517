"""The contended GPUs of the live cluster: the agents' signals joined with the pods on the GPUs.

Read from the scheduler's node and pod caches (nothing is asked of the API server), for the
control plane's ``/metrics``, the REST API and ``gpupool report``. A signal older than a few of
its agent's publication periods is left out (:mod:`gpupool.governance.freshness`): an agent that
stopped publishing must not keep a GPU on the contended list for ever. A pod's class is the one
policy counts (:func:`~gpupool.policy.membership.pod_class`: its label only where its queue
allows it), the class the congestion view groups by.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from gpupool.core.contention import AffectedShare, ContendedGpu, ContentionLevel
from gpupool.governance.freshness import is_stale
from gpupool.kube.objects.contention_signal import read_contention
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.timestamps import parse_time
from gpupool.kube.objects.vocabulary import LABEL_CLASS, LABEL_QUEUE
from gpupool.kube.scheduler.live import LiveScheduler
from gpupool.policy.membership import pod_class
from gpupool.policy.spec import QueueSpec


def _share(
    uid: str, slowdown: float, pod: PodRecord | None, queues: Sequence[QueueSpec]
) -> AffectedShare:
    if pod is None:
        return AffectedShare(uid, "", slowdown)
    meta = pod.metadata
    labels = meta.labels
    workload_class = pod_class(
        queues, meta.namespace, labels.get(LABEL_QUEUE, ""), labels.get(LABEL_CLASS, "")
    )
    return AffectedShare(f"{meta.namespace}/{meta.name}", workload_class, slowdown)


def contended_gpus(
    nodes: Iterable[NodeRecord],
    pods: Mapping[str, PodRecord],
    queues: Sequence[QueueSpec],
    uuids: Mapping[str, Sequence[str]],
    now: float,
) -> list[ContendedGpu]:
    """Every GPU a fresh agent signal calls contended, by node and index.

    Args:
        nodes: The nodes (their ``gpupool.io/gpu-contention`` annotations).
        pods: The pods by UID (who the signal's pod UIDs are).
        queues: The queues, which decide each pod's class.
        uuids: Each node's GPU UUIDs in index order.
        now: The time, for freshness.
    """
    found = []
    for node in sorted(nodes, key=lambda n: n.key):
        signal = read_contention(node.metadata.annotations, node.key)
        if signal is None or is_stale(parse_time(signal.sampled_at), signal.period_seconds, now):
            continue
        listed = uuids.get(node.key, ())
        for index, entry in sorted(signal.gpus.items()):
            if entry.level == ContentionLevel.NONE.value:
                continue
            shares = sorted(
                (_share(uid, ratio, pods.get(uid), queues) for uid, ratio in entry.pods.items()),
                key=lambda share: share.pod,
            )
            found.append(
                ContendedGpu(
                    node=node.key,
                    gpu=index,
                    level=ContentionLevel(entry.level),
                    score=entry.score,
                    reasons=entry.reasons,
                    shares=tuple(shares),
                    gpu_uuid=listed[index] if index < len(listed) else "",
                    sm_percent=entry.sm_percent,
                    memory_busy_percent=entry.memory_busy_percent,
                )
            )
    return found


def live_contention(scheduler: LiveScheduler) -> list[ContendedGpu]:
    """The contended GPUs of ``scheduler``'s caches now (call in its event loop)."""
    state = scheduler.state
    return contended_gpus(
        state.nodes.values(),
        state.pods,
        scheduler.policies.config.queues,
        state.uuids,
        time.time(),
    )
