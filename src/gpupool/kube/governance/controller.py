"""The governance controller: idle reclaim, share-duration limits, abnormal pods, phantom shares.

It runs on the leader next to the scheduling loop, every ``interval`` seconds, over the
scheduler's own informer caches (pods, nodes), the GPUPool and GPUQueue objects (listed each
pass: a handful of objects) and the node agent's usage annotation. The pure rules
(:mod:`gpupool.governance.rules`) decide; this module carries the decisions out:

* a warning is a merge patch of ``gpupool.io/governance-warned`` on the pod plus a Warning Event;
  the warning time lives on the pod *and* in memory, so a restarted controller continues where
  the last one stopped, and a tenant who deletes or post-dates the annotation gains nothing
  while this controller runs (the earlier of the two times counts);
* a reclaim or a cleanup removes the pod the way preemption does
  (:mod:`gpupool.kube.scheduler.departures`): an eviction through the Eviction API
  (``policy/v1``), tried again on later passes while a PodDisruptionBudget refuses it, and a
  direct delete once refusals have lasted the pool's ``disruptionBudgetWait`` (a budget must
  not make a pod immune to idle reclaim and time limits); the grace is capped by the pool's
  ``maxEvictionGracePeriodSeconds``, and the Event and audit say what was given;
* a phantom allocation (a share the scheduler's cache still counts for a pod the API server
  says is gone, finished or bound elsewhere) is released in the cache within the pass that finds
  it, after the API server confirmed it with a direct read, so a pod created after the list was
  taken is never taken for a phantom.

Every action is audited through the store's buffered writer (when a database is configured)
with the rule that fired and the values it fired on, under a deterministic key, so an action
retried on the next pass is one row. The controller also keeps the counters behind
``/metrics``: reclaims and cleanups by rule, seconds idle of the pods idle now, GPU-hours per
queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.core.model import PodSpec
from gpupool.governance.decisions import Action, Cleanup, ClearWarning, Decision, Reclaim, Warn
from gpupool.governance.freshness import decide_on_fresh_usage, usage_is_stale
from gpupool.governance.idleness import idle_since
from gpupool.governance.rules import Limits, PodFacts, PodWarning
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.governance.audit import Auditor
from gpupool.kube.governance.config import GovernanceConfig
from gpupool.kube.governance.consolidation import LiveConsolidation
from gpupool.kube.governance.facts import (
    GovernanceSettings,
    format_warning,
    not_ready_since,
    parse_warning,
    pod_restarts,
    read_settings,
)
from gpupool.kube.governance.gang_peers import with_gang
from gpupool.kube.governance.idle_congestion import IdleCharges
from gpupool.kube.governance.ledger import QueueLedger
from gpupool.kube.governance.silence import AgentSilence
from gpupool.kube.governance.usage_feed import UsageFeed
from gpupool.kube.objects import allocation
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.timestamps import parse_time
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION, ANNOTATION_GOVERNANCE_WARNED
from gpupool.kube.policy.book import expected_runtime
from gpupool.kube.scheduler.departures import Outcome
from gpupool.kube.scheduler.governance_port import GovernancePort, GovernanceReading
from gpupool.store.writer import StoreWriter

log = logging.getLogger(__name__)

GROUP = "/apis/gpupool.io/v1alpha1"


class LeadershipLostError(Exception):
    """This replica lost the Lease in the middle of a governance pass."""


@dataclass
class GovernanceStats:
    """Counters for metrics and tests (rule values as keys)."""

    passes: int = 0
    pass_errors: int = 0
    passes_stopped: int = 0
    warnings: Counter[str] = field(default_factory=Counter)
    reclaims: Counter[str] = field(default_factory=Counter)
    cleanups: Counter[str] = field(default_factory=Counter)
    releases: int = 0
    evictions_blocked: int = 0
    idle_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    stale_usage_nodes: int = 0
    queue_gpu_hours: dict[str, float] = field(default_factory=dict)


class GovernanceController:
    """Governance on the leader, over one live scheduler's caches.

    Args:
        port: Governance's door into the replica's scheduler (its caches, its Event reporter,
            its leadership, the eviction door).
        config: How to run.
        writer: Where audit records go; ``None``: no store (logs and Events only).
        clock: Seconds since the epoch (tests may pass their own).
    """

    def __init__(
        self,
        port: GovernancePort,
        config: GovernanceConfig,
        writer: StoreWriter | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.port = port
        self.api: KubeAPI = port.api
        self.config = config
        self.writer = writer
        self.clock = clock
        self.stats = GovernanceStats()
        self.settings = GovernanceSettings()
        self.usage = UsageFeed(AgentSilence(port.reports))
        self._warned: dict[str, PodWarning] = {}
        self._declared: dict[str, float] = {}
        self._evicted: set[str] = set()
        self._reading: GovernanceReading | None = None
        """What this pass reads of the scheduler's caches (taken when it starts)."""
        self._next_phantom_check = 0.0
        self.ledger = QueueLedger(writer)
        self.auditor = Auditor(writer, port.identity)
        self.idle_charges = IdleCharges(port)
        self.consolidation = LiveConsolidation(port, self.auditor, lambda: self.settings, clock)
        port.on_decision(self._decided)

    def _decided(self, pod: PodRecord, what: str, detail: str) -> None:
        """The scheduler's :data:`~gpupool.kube.scheduler.config.DecisionHook`: audit it."""
        self.auditor.decision(pod, what, detail, self.settings, self.clock())

    async def run(self) -> None:
        """Run passes while this replica leads, until cancelled."""
        while True:
            await asyncio.sleep(self.config.interval)
            if not self.port.leading:
                self.ledger.reconciled = False  # the next term starts with a reconciliation
            if not (self.port.leading and self.port.synced):
                continue
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.stats.pass_errors += 1
                log.exception("governance pass failed; next pass in %.1f s", self.config.interval)

    async def run_pass(self) -> None:
        """One pass: settings, usage, every bound pod, phantoms, accounting.

        It stops where it is when this replica loses the Lease (counted in ``passes_stopped``).
        """
        try:
            await self._pass()
        except LeadershipLostError:
            self.stats.passes_stopped += 1
            log.warning("governance pass stopped: this replica no longer leads")

    async def _pass(self) -> None:
        self.stats.passes += 1
        now = self.clock()
        self.settings = await self._read_settings()
        if not self.ledger.reconciled:  # this term's first pass: close what ended with no leader
            await self.ledger.reconcile(self.api, self.port.read().pods)
        self._reading = reading = self.port.read()
        pods = reading.pods
        samples = self.usage.observe(reading.nodes, pods, self.settings, now, reading.claim_gpus)
        self.stats.stale_usage_nodes = len(self.usage.silence.silent)
        self._warned = {uid: w for uid, w in self._warned.items() if uid in pods}
        self._declared = {uid: t for uid, t in self._declared.items() if uid in pods}
        self._evicted &= pods.keys()
        for sample in samples:
            if self.writer is not None:  # the efficiency of a live cluster's cost report
                await self.writer.usage(sample)
        idle: dict[tuple[str, str], float] = {}
        for pod in pods.values():
            if not pod.spec.node_name or pod.spec.scheduler_name != self.port.scheduler_name:
                continue
            facts, limits = self._facts(pod, now)
            period = self.usage.period(pod.metadata.uid)
            fresh = not usage_is_stale(facts.usage, period, now)
            if limits.idle_threshold_percent is not None and fresh:
                since = idle_since(facts.usage, facts.last_active, facts.allocated_at)
                if since is not None and pod.status.phase == "Running":
                    idle[(pod.metadata.namespace, pod.metadata.name)] = max(now - since, 0.0)
            decision = decide_on_fresh_usage(facts, limits, self.config.cleanup, now, period)
            if decision is None:
                continue
            self._check_lead()
            try:
                await self._carry_out(pod, decision, reading, now)
            except Exception as error:  # one pod's failure must not hold up the others
                self.stats.pass_errors += 1
                log.warning("governance on %s (%s): %r", pod.key, decision.rule.value, error)
        self.stats.idle_seconds = idle
        self.idle_charges.charge(idle, reading, now)
        if time.monotonic() >= self._next_phantom_check:
            self._next_phantom_check = time.monotonic() + self.config.phantom_interval
            await self._release_phantoms(now)
        self._check_lead()
        self.stats.queue_gpu_hours = await self.ledger.update(
            reading, self.settings, self._trusted_record, now
        )

    def _check_lead(self) -> None:
        """Stop the pass (:class:`LeadershipLostError`) once this replica no longer leads.

        An action the API server takes from a replica that lost the Lease can race the new
        leader's (a second eviction, a warning written over its own, a ledger row it closes),
        so the pass checks between actions, not only when it starts.
        """
        if not self.port.leading:
            raise LeadershipLostError

    # -- inputs ------------------------------------------------------------------------------

    async def _read_settings(self) -> GovernanceSettings:
        try:
            pools = await self.api.list_items(f"{GROUP}/gpupools")
            queues = await self.api.list_items(f"{GROUP}/gpuqueues")
        except ApiError as error:
            if error.status == 404:  # CRDs not installed: no settings, cleanup rules only
                return GovernanceSettings()
            raise
        await self.auditor.policy_changes("GPUPool", pools, self.clock())
        await self.auditor.policy_changes("GPUQueue", queues, self.clock())
        return read_settings(pools, queues)

    def _trusted_record(self, pod: PodRecord) -> allocation.AllocationRecord | None:
        if self._reading is None or pod.metadata.uid not in self._reading.trusted:
            return None
        text = pod.metadata.annotations.get(ANNOTATION_ALLOCATION)
        try:
            return allocation.decode(text) if text else None
        except allocation.AllocationFormatError:
            return None

    def _facts(self, pod: PodRecord, now: float) -> tuple[PodFacts, Limits]:
        uid = pod.metadata.uid
        node = self._node(pod)
        pool = self.settings.pool_of(node)
        limits = self.settings.limits_for(pool, pod)
        record = self._trusted_record(pod)
        allocated_at = parse_time(record.time) if record is not None else None
        restarts, waiting = pod_restarts(pod)
        warning = self._warned.get(uid)
        written = parse_warning(pod.metadata.annotations.get(ANNOTATION_GOVERNANCE_WARNED))
        earlier = written is not None and (
            warning is None or (written.rule is warning.rule and written.time < warning.time)
        )
        if written is not None and earlier and written.time <= now:
            warning = written
            self._warned[uid] = written
        facts = PodFacts(
            uid=uid,
            pod_class=self.settings.class_of(pod),
            allocated_at=allocated_at,
            declared_runtime=self._declared_runtime(pod),
            unplaced_since=parse_time(pod.metadata.creation_timestamp) if record is None else None,
            phase=pod.status.phase,
            restarts=restarts,
            waiting_reason=waiting,
            node_not_ready_since=not_ready_since(node),
            usage=self.usage.history(uid),
            last_active=self.usage.last_active(uid),
            compute_fraction=self.usage.fraction(pod, self._claim_gpu(uid)),
            warning=warning,
            deleting=pod.metadata.deletion_timestamp is not None,
        )
        return facts, limits

    def _declared_runtime(self, pod: PodRecord) -> float | None:
        """The shortest runtime the pod has declared while this controller watched it.

        The admission policy ``gpupool-declared-runtime`` fixes the annotation at creation;
        where it is not installed, a tenant who raises or removes it after the scheduler
        backfilled the pod on it gains nothing while this controller runs.
        """
        uid = pod.metadata.uid
        declared = expected_runtime(pod)
        known = self._declared.get(uid)
        if declared is not None and (known is None or declared < known):
            self._declared[uid] = known = declared
        return known

    # -- outputs -----------------------------------------------------------------------------

    async def _carry_out(
        self, pod: PodRecord, decision: Decision, reading: GovernanceReading, now: float
    ) -> None:
        uid = pod.metadata.uid
        if isinstance(decision, Warn):
            warning = PodWarning(decision.rule, now)
            self._warned[uid] = warning
            await self._annotate(pod, format_warning(warning))
            self.stats.warnings[decision.rule.value] += 1
            note = f"will be reclaimed after {decision.values['grace']:g} s unless it changes: "
            self.port.reports.event(pod, "Warning", "GovernanceWarning", note + decision.message)
            await self._audit(pod, decision, now, "warned", f"warn/{uid}/{decision.rule.value}")
        elif isinstance(decision, ClearWarning):
            self._warned.pop(uid, None)
            await self._annotate(pod, None)
            self.port.reports.event(pod, "Normal", "GovernanceWarningCleared", decision.message)
        elif isinstance(decision, Reclaim | Cleanup):
            for target, taken in with_gang(pod, decision, reading.pods, reading.gangs):
                await self._remove(target, taken, now)

    async def _remove(self, pod: PodRecord, decision: Reclaim | Cleanup, now: float) -> None:
        """Evict ``pod`` for ``decision`` (through its budgets), say so, audit it."""
        uid = pod.metadata.uid
        if uid in self._evicted:
            return  # evicted already; its deletion has not reached the cache yet
        departure = await self.port.remove(pod)
        if departure.outcome is Outcome.REFUSED:
            self.stats.evictions_blocked += 1
            log.warning("evicting %s: %s (tried again next pass)", pod.key, departure.note)
            return
        self._evicted.add(uid)
        counter = self.stats.reclaims if isinstance(decision, Reclaim) else self.stats.cleanups
        counter[decision.rule.value] += 1
        verb = "Reclaimed" if isinstance(decision, Reclaim) else "CleanedUp"
        message = "; ".join(filter(None, (decision.message, departure.note)))
        self.port.reports.event(pod, "Warning", verb, message)
        step = departure.outcome.value
        await self._audit(pod, decision, now, step, f"{verb.lower()}/{uid}", departure.note)

    async def _annotate(self, pod: PodRecord, value: str | None) -> None:
        meta = pod.metadata
        path = f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}"
        body = {"metadata": {"annotations": {ANNOTATION_GOVERNANCE_WARNED: value}}}
        try:
            await self.api.patch(path, body)
        except ApiError as error:
            if error.status != 404:
                log.warning("annotating %s: %s", pod.key, error)

    async def _audit(
        self, pod: PodRecord, decision: Action, now: float, step: str, key: str, note: str = ""
    ) -> None:
        pool = self.settings.pool_of(self._node(pod))
        await self.auditor.action(
            pod,
            decision,
            now,
            step,
            key,
            self.settings,
            pool.name if pool is not None else "",
            note,
        )

    # -- phantoms ----------------------------------------------------------------------------

    async def _release_phantoms(self, now: float) -> None:
        for release, pod in await self.port.release_phantoms(self._check_lead):
            self.stats.releases += 1
            await self._audit(pod, release, now, "released", f"phantom/{release.pod_uid}/{now:.0f}")

    # -- this pass's reading -----------------------------------------------------------------

    def _node(self, pod: PodRecord) -> NodeRecord | None:
        return self._reading.nodes.get(pod.spec.node_name) if self._reading is not None else None

    def _claim_gpu(self, uid: str) -> PodSpec | None:
        """The GPUs of the claim the pod runs on (they scale its idle threshold)."""
        return self._reading.claim_gpus.get(uid) if self._reading is not None else None
