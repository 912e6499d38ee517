"""The cluster views: a snapshot, the live scheduler, and the copy requests are computed from.

:class:`SnapshotView` serves any :class:`~gpupool.core.snapshot.ClusterSnapshot` with a list of
pending pods: the example cluster and the demo's simulator. :class:`LiveView` reads a running
:class:`~gpupool.kube.scheduler.live.LiveScheduler` (its cache's snapshot, pod records and queue
entries).

Neither is read by the request handlers directly: a handler takes :meth:`detached` in the
owner's event loop (a copy of the snapshot's arrays and of the dicts, milliseconds even for
thousands of nodes) and computes the answer from that copy in a worker thread. Building the
answer for a 1,000-node cluster takes hundreds of milliseconds (bench/api_view.py); done in the
scheduler's loop, every dashboard refresh would stop scheduling for that long. The copy is never
written, and nothing is written to the scheduler's state: pending pods' requests are translated
with :func:`~gpupool.kube.objects.translate.pod_spec` rather than through the state's spec cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpupool.api.model import Pool, Queue
from gpupool.api.view import PodInfo, Waiting, pools_of, queues_of, team_of
from gpupool.core.constraints import RequiredTerms
from gpupool.core.contention import ContendedGpu
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec
from gpupool.kube.objects.vocabulary import LABEL_QUEUE
from gpupool.kube.policy.book import workload_of
from gpupool.kube.policy.status import pending_queue_indexes
from gpupool.kube.scheduler.claim_ledger import claim_payers
from gpupool.kube.scheduler.claims import claim_key
from gpupool.kube.scheduler.contention_view import live_contention
from gpupool.kube.scheduler.intake import pod_order
from gpupool.kube.scheduler.live import LiveScheduler
from gpupool.kube.scheduler.volume_binding import volume_groups, with_groups
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.membership import pod_queue
from gpupool.policy.spec import QueueSpec
from gpupool.policy.usage import pool_usage, queue_usage
from gpupool.policy.workload import Workload
from gpupool.scheduling.wait_cause import WaitCause, WaitKind, category

QueuedPod = tuple[str, int, WaitKind | None]
"""A pending pod's entry in the live queue: its reason, attempts, and what holds it."""


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
    pods: Mapping[str, PodRecord],
    entries: Mapping[str, QueuedPod],
    team: Team,
    queues: Sequence[QueueSpec],
    said: tuple[Mapping[str, tuple[RequiredTerms, ...]], Mapping[str, str]],
) -> list[Waiting]:
    """Pending pods in the scheduler's order, from records and their queue entries by uid.

    ``queues`` decide each pod's class as the scheduler decides it, so the API never shows a
    class the pod's queue does not allow; ``said``: what each pod's volumes require of its
    node, so an explanation offers only nodes its volumes can be mounted on, and what
    consolidation last said of it.
    """
    volumes, notes = said
    result = []
    for pod in sorted((pods[uid] for uid in entries if uid in pods), key=pod_order):
        reason, attempts, kind = entries[pod.metadata.uid]
        try:
            spec = with_groups(pod_spec(pod), volumes.get(pod.metadata.uid, ()))
        except InvalidObjectError:
            spec = None
        workload = workload_of(pod, spec, queues) if spec is not None else None
        note = notes.get(pod.metadata.uid, "")
        info = _info(pod, team)
        result.append(Waiting(spec, info, reason, attempts, workload, category(kind), note))
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


def _claim_holders(scheduler: LiveScheduler, team: Team) -> dict[str, PodInfo]:
    """Who each held DRA claim's GPUs are shown as: the pod that pays for them, and the claim.

    A claim holds its GPUs under ``claim:<uid>``, which names no pod: shown as it is, a claim
    pod's GPUs were counted to a team "unknown" and its own team looked as if it held none. The
    payer is the quota's (:func:`~gpupool.kube.scheduler.claim_ledger.claim_payers`), so the
    face's per-team units agree with the ledger; a claim no live pod reserves (its release is
    on its way) is shown under its own name and namespace.
    """
    state = scheduler.state
    if state.snapshot is None:
        return {}
    payers = claim_payers(state.claims, state.snapshot, state.pods, state.claim_binds)
    holders = {}
    for claim in state.claims.by_uid.values():
        key = claim_key(claim.metadata.uid)
        if key not in state.snapshot.allocations:
            continue
        payer = state.pods.get(payers.get(key, ""))
        if payer is not None:
            holders[key] = replace(_info(payer, team), claim=claim.key)
        else:
            since = claim.metadata.creation_timestamp
            holders[key] = PodInfo(claim.key, team_of(claim.key), since, claim=claim.key)
    return holders


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

    def _team(self) -> Team:
        return charged_queue(self.scheduler.policies.config.queues)

    def pod_info(self, pod_id: str) -> PodInfo:
        """From the pod's record (uid ``pod_id``)."""
        team = self._team()
        return _who(self.scheduler.state.pods, team, _claim_holders(self.scheduler, team))(pod_id)

    def gpu_uuids(self, node: str) -> Sequence[str]:
        """From the node's ``gpupool.io/gpu-uuids`` annotation."""
        return self.scheduler.state.uuids.get(node, ())

    def waiting(self) -> list[Waiting]:
        """The pending pods of this scheduler with the queue's reasons."""
        queues = self.scheduler.policies.config.queues
        entries = self._entries()
        pods = self.scheduler.state.pods
        volumes, notes = self._volumes(entries), self.scheduler.applier.notes
        return _waiting(pods, entries, charged_queue(queues), queues, (volumes, notes))

    def policy(self) -> ClusterPolicy | None:
        """The leader's compiled pools and queues (for its current snapshot)."""
        return self.scheduler.book.policy if self.scheduler.state.snapshot is not None else None

    def _volumes(self, entries: Mapping[str, object]) -> dict[str, tuple[RequiredTerms, ...]]:
        """What each pending pod's volumes require of its node (read here, in the loop)."""
        state = self.scheduler.state
        found = {}
        for uid in entries:
            pod = state.pods.get(uid)
            if pod is not None and (groups := volume_groups(pod, state.volumes, state)):
                found[uid] = groups
        return found

    def _entries(self) -> dict[str, QueuedPod]:
        entries = self.scheduler.queue.entries
        result = {}
        for uid in self.scheduler.state.pending:
            entry = entries.get(uid)
            result[uid] = (
                (entry.reason, entry.attempts, entry.kind) if entry is not None else ("", 0, None)
            )
        return result

    def contention(self) -> list[ContendedGpu]:
        """From the agents' signals on the cached nodes."""
        return live_contention(self.scheduler)

    def pools(self) -> list[Pool]:
        """The pools with what the leader's ledger charges in them (none on a standby)."""
        book = self.scheduler.book
        if book.policy is None or not self.scheduler.leading:
            return []
        return pools_of(pool_usage(book.policy, book.ledger, book.running.values()))

    def queues(self) -> list[Queue]:
        """The queues with their quotas and use, from the leader's ledger (none on a standby)."""
        book, state = self.scheduler.book, self.scheduler.state
        if book.policy is None or not self.scheduler.leading:
            return []
        waiting = pending_queue_indexes(book, state.pods, state.pending)
        return queues_of(queue_usage(book.policy, book.ledger, waiting))

    def detached(self) -> DetachedView:
        """Copies of the snapshot, records, queue entries and UUIDs (call in the loop).

        The pod records are copied shallowly: a record is immutable, an update replaces it.
        """
        state = self.scheduler.state
        pods = dict(state.pods)
        entries = self._entries()
        said = (self._volumes(entries), dict(self.scheduler.applier.notes))
        queues = self.scheduler.policies.config.queues
        team = charged_queue(queues)
        return DetachedView(
            self.source,
            state.snapshot.copy() if state.snapshot is not None else None,
            _who(pods, team, _claim_holders(self.scheduler, team)),
            dict(state.uuids),
            lambda: _waiting(pods, entries, team, queues, said),
            tuple(self.pools()),
            tuple(self.queues()),
            compiled=self.policy(),
            contended=tuple(self.contention()),
        )
