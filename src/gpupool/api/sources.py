"""Two :class:`~gpupool.api.view.ClusterView` implementations: a snapshot, the live scheduler.

:class:`SnapshotView` serves any :class:`~gpupool.core.snapshot.ClusterSnapshot` with a list of
pending pods: the tests' fixture cluster and the demo's simulator. :class:`LiveView` reads a
running :class:`~gpupool.kube.live.LiveScheduler` at request time (its cache's snapshot, pod
records and queue entries) and writes nothing: the request runs in the scheduler's own loop
between two awaits, so it sees a consistent cache, and reading the pending pods' requests with
:func:`~gpupool.kube.translate.pod_spec` instead of the state's spec cache keeps even that cache
untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.api.model import Pool, Queue
from gpupool.api.view import PodInfo, Waiting, team_of
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.live import LiveScheduler, _pod_order
from gpupool.kube.records import PodRecord
from gpupool.kube.translate import InvalidObjectError, pod_spec
from gpupool.kube.vocabulary import LABEL_QUEUE


@dataclass
class SnapshotView:
    """A snapshot and its pending pods, as given.

    Args:
        cluster: The snapshot (pods are named ``namespace/name``; the team is the namespace
            unless ``info`` says otherwise).
        waiting_pods: Pending pods with their reasons, in scheduling order.
        info: Who pods are, by snapshot name (default: from the name).
        uuids: GPU UUIDs per node.
        source: What to report as the source.
    """

    cluster: ClusterSnapshot | None
    waiting_pods: Sequence[tuple[PodSpec, str]] = ()
    info: Mapping[str, PodInfo] = field(default_factory=dict)
    uuids: Mapping[str, Sequence[str]] = field(default_factory=dict)
    source: str = "snapshot"
    pool_list: Sequence[Pool] = ()
    queue_list: Sequence[Queue] = ()

    def snapshot(self) -> ClusterSnapshot | None:
        """The snapshot."""
        return self.cluster

    def pod_info(self, pod_id: str) -> PodInfo:
        """From ``info``, or ``namespace/name`` with the namespace as team."""
        return self.info.get(pod_id) or PodInfo(key=pod_id, team=team_of(pod_id))

    def gpu_uuids(self, node: str) -> Sequence[str]:
        """From ``uuids``."""
        return self.uuids.get(node, ())

    def waiting(self) -> list[Waiting]:
        """The pending pods as given."""
        return [
            Waiting(spec, self.pod_info(spec.name), reason) for spec, reason in self.waiting_pods
        ]

    def pools(self) -> list[Pool]:
        """As given."""
        return list(self.pool_list)

    def queues(self) -> list[Queue]:
        """As given."""
        return list(self.queue_list)


def _info(pod: PodRecord) -> PodInfo:
    meta = pod.metadata
    return PodInfo(
        key=f"{meta.namespace}/{meta.name}",
        team=meta.labels.get(LABEL_QUEUE) or meta.namespace,
        since=meta.creation_timestamp,
    )


@dataclass
class LiveView:
    """The live scheduler's cache and queue, read at request time."""

    scheduler: LiveScheduler

    @property
    def source(self) -> str:
        """``live``, or ``live (standby)`` on a replica that does not schedule."""
        return "live" if self.scheduler.leading else "live (standby: no snapshot)"

    def snapshot(self) -> ClusterSnapshot | None:
        """The leader's snapshot; None on a standby."""
        return self.scheduler.state.snapshot

    def pod_info(self, pod_id: str) -> PodInfo:
        """From the pod's record (uid ``pod_id``)."""
        pod = self.scheduler.state.pods.get(pod_id)
        return _info(pod) if pod is not None else PodInfo(key=pod_id, team="unknown")

    def gpu_uuids(self, node: str) -> Sequence[str]:
        """From the node's ``gpupool.io/gpu-uuids`` annotation."""
        return self.scheduler.state.uuids.get(node, ())

    def waiting(self) -> list[Waiting]:
        """The pending pods of this scheduler with the queue's reasons."""
        state = self.scheduler.state
        entries = self.scheduler.queue.entries
        records = sorted(
            (state.pods[uid] for uid in state.pending if uid in state.pods), key=_pod_order
        )
        result = []
        for pod in records:
            entry = entries.get(pod.metadata.uid)
            try:
                spec: PodSpec | None = pod_spec(pod)
            except InvalidObjectError:
                spec = None
            result.append(
                Waiting(
                    spec,
                    _info(pod),
                    entry.reason if entry else "",
                    entry.attempts if entry else 0,
                )
            )
        return result

    def pools(self) -> list[Pool]:
        """None yet: GPUPool objects are not read by the scheduler."""
        return []

    def queues(self) -> list[Queue]:
        """None yet: GPUQueue objects are not read by the scheduler."""
        return []
