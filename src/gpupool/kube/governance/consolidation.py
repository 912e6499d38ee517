"""Consolidation on the leader: the pure rule after every cycle, its plans carried out or reported.

:func:`~gpupool.governance.consolidation.consolidate` decides (what moves, whether it pays,
within the pool's caps); this module gives it the live scheduler's state right after a cycle
(the scheduler's :attr:`~gpupool.kube.scheduler.apply.Applier.after_cycle` hook, so the plan
sees the snapshot the cycle left) and carries out what it returns:

* **which pods may move**: those a ReplicaSet or a StatefulSet owns (``ownerReferences`` with
  ``controller: true``), not being deleted, under the workload key ``namespace/Kind/name`` the
  hourly cap counts. A bare pod is never moved (nothing creates it again), nor a Job's pod: an
  eviction counts against the Job's ``backoffLimit`` unless its ``podFailurePolicy`` ignores
  ``DisruptionTarget``, so a move could fail a Job. The rule itself keeps gangs, claims and
  MIG slices where they are, and pods a PodDisruptionBudget protects;
* **Enabled**: the waiting pod is nominated to the node (``status.nominatedNodeName``, as a
  preemptor is, so no other pod takes the room) and the moved pods leave through the one
  eviction door (:mod:`gpupool.kube.scheduler.departures`: the Eviction API, the pool's grace
  cap, a budget's bounded wait, the requeue that keeps their controller's new pods their queue
  place), with rule ``consolidation`` in their Events; the plan's what-if (moves, where each
  lands, gain and loss) is audited as a ``consolidate`` record and told in a ``Consolidating``
  Event on the waiting pod;
* **ReportOnly**: nothing moves; the plan is audited and told once (a ``ConsolidationPlan``
  Event) until it changes;
* every outcome, a plan or why none, is kept per waiting pod for ``gpupool explain``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping

from gpupool.governance.consolidation import consolidate
from gpupool.governance.consolidation_inputs import inputs_after
from gpupool.governance.consolidation_plan import Declined, MoveHistory, Outcome, Plan
from gpupool.kube.governance.audit import Auditor
from gpupool.kube.governance.facts import GovernanceSettings
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.policy.requeue import controller_of
from gpupool.kube.scheduler.governance_port import GovernancePort
from gpupool.policy.spec import ConsolidationMode
from gpupool.policy.workload import Running
from gpupool.scheduling.decisions import CycleRequest, CycleResult, Preempt, Wait
from gpupool.scheduling.engine import PolicyEngine
from gpupool.scheduling.preemption import Rule

log = logging.getLogger(__name__)

MOVABLE_OWNERS = ("ReplicaSet", "StatefulSet")
"""Controllers whose pods a move may take: they create an evicted pod again, and its eviction
costs them nothing else (module docstring: why not a Job)."""


def workload_key(pod: PodRecord) -> str | None:
    """The key a move of ``pod`` is counted under, or ``None`` when it may not move."""
    owner = controller_of(pod)
    if owner is None or owner.kind not in MOVABLE_OWNERS or pod.metadata.deletion_timestamp:
        return None
    return f"{pod.metadata.namespace}/{owner.kind}/{owner.name}"


class LiveConsolidation:
    """The leader's consolidation: its move history, its counters and its last outcomes.

    Args:
        port: Governance's door into the replica's scheduler (pods, moves, Events, notes).
        auditor: Where plans are audited.
        settings: The governance settings of the last pass (the tenant of an audit record).
        clock: Seconds since the epoch.
    """

    def __init__(
        self,
        port: GovernancePort,
        auditor: Auditor,
        settings: Callable[[], GovernanceSettings],
        clock: Callable[[], float],
    ) -> None:
        self.port = port
        self.auditor = auditor
        self.settings = settings
        self.clock = clock
        self.history = MoveHistory()
        self.moves: Counter[str] = Counter()
        """Pods moved, by pool name (``/metrics``)."""
        self.plans: Counter[tuple[str, str]] = Counter()
        """Plans carried out or reported, by pool name and mode."""
        self._told: dict[str, str] = {}
        port.after_cycle(self.after_cycle)

    def after_cycle(self, engine: PolicyEngine, request: CycleRequest, result: CycleResult) -> None:
        """The hook: plan over the state the cycle left, then carry out or report."""
        if not self.port.leading:
            return
        pods = self.port.pods()
        owners = _owners(request.running, pods)
        inputs = inputs_after(engine, request, result, owners)
        outcomes = consolidate(inputs, self.history)
        if outcomes is None:  # searched less than a minute ago: what it said stands
            return
        notes = self.port.notes
        waiting = {stuck.workload.name for stuck in inputs.stuck}
        for uid in [uid for uid in notes if uid not in waiting]:
            del notes[uid]  # a resting pod keeps what the search that declined it said
        waits = {d.workload.name: d for d in result.decisions if isinstance(d, Wait)}
        names = request.snapshot.node_names
        for outcome in outcomes:
            pod = pods.get(outcome.pod)
            if pod is None:
                continue
            notes[outcome.pod] = describe(outcome, names, pods)
            if isinstance(outcome, Plan):
                pool = engine.policy.layout.pools[outcome.pool].name
                self._carry_out(pod, outcome, (waits[outcome.pod], pool), names, pods)

    def _carry_out(
        self,
        pod: PodRecord,
        plan: Plan,
        where: tuple[Wait, str],
        names: tuple[str, ...],
        pods: Mapping[str, PodRecord],
    ) -> None:
        wait, pool = where
        text = describe(plan, names, pods)
        if plan.mode is ConsolidationMode.REPORT_ONLY:
            if self._told.get(plan.pod) != text:
                self._told[plan.pod] = text
                self.plans[(pool, plan.mode.value)] += 1
                self.port.reports.event(pod, "Normal", "ConsolidationPlan", text)
                self._audit(pod, plan, (text, pool), names)
            return
        node = names[plan.node]
        decision = Preempt(
            workload=wait.workload,
            queue=wait.queue,
            pool=plan.pool,
            node=plan.node,
            node_name=node,
            victims=tuple(move.pod for move in plan.moves),
            rule=Rule.CONSOLIDATION,
            gpu_seconds_lost=plan.loss_gpu_seconds,
        )
        self.port.reports.event(pod, "Normal", "Consolidating", text)
        self.port.move(pod, decision, pods)
        self.history.record(plan, self.clock())
        self.moves[pool] += len(plan.moves)
        self.plans[(pool, plan.mode.value)] += 1
        self._audit(pod, plan, (text, pool), names)
        log.info("consolidation: %s", text)

    def _audit(
        self, pod: PodRecord, plan: Plan, told: tuple[str, str], names: tuple[str, ...]
    ) -> None:
        text, pool = told
        self.auditor.plan(pod, text, plan.values(names), self.settings(), (pool, self.clock()))


def describe(outcome: Outcome, names: tuple[str, ...], pods: Mapping[str, PodRecord]) -> str:
    """An outcome in words, with pods by ``namespace/name``."""

    def key(uid: str) -> str:
        pod = pods.get(uid)
        return pod.key if pod is not None else uid

    if isinstance(outcome, Declined):
        return f"consolidation: no moves: {outcome.why}"
    moved = ", ".join(
        f"{key(m.pod)} from {names[m.source]} (fits on {names[m.target]})" for m in outcome.moves
    )
    verb = "would move" if outcome.mode is ConsolidationMode.REPORT_ONLY else "moving"
    return (
        f"consolidation {verb} {moved} so that this pod fits on {names[outcome.node]}: it gains "
        f"{outcome.gain_gpu_seconds / 3600:.2f} GPU-hours (it waited {outcome.waited:.0f} s), "
        f"the moves cost {outcome.loss_gpu_seconds / 3600:.2f}"
    )


def _owners(running: Mapping[str, Running], pods: Mapping[str, PodRecord]) -> dict[str, str]:
    """The running pods that may move, with their workload keys."""
    owners = {}
    for uid in running:
        pod = pods.get(uid)
        if pod is not None and (key := workload_key(pod)) is not None:
            owners[uid] = key
    return owners
