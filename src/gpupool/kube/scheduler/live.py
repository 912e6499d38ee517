"""The live scheduling loop: the pure core deciding, Kubernetes carrying the decisions out.

One cycle: bring the cache up to date from the informers (:class:`ClusterState`) and the policy's
inputs with it (:class:`~gpupool.kube.policy.book.PolicyBook`: pools and queues from the GPUPool
and GPUQueue objects, running pods, the ledger), take the pods the scheduling queue says are
ready, plus the pods that hold a nomination (:class:`~gpupool.kube.scheduler.intake.Intake`),
run the :class:`~gpupool.scheduling.engine.PolicyEngine` the simulator runs over them, and carry
out its decisions (:class:`~gpupool.kube.scheduler.apply.Applier`: assume and bind through the
:class:`~gpupool.kube.scheduler.binder.Binder`, nominate and evict, or wait with a reason told
by :class:`~gpupool.kube.scheduler.verdicts.Verdicts`).

With no GPUPool or GPUQueue objects there is one implicit pool and one default queue, and the
engine places pods exactly as the placement policy alone would.

Failure is contained to the pod it concerns: a refused Binding, a request that cannot be read or
an exception while reading one pod becomes that pod's pending reason and a counter; the loop goes
on with the next pod, and a failing cycle is retried after a pause instead of ending the process
(which would meet the same pod again after its restart).

Only the leader runs cycles (:mod:`gpupool.kube.client.leader`); a replica that becomes leader
relists its informers first, to start from a fresh read rather than its standby cache. The pod
informer leaves finished pods out (a field selector, as kube-scheduler's): a pod that finishes
arrives as a deletion, which releases what it held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np

from gpupool.core.framework import Scheduler
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import Informer
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.signing import RecordSigner
from gpupool.kube.policy.book import PolicyBook
from gpupool.kube.policy.source import PolicySource
from gpupool.kube.policy.status import Status, StatusWriter, live_statuses
from gpupool.kube.scheduler.apply import Applier
from gpupool.kube.scheduler.binder import Binder
from gpupool.kube.scheduler.budget_cache import BudgetCache
from gpupool.kube.scheduler.config import DecisionHook, LiveConfig, LiveStats
from gpupool.kube.scheduler.departures import Departures
from gpupool.kube.scheduler.dra.claim_informers import ClaimInformers
from gpupool.kube.scheduler.dra.claim_ledger import ClaimCosts, changed_costs, claim_costs
from gpupool.kube.scheduler.evictions import Eviction, Evictor
from gpupool.kube.scheduler.intake import Intake
from gpupool.kube.scheduler.observe import SchedulingMetrics
from gpupool.kube.scheduler.preempting import Preemptions
from gpupool.kube.scheduler.queue import SchedulingQueue
from gpupool.kube.scheduler.rights import AllocationRights
from gpupool.kube.scheduler.state import ClusterState
from gpupool.kube.scheduler.verdicts import Verdicts
from gpupool.kube.scheduler.volume_informers import VolumeInformers
from gpupool.kube.scheduler.volume_writes import VolumeWriter
from gpupool.kube.scheduler.writes import PodReporter
from gpupool.policy.membership import node_pool
from gpupool.policy.spec import EvictionSpec
from gpupool.policy.workload import Workload
from gpupool.scheduling.backfill import Reservation
from gpupool.scheduling.cycle_request import Carried, cycle_request
from gpupool.scheduling.decisions import BACKFILL_MODES, CycleRequest
from gpupool.scheduling.engine import PolicyEngine
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.scheduling.wait_cause import category

log = logging.getLogger(__name__)

CYCLE_ERROR_PAUSE = 1.0
"""Seconds to wait after a cycle failed as a whole before the next one."""
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"
"""The pod watch's field selector: finished pods hold nothing and are not kept."""


@dataclass
class LiveScheduler:
    """Informers, cache, queue and the cycle loop of one replica.

    Args:
        api: The API port.
        config: How to schedule.
        signer: Signs the allocation records this replica writes and verifies the ones it reads.
    """

    api: KubeAPI
    config: LiveConfig
    signer: RecordSigner | None = None
    state: ClusterState = field(init=False)
    stats: LiveStats = field(default_factory=LiveStats)
    metrics: SchedulingMetrics = field(default_factory=SchedulingMetrics)
    leading: bool = False
    rights: AllocationRights = field(default_factory=AllocationRights)

    def __post_init__(self) -> None:
        self.reports = PodReporter(self.api, self.config.identity)
        self.book = PolicyBook(self.config.scheduler_name)
        self.state = ClusterState(
            self.config.scheduler_name, signer=self.signer, warn=self._warn, prepare=self._prepare
        )
        self.queue = SchedulingQueue()
        self.wake = asyncio.Event()
        self.pods = Informer(
            self.api, "/api/v1/pods", PodRecord, self._on_pod, field_selector=UNFINISHED_PODS
        )
        self.nodes = Informer(self.api, "/api/v1/nodes", NodeRecord, self._on_node)
        claims = self.config.claims
        self.dra = ClaimInformers(self.api, self.state, self._wake_if_leading) if claims else None
        self.volume_informers = VolumeInformers(self.api, self.state.volumes, self._on_volumes)
        self.policies = PolicySource(self.api, self._on_policy)
        self.budgets = BudgetCache(self.api, self.state.pods, self._wake_if_leading)
        self.departures = Departures(
            self.api, self.eviction_terms, self.budgets.of, on_left=self.book.evicted
        )
        evictor = Evictor(self.departures, self.reports, self._still_evicting, self.wake.set)
        self.preemptions = Preemptions(evictor, self.reports)
        self.status = StatusWriter(self.api)
        context = PolicyContext(rng=np.random.default_rng(self.config.seed), trace_pods=())
        self.placement = Scheduler(build_policy(self.config.policy, context))
        self.engine: PolicyEngine | None = None
        self._reservations: dict[int, tuple[Reservation, ...]] = {}
        self._awaiting: frozenset[str] = frozenset()  # blocked, may hold one, tried every cycle
        self._claims: ClaimCosts = ({}, {})  # last cycle's claim charges and companions
        self._deferred_in: Hashable = None  # the inputs of the last cycle that deferred pods
        self.verdicts = Verdicts(self.state, self.queue, self.reports, self.metrics)
        self.intake = Intake(
            self.state,
            self.book,
            self.verdicts,
            self.stats,
            self.placement,
            self.api,
            self._on_volumes,
        )
        self.binder = Binder(
            self.api,
            self.config,
            self.signer,
            self.state,
            self.verdicts,
            self.stats,
            self.metrics,
            self.wake.set,
            self.rights,
            VolumeWriter(self.api, self.state.volumes, self._node_labels),
        )
        self.applier = Applier(
            self.state, self.book, self.preemptions, self.verdicts, self.binder, self.stats
        )

    @property
    def on_decision(self) -> DecisionHook | None:
        """Called after a bind lands or a pod is reported unschedulable with a new reason."""
        return self.verdicts.on_decision

    @on_decision.setter
    def on_decision(self, hook: DecisionHook | None) -> None:
        self.verdicts.on_decision = hook
        self.preemptions.evictor.on_decision = hook

    def eviction_terms(self, pod: PodRecord) -> EvictionSpec:
        """How ``pod`` is evicted: its node's pool's terms (the defaults where none is known)."""
        node = self.state.nodes.get(pod.spec.node_name)
        pool = (
            node_pool(self.policies.config.pools, node.metadata.labels).pool
            if node is not None
            else None
        )
        return pool.eviction if pool is not None else EvictionSpec()

    def _warn(self, pod: PodRecord, reason: str, message: str) -> None:
        self.reports.event(pod, "Warning", reason, message)

    def _on_pod(self, kind: str, pod: PodRecord) -> None:
        if pod.status.phase == "Succeeded":
            self.book.completed(pod.metadata.uid, time.time())
        self.state.on_pod(kind, pod)
        uid = pod.metadata.uid
        gone = uid not in self.state.pods
        if gone:  # per-pod bookkeeping goes too
            self.intake.seen.discard(uid)
            self.book.forget(uid)
            self.departures.forget(uid)
        self.preemptions.on_pod(pod, gone=gone)
        self.budgets.on_pod(pod, gone=gone)
        self._wake_if_leading()

    def _on_policy(self) -> None:
        self.state.invalidate()  # pools decide node membership and sharing: rebuild
        self._wake_if_leading()

    def _prepare(self, snapshot: ClusterSnapshot) -> None:
        """A fresh snapshot: compile the pools and queues for its nodes."""
        policy = self.book.compile(self.policies.config, snapshot)
        self.engine = PolicyEngine(self.placement, policy, BACKFILL_MODES[self.config.backfill])
        self._reservations = {}  # pool indices may have moved

    def _still_evicting(self, eviction: Eviction) -> bool:
        victim = self.state.pods.get(eviction.victim.metadata.uid)
        return (
            self.leading
            and victim is not None
            and victim.metadata.deletion_timestamp is None
            and eviction.preemptor.metadata.uid in self.state.pending
        )

    def _wake_if_leading(self) -> None:
        """Something a decision reads changed: the leader decides again."""
        if self.leading:
            self.wake.set()

    def _on_volumes(self) -> None:
        """A claim, volume, class or PodGroup changed: pods parked for them are tried again."""
        self.state.capacity_epoch += 1
        self._wake_if_leading()

    def _node_labels(self, name: str) -> dict[str, str] | None:
        node = self.state.nodes.get(name)
        return dict(node.metadata.labels) if node is not None else None

    def _on_node(self, kind: str, node: NodeRecord) -> None:
        self.state.on_node(kind, node)
        self._wake_if_leading()

    @property
    def synced(self) -> bool:
        """Whether every informer has completed its first list."""
        dra = self.dra is None or self.dra.synced
        return (
            self.pods.synced.is_set()
            and self.nodes.synced.is_set()
            and self.policies.synced
            and self.volume_informers.synced
            and dra
        )

    async def run_informers(self) -> None:
        """Keep the caches current (every replica, leader or not) and write Events."""
        dra = [self.dra.run()] if self.dra is not None else []
        await asyncio.gather(
            self.pods.run(),
            self.nodes.run(),
            self.policies.run(),
            self.budgets.informer.run(),
            self.intake.run(),
            self.reports.run(),
            self.volume_informers.run(),
            *dra,
        )

    async def lead(self) -> None:
        """Schedule until cancelled; called when this replica becomes leader."""
        await self.policies.wait_synced()  # never admit against quotas not read yet
        # claims too: what allocated claims hold must be known before anything is placed
        dra = [self.dra.resync()] if self.dra is not None else []
        await asyncio.gather(
            self.nodes.resync(),
            self.pods.resync(),
            self.policies.resync(),
            self.volume_informers.resync(),  # a pod's volumes decide where it may go
            *dra,
        )
        self.state.restart()
        self.queue.clear()
        self.preemptions.clear()
        self.leading = True
        self.wake.set()
        status = asyncio.create_task(self.status.run(self.desired_status))
        try:
            while True:
                await self._until_something_to_do()
                try:
                    await self.cycle()
                except Exception:
                    self.stats.cycle_errors += 1
                    log.exception("scheduling cycle failed; retrying in %.1f s", CYCLE_ERROR_PAUSE)
                    await asyncio.sleep(CYCLE_ERROR_PAUSE)
                    self.wake.set()
        finally:
            self.leading = False
            status.cancel()
            self.preemptions.evictor.cancel_all()
            self.binder.cancel_all()
            if self.dra is not None:
                self.dra.cancel_all()
            self.state.deactivate()
            self.queue.clear()

    async def _until_something_to_do(self) -> None:
        """Wait for an event, the first backoff to end, or a contention signal to go stale."""
        delay = self.state.wake_within(self.queue.next_ready(time.monotonic()))
        if delay is None:
            await self.wake.wait()
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=delay + 0.01)
        self.wake.clear()

    def _sync(self) -> None:
        state = self.state
        state.sync()
        changed, state.pending_changes = state.pending_changes, set()
        if changed:
            self.queue.update(changed, state.pending, time.monotonic())

    async def cycle(self) -> None:
        """One engine pass over the pods that are ready to be tried."""
        self.stats.cycles += 1
        state = self.state
        self._sync()
        snapshot, engine = state.snapshot, self.engine
        if snapshot is None or engine is None:
            return
        if self.dra is not None:
            self.dra.release_unused()
        changed, state.held_changes = state.held_changes, set()
        costs = claim_costs(state.claims, snapshot, state.pods, state.claim_binds)
        changed |= changed_costs(costs, self._claims)
        self._claims = costs
        self.book.update(changed, snapshot, state.pods, state.foreign, *costs)
        ready = self.intake.ready(
            [*self.preemptions.nominated, *_holders(self._reservations), *self._awaiting]
        )
        workloads = self.intake.workloads(ready)
        if not workloads:
            return
        request = self._request(snapshot, workloads)
        started = time.perf_counter()
        result = engine.cycle(request)
        each = (time.perf_counter() - started) / len(workloads)
        for _ in workloads:
            self.metrics.latency.observe(each)
        if _holders(self._reservations) - _holders(result.reservations):
            state.capacity_epoch += 1  # the room they held is open to the pods they kept out
        self._reservations, self._awaiting = result.reservations, result.awaiting
        deferred = await self.applier.apply(snapshot, engine, request, result)
        inputs = (
            state.capacity_epoch,
            frozenset(ready),
            result.awaiting,
            frozenset(_holders(result.reservations)),
        )
        if deferred and inputs != self._deferred_in:
            # pods deferred behind others: try them again next cycle, but not again and again
            # when it had the same inputs (a blocked holder is tried in every cycle, so the
            # pods behind it were deferred for ever, a busy loop); the next event wakes them
            self._deferred_in = inputs
            self.wake.set()
            await asyncio.sleep(0)  # after letting watches and lease renewals in

    def _request(self, snapshot: ClusterSnapshot, workloads: list[Workload]) -> CycleRequest:
        book, preemptions = self.book, self.preemptions
        running = preemptions.candidates(book.running)
        carried = Carried(preemptions.rows(snapshot.node_index), self._reservations)
        eligibility = {
            w.name: placement.eligibility
            for w in workloads
            if (placement := self.state.placements.get(w.name)) is not None
        }
        return cycle_request(
            snapshot,
            workloads,
            running,
            book.ledger,
            time.time(),
            book.runtimes,
            carried,
            eligibility=eligibility,
            disruption=self.budgets.budgets(),
            gangs=self.intake.gangs.specs(),
        )

    def desired_status(self) -> dict[str, Status]:
        """GPUPool and GPUQueue status from the ledger (nothing when no such object exists)."""
        return live_statuses(self.book, self.policies, self.state.pods, self.state.pending)

    def pending_categories(self) -> list[str]:
        """What holds each pending pod (a category of ``wait_cause.PENDING_CATEGORIES``)."""
        entries = self.queue.entries
        return [
            category(entry.kind if (entry := entries.get(uid)) is not None else None)
            for uid in self.state.pending
        ]


def _holders(reservations: Mapping[int, tuple[Reservation, ...]]) -> set[str]:
    """The pods holding backfill reservations.

    One that loses its reservation (it was placed, went, or another took precedence) opens
    its room to the pods parked with "backfill: would delay ...": they wait for that, not for
    capacity to be released, so the epoch moves for them or they would sit out the flush.
    """
    return {r.pod for held in reservations.values() for r in held}
