"""What the face may read of the live scheduler: one narrow door into its caches.

The REST API and the dashboard (:mod:`gpupool.api`) show the scheduler's snapshot, its pending
pods with their reasons, who holds each claim's GPUs, the ledger's use per pool and queue, the
agents' contention signals and the congestion ledger. They read all of it here, never the
scheduler's state, queue, book or applier: an import contract (``pyproject.toml``) keeps
:mod:`gpupool.api` to this module, so the scheduler's internals can change without the face
reading a half-updated cache or a structure that moved.

A :class:`SchedulerReading` is frozen and taken in the scheduler's event loop (the only thread
that writes its caches): the snapshot's arrays and the dicts are copied (milliseconds even for
thousands of nodes), so the answer can be computed from it in a worker thread while the
scheduler goes on. Pending pods' requests are translated lazily (:meth:`PendingPod.spec`), in
that thread, with :func:`~gpupool.kube.objects.translate.pod_spec` rather than through the
state's spec cache: nothing the face does writes to the scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.core.constraints import RequiredTerms
from gpupool.core.contention import ContendedGpu, class_shares
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec
from gpupool.kube.policy.status import pending_queue_indexes
from gpupool.kube.scheduler.congestion_reading import settled_congestion
from gpupool.kube.scheduler.contention_view import live_contention
from gpupool.kube.scheduler.dra.claim_ledger import claim_payers
from gpupool.kube.scheduler.dra.claims import claim_key
from gpupool.kube.scheduler.intake import pod_order
from gpupool.kube.scheduler.live import LiveScheduler
from gpupool.kube.scheduler.volume_binding import volume_groups, with_groups
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.spec import QueueSpec
from gpupool.policy.usage import PoolUsage, QueueUsage, pool_usage, queue_usage
from gpupool.scheduling.wait_cause import WaitKind


@dataclass(frozen=True)
class PendingPod:
    """A pending pod of this scheduler and what its queue entry says.

    Attributes:
        record: The pod's record.
        reason: Its pending reason ("" until it was tried).
        attempts: How many times it was tried.
        kind: What holds it (None until it was tried).
        volume_terms: What its volumes require of its node.
        note: What the last consolidation pass said of it ("" if nothing).
    """

    record: PodRecord
    reason: str = ""
    attempts: int = 0
    kind: WaitKind | None = None
    volume_terms: tuple[RequiredTerms, ...] = ()
    note: str = ""

    def spec(self) -> PodSpec | None:
        """Its request as the scheduler reads it, with its volumes' node terms (None: invalid)."""
        try:
            return with_groups(pod_spec(self.record), self.volume_terms)
        except InvalidObjectError:
            return None


@dataclass(frozen=True)
class HeldClaim:
    """A DRA claim holding GPUs in the snapshot, and the pod that pays for them.

    Attributes:
        key: The snapshot's name for what the claim holds (``claim:<uid>``).
        claim: ``namespace/name`` of the claim.
        since: When the claim was made.
        payer: The pod the quota charges (None: no live pod reserves the claim).
    """

    key: str
    claim: str
    since: str | None
    payer: PodRecord | None


@dataclass(frozen=True)
class SchedulerReading:
    """The scheduler's caches at one moment, safe to read from any thread.

    Attributes:
        leading: Whether this replica schedules (a standby has no snapshot and no ledger).
        snapshot: A copy of the leader's snapshot (None on a standby or with no nodes).
        pods: Pod records by uid (records are immutable: an update replaces one).
        uuids: Each node's GPU UUIDs in index order.
        queues: The queues as configured, which decide each pod's queue and class.
        pending: The pending pods in the order the scheduler tries them.
        held_claims: The claims holding GPUs in the snapshot.
        policy: The compiled pools and queues (None without a snapshot).
        pools: What the ledger charges in each pool (empty on a standby).
        queue_use: What the ledger charges to each queue (empty on a standby).
        contended: The GPUs fresh agent signals call contended.
    """

    leading: bool
    snapshot: ClusterSnapshot | None
    pods: Mapping[str, PodRecord]
    uuids: Mapping[str, Sequence[str]]
    queues: Sequence[QueueSpec]
    pending: tuple[PendingPod, ...]
    held_claims: tuple[HeldClaim, ...]
    policy: ClusterPolicy | None
    pools: tuple[PoolUsage, ...]
    queue_use: tuple[QueueUsage, ...]
    contended: tuple[ContendedGpu, ...]


class SchedulerReader:
    """The face's handle on a :class:`~gpupool.kube.scheduler.live.LiveScheduler`: it reads."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self._scheduler = scheduler

    @property
    def leading(self) -> bool:
        """Whether the scheduler schedules now (a standby shows no snapshot and no ledger)."""
        return self._scheduler.leading

    def read(self) -> SchedulerReading:
        """The caches now, copied (call in the scheduler's event loop)."""
        scheduler = self._scheduler
        state, book = scheduler.state, scheduler.book
        snapshot, policy = state.snapshot, book.policy
        pools: tuple[PoolUsage, ...] = ()
        queue_use: tuple[QueueUsage, ...] = ()
        if policy is not None and scheduler.leading:  # a standby's ledger charges nothing
            pools = tuple(pool_usage(policy, book.ledger, book.running.values()))
            waiting = pending_queue_indexes(book, state.pods, state.pending)
            queue_use = tuple(queue_usage(policy, book.ledger, waiting))
        return SchedulerReading(
            leading=scheduler.leading,
            snapshot=snapshot.copy() if snapshot is not None else None,
            pods=dict(state.pods),
            uuids=dict(state.uuids),
            queues=scheduler.policies.config.queues,
            pending=self._pending(),
            held_claims=self._held_claims(),
            policy=policy if snapshot is not None else None,
            pools=pools,
            queue_use=queue_use,
            contended=tuple(live_contention(scheduler)),
        )

    def congestion(self) -> dict[str, Any]:
        """The congestion ledger's JSON settled up to now, with each class's share of contention.

        Call in the scheduler's event loop (the one thread that feeds the ledger).
        """
        scheduler = self._scheduler
        return settled_congestion(scheduler).as_json(class_shares(live_contention(scheduler)))

    def _pending(self) -> tuple[PendingPod, ...]:
        scheduler = self._scheduler
        state, entries, notes = scheduler.state, scheduler.queue.entries, scheduler.applier.notes
        found = []
        for uid in state.pending:
            pod = state.pods.get(uid)
            if pod is None:
                continue
            entry = entries.get(uid)
            found.append(
                PendingPod(
                    pod,
                    entry.reason if entry is not None else "",
                    entry.attempts if entry is not None else 0,
                    entry.kind if entry is not None else None,
                    volume_groups(pod, state.volumes, state),
                    notes.get(uid, ""),
                )
            )
        found.sort(key=lambda pending: pod_order(pending.record))
        return tuple(found)

    def _held_claims(self) -> tuple[HeldClaim, ...]:
        """The claims holding GPUs, each with the pod the quota charges for them.

        The payer is the ledger's (:func:`~gpupool.kube.scheduler.dra.claim_ledger.claim_payers`),
        so the face's per-team units agree with the quotas.
        """
        state = self._scheduler.state
        if state.snapshot is None:
            return ()
        payers = claim_payers(state.claims, state.snapshot, state.pods, state.claim_binds)
        held = []
        for claim in state.claims.by_uid.values():
            key = claim_key(claim.metadata.uid)
            if key in state.snapshot.allocations:
                payer = state.pods.get(payers.get(key, ""))
                held.append(HeldClaim(key, claim.key, claim.metadata.creation_timestamp, payer))
        return tuple(held)
