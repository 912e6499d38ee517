"""What governance may read of the live scheduler and ask of it: one door into the scheduler.

The governance controller (:mod:`gpupool.kube.governance`) reads the caches once a pass and acts
on what it decides: Events, evictions through the pool's terms, consolidation's moves, phantom
releases. It does all of it here, never through the scheduler's state, queue, book, applier or
preemptions: an import contract (``pyproject.toml``) keeps :mod:`gpupool.kube.governance` to
this module, the eviction door (:mod:`.departures`) and the Event writer (:mod:`.writes`), so the
scheduler's internals can change without governance reading a half-updated structure or
writing into one.

A :class:`GovernanceReading` is taken in the scheduler's event loop, at the start of a pass (or
of the consolidation hook) and copied: what a pass decides on stays the same while it awaits
the API server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpupool.core.model import PodSpec
from gpupool.governance.congestion_ledger import CongestionLedger
from gpupool.governance.decisions import Release
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.scheduler.apply import CycleHook
from gpupool.kube.scheduler.config import DecisionHook
from gpupool.kube.scheduler.departures import Departure
from gpupool.kube.scheduler.dra.claim_ledger import claim_charges, claim_gpus_by_pod
from gpupool.kube.scheduler.live import LiveScheduler
from gpupool.kube.scheduler.phantoms import find_phantoms, release_phantom
from gpupool.kube.scheduler.writes import PodReporter
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.workload import Running
from gpupool.scheduling.decisions import GangSpec, Preempt
from gpupool.scheduling.wait_cause import WaitKind


@dataclass(frozen=True)
class GovernanceReading:
    """The scheduler's caches as one governance pass reads them.

    Attributes:
        pods: Pod records by uid.
        nodes: Node records by name.
        trusted: The pods whose GPUs the scheduler holds from a record it trusts (not foreign).
        claim_gpus: Each pod running on a DRA claim, to that claim's GPUs.
        claim_charges: Each claim pod its queue is charged for, to the claim's GPUs.
        gangs: What each gang asks, by gang key.
        policy: The compiled pools and queues (None before the first snapshot).
        running: What the quota ledger charges each running pod, by uid.
    """

    pods: Mapping[str, PodRecord]
    nodes: Mapping[str, NodeRecord]
    trusted: frozenset[str]
    claim_gpus: Mapping[str, PodSpec]
    claim_charges: Mapping[str, PodSpec]
    gangs: Mapping[str, GangSpec]
    policy: ClusterPolicy | None
    running: Mapping[str, Running]


class GovernancePort:
    """Governance's handle on a :class:`~gpupool.kube.scheduler.live.LiveScheduler`."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self._scheduler = scheduler

    @property
    def api(self) -> KubeAPI:
        """The replica's API client."""
        return self._scheduler.api

    @property
    def identity(self) -> str:
        """The replica's identity (who audit records say acted)."""
        return self._scheduler.config.identity

    @property
    def scheduler_name(self) -> str:
        """The ``schedulerName`` of the pods this scheduler places (the ones governed)."""
        return self._scheduler.config.scheduler_name

    @property
    def leading(self) -> bool:
        """Whether this replica holds the Lease now."""
        return self._scheduler.leading

    @property
    def synced(self) -> bool:
        """Whether every cache completed its first list."""
        return self._scheduler.synced

    @property
    def reports(self) -> PodReporter:
        """Where Events on pods are written."""
        return self._scheduler.reports

    @property
    def congestion(self) -> CongestionLedger:
        """The congestion ledger the scheduler feeds (governance adds idle GPU-hours)."""
        return self._scheduler.applier.congestion.ledger

    @property
    def notes(self) -> dict[str, str]:
        """What consolidation last said of each waiting pod, by uid (``explain`` shows it)."""
        return self._scheduler.applier.notes

    def pods(self) -> Mapping[str, PodRecord]:
        """The pod records now, not copied: for a hook that reads them without awaiting."""
        return self._scheduler.state.pods

    def read(self) -> GovernanceReading:
        """The caches now, copied (call in the scheduler's event loop)."""
        scheduler = self._scheduler
        state, book = scheduler.state, scheduler.book
        snapshot = state.snapshot
        held = snapshot.allocations if snapshot is not None else {}
        by_pod, charges = {}, {}
        if snapshot is not None:
            by_pod = claim_gpus_by_pod(state.claims, snapshot, state.pods)
            charges = claim_charges(state.claims, snapshot, state.pods, state.claim_binds)
        return GovernanceReading(
            pods=dict(state.pods),
            nodes=dict(state.nodes),
            trusted=frozenset(uid for uid in held if uid not in state.foreign),
            claim_gpus=by_pod,
            claim_charges=charges,
            gangs=scheduler.intake.gangs.specs(),
            policy=book.policy,
            running=dict(book.running),
        )

    def on_decision(self, hook: DecisionHook) -> None:
        """Call ``hook`` with every pod the scheduler binds or tells why it waits."""
        self._scheduler.on_decision = hook

    def after_cycle(self, hook: CycleHook) -> None:
        """Call ``hook`` after every cycle's decisions, before its Bindings are sent."""
        self._scheduler.applier.after_cycle = hook

    def move(self, pod: PodRecord, decision: Preempt, pods: Mapping[str, PodRecord]) -> None:
        """Move ``decision``'s victims out for ``pod``: nominate it, evict them, tell it why."""
        preemptions = self._scheduler.preemptions
        preemptions.nominated[pod.metadata.uid] = decision.node_name
        reason = preemptions.start(pod, decision, pods)
        self._scheduler.verdicts.unschedulable(pod, reason, WaitKind.PREEMPTING)

    async def remove(self, pod: PodRecord) -> Departure:
        """Evict ``pod`` through the eviction door (its pool's grace, its budgets)."""
        return await self._scheduler.departures.remove(pod)

    async def release_phantoms(
        self, before_each: Callable[[], None]
    ) -> list[tuple[Release, PodRecord]]:
        """Release every confirmed phantom allocation in the cache; wake the scheduler.

        ``before_each`` is called before each release (it raises to stop: the lead was lost).
        Returns each release with the pod it was for (for the audit).
        """
        state = self._scheduler.state
        released = []
        for release, pod in await find_phantoms(self.api, state):
            before_each()
            release_phantom(state, release, pod)
            released.append((release, pod))
            self._scheduler.wake.set()
        return released
