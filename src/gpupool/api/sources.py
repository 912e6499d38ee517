"""The cluster views: a snapshot, the live scheduler, and the copy requests are computed from.

:class:`SnapshotView` serves any :class:`~gpupool.core.snapshot.ClusterSnapshot` with a list of
pending pods: the example cluster and the demo's simulator. :class:`LiveView` reads a running
:class:`~gpupool.kube.live.LiveScheduler` (its cache's snapshot, pod records and queue entries).

Neither is read by the request handlers directly: a handler takes :meth:`detached` in the
owner's event loop (a copy of the snapshot's arrays and of the dicts, milliseconds even for
thousands of nodes) and computes the answer from that copy in a worker thread. Building the
answer for a 1,000-node cluster takes hundreds of milliseconds (bench/api_view.py); done in the
scheduler's loop, every dashboard refresh would stop scheduling for that long. The copy is never
written, and nothing is written to the scheduler's state: pending pods' requests are translated
with :func:`~gpupool.kube.translate.pod_spec` rather than through the state's spec cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.api.model import Pool, Queue
from gpupool.api.view import PodInfo, Waiting, team_of
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.live import LiveScheduler, _pod_order
from gpupool.kube.records import PodRecord
from gpupool.kube.translate import InvalidObjectError, pod_spec
from gpupool.kube.vocabulary import LABEL_QUEUE


@dataclass(frozen=True)
class DetachedView:
    """A view's answers frozen at one moment, safe to read from any thread."""

    source: str
    cluster: ClusterSnapshot | None
    who: Callable[[str], PodInfo]
    uuids: Mapping[str, Sequence[str]]
    pending: Callable[[], list[Waiting]]
    pool_list: Sequence[Pool] = ()
    queue_list: Sequence[Queue] = ()

    def snapshot(self) -> ClusterSnapshot | None:
        """The copied snapshot."""
        return self.cluster

    def pod_info(self, pod_id: str) -> PodInfo:
        """Who the pod is, from the copied records."""
        return self.who(pod_id)

    def gpu_uuids(self, node: str) -> Sequence[str]:
        """From the copied UUIDs."""
        return self.uuids.get(node, ())

    def waiting(self) -> list[Waiting]:
        """The pending pods as they were."""
        return self.pending()

    def pools(self) -> list[Pool]:
        """As they were."""
        return list(self.pool_list)

    def queues(self) -> list[Queue]:
        """As they were."""
        return list(self.queue_list)

    def detached(self) -> DetachedView:
        """Itself: it is already a copy."""
        return self


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
        pool_list: GPUPools to report.
        queue_list: GPUQueues to report.
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
        return [Waiting(spec, self.pod_info(spec.name), why) for spec, why in self.waiting_pods]

    def pools(self) -> list[Pool]:
        """As given."""
        return list(self.pool_list)

    def queues(self) -> list[Queue]:
        """As given."""
        return list(self.queue_list)

    def detached(self) -> DetachedView:
        """A copy of the snapshot and of the lists."""
        info = dict(self.info)
        waiting = list(self.waiting_pods)

        def who(pod_id: str) -> PodInfo:
            return info.get(pod_id) or PodInfo(key=pod_id, team=team_of(pod_id))

        def pending() -> list[Waiting]:
            return [Waiting(spec, who(spec.name), why) for spec, why in waiting]

        return DetachedView(
            self.source,
            self.cluster.copy() if self.cluster is not None else None,
            who,
            dict(self.uuids),
            pending,
            tuple(self.pool_list),
            tuple(self.queue_list),
        )


def _info(pod: PodRecord) -> PodInfo:
    meta = pod.metadata
    return PodInfo(
        key=f"{meta.namespace}/{meta.name}",
        team=meta.labels.get(LABEL_QUEUE) or meta.namespace,
        since=meta.creation_timestamp,
    )


def _waiting(
    pods: Mapping[str, PodRecord], entries: Mapping[str, tuple[str, int]]
) -> list[Waiting]:
    """Pending pods in the scheduler's order, from records and (reason, attempts) per uid."""
    result = []
    for pod in sorted((pods[uid] for uid in entries if uid in pods), key=_pod_order):
        try:
            spec: PodSpec | None = pod_spec(pod)
        except InvalidObjectError:
            spec = None
        reason, attempts = entries[pod.metadata.uid]
        result.append(Waiting(spec, _info(pod), reason, attempts))
    return result


def _who(pods: Mapping[str, PodRecord]) -> Callable[[str], PodInfo]:
    def who(pod_id: str) -> PodInfo:
        pod = pods.get(pod_id)
        return _info(pod) if pod is not None else PodInfo(key=pod_id, team="unknown")

    return who


@dataclass
class LiveView:
    """The live scheduler's cache and queue."""

    scheduler: LiveScheduler

    @property
    def source(self) -> str:
        """``live``, or ``live (standby: no snapshot)`` on a replica that does not schedule."""
        return "live" if self.scheduler.leading else "live (standby: no snapshot)"

    def snapshot(self) -> ClusterSnapshot | None:
        """The leader's snapshot; None on a standby."""
        return self.scheduler.state.snapshot

    def pod_info(self, pod_id: str) -> PodInfo:
        """From the pod's record (uid ``pod_id``)."""
        return _who(self.scheduler.state.pods)(pod_id)

    def gpu_uuids(self, node: str) -> Sequence[str]:
        """From the node's ``gpupool.io/gpu-uuids`` annotation."""
        return self.scheduler.state.uuids.get(node, ())

    def waiting(self) -> list[Waiting]:
        """The pending pods of this scheduler with the queue's reasons."""
        return _waiting(self.scheduler.state.pods, self._entries())

    def _entries(self) -> dict[str, tuple[str, int]]:
        entries = self.scheduler.queue.entries
        result = {}
        for uid in self.scheduler.state.pending:
            entry = entries.get(uid)
            result[uid] = (entry.reason, entry.attempts) if entry is not None else ("", 0)
        return result

    def pools(self) -> list[Pool]:
        """None yet: GPUPool objects are not read by the scheduler."""
        return []

    def queues(self) -> list[Queue]:
        """None yet: GPUQueue objects are not read by the scheduler."""
        return []

    def detached(self) -> DetachedView:
        """Copies of the snapshot, records, queue entries and UUIDs (call in the loop).

        The pod records are copied shallowly: a record is immutable, an update replaces it.
        """
        state = self.scheduler.state
        pods = dict(state.pods)
        entries = self._entries()
        return DetachedView(
            self.source,
            state.snapshot.copy() if state.snapshot is not None else None,
            _who(pods),
            dict(state.uuids),
            lambda: _waiting(pods, entries),
        )
