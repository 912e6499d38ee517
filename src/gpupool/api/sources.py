"""The cluster views: a snapshot, the live scheduler, and the copy requests are computed from.

:class:`SnapshotView` serves any :class:`~gpupool.core.snapshot.ClusterSnapshot` with a list of
pending pods: the example cluster and the demo's simulator. :class:`LiveView` reads a running
scheduler through its read view (:mod:`gpupool.kube.scheduler.read_view`, the one module of the
scheduler the face may import).

Neither is read by the request handlers directly: a handler takes :meth:`detached` in the
owner's event loop (a copy of the snapshot's arrays and of the dicts, milliseconds even for
thousands of nodes) and computes the answer from that copy in a worker thread. Building the
answer for a 1,000-node cluster takes hundreds of milliseconds (bench/api_view.py); done in the
scheduler's loop, every dashboard refresh would stop scheduling for that long.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpupool.api.model import Pool, Queue
from gpupool.api.view import PodInfo, Waiting, pools_of, queues_of, team_of
from gpupool.core.contention import ContendedGpu
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.vocabulary import LABEL_QUEUE
from gpupool.kube.policy.book import workload_of
from gpupool.kube.scheduler.read_view import (
    HeldClaim,
    PendingPod,
    SchedulerReader,
    SchedulerReading,
)
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.membership import pod_queue
from gpupool.policy.spec import QueueSpec
from gpupool.policy.workload import Workload
from gpupool.scheduling.wait_cause import WaitCause, category


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
    compiled: ClusterPolicy | None = None
    contended: Sequence[ContendedGpu] = ()

    def snapshot(self) -> ClusterSnapshot | None:
        """The copied snapshot."""
        return self.cluster

    def contention(self) -> list[ContendedGpu]:
        """As it was."""
        return list(self.contended)

    def policy(self) -> ClusterPolicy | None:
        """The compiled pools and queues (never changed once compiled, so shared, not copied)."""
        return self.compiled

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
        waiting_pods: Pending pods with why they wait (``None``: not tried), in scheduling order.
        info: Who pods are, by snapshot name (default: from the name).
        uuids: GPU UUIDs per node.
        source: What to report as the source.
        pool_list: GPUPools to report.
        queue_list: GPUQueues to report.
        workloads: The pending pods as the engine sees them, by snapshot name.
        compiled: The pools and queues compiled for the snapshot's nodes.
        contended: The GPUs with contention.
    """

    cluster: ClusterSnapshot | None
    waiting_pods: Sequence[tuple[PodSpec, WaitCause | None]] = ()
    info: Mapping[str, PodInfo] = field(default_factory=dict)
    uuids: Mapping[str, Sequence[str]] = field(default_factory=dict)
    source: str = "snapshot"
    pool_list: Sequence[Pool] = ()
    queue_list: Sequence[Queue] = ()
    workloads: Mapping[str, Workload] = field(default_factory=dict)
    compiled: ClusterPolicy | None = None
    contended: Sequence[ContendedGpu] = ()

    def snapshot(self) -> ClusterSnapshot | None:
        """The snapshot."""
        return self.cluster

    def policy(self) -> ClusterPolicy | None:
        """As given."""
        return self.compiled

    def pod_info(self, pod_id: str) -> PodInfo:
        """From ``info``, or ``namespace/name`` with the namespace as team."""
        return self.info.get(pod_id) or PodInfo(key=pod_id, team=team_of(pod_id))

    def gpu_uuids(self, node: str) -> Sequence[str]:
        """From ``uuids``."""
        return self.uuids.get(node, ())

    def waiting(self) -> list[Waiting]:
        """The pending pods as given."""
        return _given(self.waiting_pods, self.pod_info, self.workloads)

    def pools(self) -> list[Pool]:
        """As given."""
        return list(self.pool_list)

    def contention(self) -> list[ContendedGpu]:
        """As given."""
        return list(self.contended)

    def queues(self) -> list[Queue]:
        """As given."""
        return list(self.queue_list)

    def detached(self) -> DetachedView:
        """A copy of the snapshot and of the lists."""
        info = dict(self.info)
        waiting = list(self.waiting_pods)
        workloads = dict(self.workloads)

        def who(pod_id: str) -> PodInfo:
            return info.get(pod_id) or PodInfo(key=pod_id, team=team_of(pod_id))

        return DetachedView(
            self.source,
            self.cluster.copy() if self.cluster is not None else None,
            who,
            dict(self.uuids),
            lambda: _given(waiting, who, workloads),
            tuple(self.pool_list),
            tuple(self.queue_list),
            self.compiled,
            tuple(self.contended),
        )


Team = Callable[[PodRecord], str]
"""A pod's team: the queue it is charged to."""


def charged_queue(queues: Sequence[QueueSpec]) -> Team:
    """A pod's team by the scheduler's rule (:func:`gpupool.policy.membership.pod_queue`)."""

    def team(pod: PodRecord) -> str:
        meta = pod.metadata
        return pod_queue(queues, meta.namespace, meta.labels.get(LABEL_QUEUE, ""))

    return team


def _given(
    waiting: Sequence[tuple[PodSpec, WaitCause | None]],
    who: Callable[[str], PodInfo],
    workloads: Mapping[str, Workload],
) -> list[Waiting]:
    return [
        Waiting(
            spec,
            who(spec.name),
            why.text() if why is not None else "",
            workload=workloads.get(spec.name),
            category=category(why.kind if why is not None else None),
        )
        for spec, why in waiting
    ]


def _info(pod: PodRecord, team: Team) -> PodInfo:
    meta = pod.metadata
    return PodInfo(
        key=f"{meta.namespace}/{meta.name}", team=team(pod), since=meta.creation_timestamp
    )


def _waiting(
    pending: Sequence[PendingPod], team: Team, queues: Sequence[QueueSpec]
) -> list[Waiting]:
    """Pending pods in the scheduler's order, with what their queue entries say.

    ``queues`` decide each pod's class as the scheduler decides it, so the API never shows a
    class the pod's queue does not allow; a pod's request carries what its volumes require of
    its node, so an explanation offers only nodes its volumes can be mounted on.
    """
    result = []
    for pod in pending:
        spec = pod.spec()
        workload = workload_of(pod.record, spec, queues) if spec is not None else None
        info = _info(pod.record, team)
        kind = category(pod.kind)
        result.append(Waiting(spec, info, pod.reason, pod.attempts, workload, kind, pod.note))
    return result


def _who(
    pods: Mapping[str, PodRecord], team: Team, claims: Mapping[str, PodInfo]
) -> Callable[[str], PodInfo]:
    def who(pod_id: str) -> PodInfo:
        pod = pods.get(pod_id)
        if pod is not None:
            return _info(pod, team)
        return claims.get(pod_id) or PodInfo(key=pod_id, team="unknown")

    return who


def _claim_holders(held: Sequence[HeldClaim], team: Team) -> dict[str, PodInfo]:
    """Who each held DRA claim's GPUs are shown as: the pod that pays for them, and the claim.

    A claim holds its GPUs under ``claim:<uid>``, which names no pod: shown as it is, a claim
    pod's GPUs were counted to a team "unknown" and its own team looked as if it held none. The
    payer is the quota's, so the face's per-team units agree with the ledger; a claim no live
    pod reserves (its release is on its way) is shown under its own name and namespace.
    """
    return {
        claim.key: replace(_info(claim.payer, team), claim=claim.claim)
        if claim.payer is not None
        else PodInfo(claim.claim, team_of(claim.claim), claim.since, claim=claim.claim)
        for claim in held
    }


def detach(reading: SchedulerReading) -> DetachedView:
    """The face's view of a reading of the live scheduler (cheap: the reading is a copy)."""
    team = charged_queue(reading.queues)
    return DetachedView(
        "live" if reading.leading else "live (standby: no snapshot)",
        reading.snapshot,
        _who(reading.pods, team, _claim_holders(reading.held_claims, team)),
        reading.uuids,
        lambda: _waiting(reading.pending, team, reading.queues),
        tuple(pools_of(reading.pools)),
        tuple(queues_of(reading.queue_use)) if reading.queue_use else (),
        compiled=reading.policy,
        contended=reading.contended,
    )


@dataclass
class LiveView:
    """The live scheduler, read through its read view (a copy taken in its loop per call)."""

    reader: SchedulerReader

    @property
    def source(self) -> str:
        """``live``, or ``live (standby: no snapshot)`` on a replica that does not schedule."""
        return "live" if self.reader.leading else "live (standby: no snapshot)"

    def snapshot(self) -> ClusterSnapshot | None:
        """The leader's snapshot; None on a standby."""
        return self.detached().snapshot()

    def pod_info(self, pod_id: str) -> PodInfo:
        """From the pod's record (uid ``pod_id``)."""
        return self.detached().pod_info(pod_id)

    def gpu_uuids(self, node: str) -> Sequence[str]:
        """From the node's ``gpupool.io/gpu-uuids`` annotation."""
        return self.detached().gpu_uuids(node)

    def waiting(self) -> list[Waiting]:
        """The pending pods of this scheduler with the queue's reasons."""
        return self.detached().waiting()

    def policy(self) -> ClusterPolicy | None:
        """The leader's compiled pools and queues (for its current snapshot)."""
        return self.detached().policy()

    def contention(self) -> list[ContendedGpu]:
        """From the agents' signals on the cached nodes."""
        return self.detached().contention()

    def pools(self) -> list[Pool]:
        """The pools with what the leader's ledger charges in them (none on a standby)."""
        return self.detached().pools()

    def queues(self) -> list[Queue]:
        """The queues with their quotas and use, from the leader's ledger (none on a standby)."""
        return self.detached().queues()

    def detached(self) -> DetachedView:
        """A reading of the scheduler's caches, copied (call in the loop)."""
        return detach(self.reader.read())
