"""Bindings in the background: at most ``bind_concurrency`` in flight, each outcome settled.

A decided pod is *assumed* first (:meth:`~gpupool.kube.scheduler.state.ClusterState.assume`:
its GPUs are held at once), then its Binding is sent here, with the signed allocation record
(pool and queue included) merged into the pod by the same write. The cycle does not wait for
the answers: a slow API server delays binds, never decisions.

A claim pod's claim is allocated (or joined) first (:mod:`gpupool.kube.scheduler.dra.claim_writes`);
a refused claim write refuses the bind like a refused Binding.

* 201: bound; the watch confirms the assumption.
* 409 or 404: believed (bound by someone else, or gone); the assumption is dropped.
* 403, 422, 400, 429: refused; the pod stays pending with the API server's message as its
  reason and backs off (1 s doubling to 10 s).
* 5xx or a transport error: the outcome is unknown, so the GPUs stay held and the pod is looked
  up until the answer is known; giving them back on a guess could hand a GPU out twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

from gpupool.core.decisions import Bind
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.client.informer import MODIFIED
from gpupool.kube.objects import allocation
from gpupool.kube.objects.dra import claim_record
from gpupool.kube.objects.dra.records import ResourceClaim
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.signing import CLAIM_DOMAIN, RecordSigner
from gpupool.kube.objects.timestamps import now_rfc3339
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION
from gpupool.kube.scheduler.config import LiveConfig, LiveStats
from gpupool.kube.scheduler.dra import claim_writes
from gpupool.kube.scheduler.dra.claims import ClaimBind
from gpupool.kube.scheduler.observe import SchedulingMetrics
from gpupool.kube.scheduler.rights import AllocationRights, is_policy_denial
from gpupool.kube.scheduler.state import ClusterState
from gpupool.kube.scheduler.verdicts import Verdicts
from gpupool.kube.scheduler.volume_writes import VolumeWriter
from gpupool.kube.scheduler.writes import BindOutcome, BindResult, bind, find_out
from gpupool.scheduling.wait_cause import WaitKind


class Binder:
    """Sends Bindings and settles their outcomes.

    Args:
        api: The API port.
        config: Identity (the record's ``scheduler``) and concurrency.
        signer: Signs each allocation record (None: unsigned, believed by nobody).
        state: The cache (UUIDs for the record; assumptions to drop).
        verdicts: Where outcomes are told.
        stats: Bind counters.
        metrics: Bind error counters.
        wake: Called when a failed bind should be retried by the loop.
        rights: Told when the admission policy refuses an allocation (not Ready then).
        volumes: Reserves or provisions a pod's unbound claims before its Binding.
    """

    def __init__(
        self,
        api: KubeAPI,
        config: LiveConfig,
        signer: RecordSigner | None,
        state: ClusterState,
        verdicts: Verdicts,
        stats: LiveStats,
        metrics: SchedulingMetrics,
        wake: Callable[[], None],
        rights: AllocationRights | None = None,
        volumes: VolumeWriter | None = None,
    ) -> None:
        self.api = api
        self.identity = config.identity
        self.signer = signer
        self.state = state
        self.verdicts = verdicts
        self.stats = stats
        self.metrics = metrics
        self.wake = wake
        self.rights = rights if rights is not None else AllocationRights()
        self.volumes = volumes
        self.gate = asyncio.Semaphore(config.bind_concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        self._claim_locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def send(self, pod: PodRecord, decision: Bind, pool: str, queue: str) -> None:
        """Start the pod's Binding once a slot is free (waits only for the slot).

        A pod whose claims are not bound yet has its volumes reserved or provisioned first
        (:mod:`~gpupool.kube.scheduler.volume_writes`), without a slot: that wait may be long.
        """
        if self.volumes is not None and self.volumes.needed(pod):
            task = asyncio.create_task(self._bind_after_volumes(pod, decision, pool, queue))
        else:
            await self.gate.acquire()
            task = asyncio.create_task(self._bind(pod, decision, pool, queue))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _bind_after_volumes(
        self, pod: PodRecord, decision: Bind, pool: str, queue: str
    ) -> None:
        assert self.volumes is not None
        uid = pod.metadata.uid
        failure = await self.volumes.prebind(
            pod,
            decision.node_name,
            lambda: uid in self.state.assumed,  # not deleted meanwhile
        )
        if failure is not None:  # kube's Unreserve: give back what the decision held, retry
            self.metrics.bind_failed("volumes")
            self.state.forget(uid)
            self.verdicts.refused(pod, failure, WaitKind.OTHER)
            self.wake()
            return
        await self.gate.acquire()
        await self._bind(pod, decision, pool, queue)

    def cancel_all(self) -> None:
        """Stop every Binding in flight (leadership lost: the next leader decides afresh)."""
        for task in list(self.tasks):
            task.cancel()

    async def _bind(self, pod: PodRecord, decision: Bind, pool: str, queue: str) -> None:
        uid = pod.metadata.uid
        try:
            claim_bind = self.state.claim_binds.get(uid)
            if claim_bind is not None:
                async with self._claim_lock(claim_bind.plan.claim.metadata.uid):
                    written = await self._write_claim(pod, claim_bind)
                if isinstance(written, BindResult):
                    self._settle(pod, decision, written)
                    return
                # the cache learns the allocation now, not when the watch catches up: should
                # the Binding fail, the claim still holds its GPUs from its status
                self.state.on_claim(MODIFIED, written)
                decision = claim_bind.pod_bind  # the pod's record: its claim holds the GPUs
            record = allocation.from_decision(
                decision,
                self.state.uuids.get(decision.node_name, ()),
                self.identity,
                now_rfc3339(),
                pool=pool,
                queue=queue,
            )
            if self.signer is not None:
                record = self.signer.sign(record, uid)
            result = await bind(
                self.api,
                pod,
                decision.node_name,
                {ANNOTATION_ALLOCATION: allocation.encode(record)},
            )
            if result.outcome is BindOutcome.UNKNOWN:
                self.stats.bind_unknown += 1
                result = await find_out(self.api, pod, result)
            self._settle(pod, decision, result)
        finally:
            self.gate.release()

    @contextlib.asynccontextmanager
    async def _claim_lock(self, uid: str) -> AsyncIterator[None]:
        """One write at a time per claim, in decision order.

        A pod joining a claim that another pod of the same cycle allocates then finds the
        allocation written (locks are first come, first served). A claim's lock is dropped when
        no write holds or awaits it.
        """
        lock, users = self._claim_locks.get(uid, (asyncio.Lock(), 0))
        self._claim_locks[uid] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._claim_locks[uid]
            if users == 1:
                del self._claim_locks[uid]
            else:
                self._claim_locks[uid] = (lock, users - 1)

    async def _write_claim(
        self, pod: PodRecord, claim_bind: ClaimBind
    ) -> ResourceClaim | BindResult:
        """Allocate the pod's claim (or join it): the claim as stored, or why not."""
        claim = claim_bind.plan.claim
        if claim_bind.allocation is None:
            return await claim_writes.reserve(self.api, claim, pod)
        record = claim_record.record_for(
            claim_bind.allocation.devices.results[0].pool,
            claim_bind.allocation,
            self.identity,
            now_rfc3339(),
        )
        if self.signer is not None:
            record = self.signer.for_domain(CLAIM_DOMAIN).sign(record, claim.metadata.uid)
        return await claim_writes.allocate(
            self.api, claim, pod, claim_bind.allocation, claim_record.encode(record)
        )

    def _settle(self, pod: PodRecord, decision: Bind, result: BindResult) -> None:
        uid = pod.metadata.uid
        if result.outcome is BindOutcome.BOUND:
            self.state.claim_binds.pop(uid, None)
            self.stats.binds += 1
            self.verdicts.bound(pod, decision)
            return
        self.metrics.bind_failed(result.reason)
        self.state.forget(uid)
        queue = self.verdicts.queue
        if result.outcome is BindOutcome.GONE:
            queue.bound(uid)  # nothing left to schedule
        elif result.outcome is BindOutcome.REFUSED:
            if is_policy_denial(result.message):
                self.rights.refused(result.message)  # said once, and /readyz says it
            message = f"binding refused by the API server: {result.message}"
            self.verdicts.refused(pod, message, WaitKind.OTHER)
        else:  # conflict or gone: the watch tells what happened; retry after a backoff
            queue.failed(uid, time.monotonic(), f"binding {result.reason}", WaitKind.OTHER)
        self.wake()
