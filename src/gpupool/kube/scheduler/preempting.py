"""Preemptors across cycles: their nominated nodes, their victims, and pods on their way out.

The engine decides a preemption in one cycle; carrying it out takes many: victims are evicted
(:mod:`gpupool.kube.scheduler.evictions`), terminate for their grace period, and only then is the
room
free. :class:`Preemptions` keeps what must survive between cycles, on the leader only:

* **nominations** (preemptor -> node name, as kube-scheduler's ``nominatedNodeName``): passed to
  every cycle, so that no pod of at most the preemptor's priority takes the freed room, and the
  preemptor is decided in every cycle even while it backs off (a nomination the engine does not
  see is dropped). Names, not rows: a node rebuild renumbers rows.
* **victims** per preemptor: once they are all gone and the preemptor still does not fit
  (another scheduler's pod took the room first), the nomination is given up so it may preempt
  again, instead of waiting forever for room that will not come.
* **pods on their way out** (an eviction outstanding, or a deletion under way): never offered
  to the engine as victims again, or a second preemptor would be promised the same room.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.evictions import Evictor
from gpupool.kube.scheduler.writes import PodReporter
from gpupool.policy.workload import Running
from gpupool.scheduling.decisions import Preempt
from gpupool.scheduling.wait_cause import WaitCause, WaitKind


class Preemptions:
    """Nominations, victims and leaving pods of one leader term.

    Args:
        evictor: Evicts victims.
        reports: Where the preemptor's nomination and Events are written.
    """

    def __init__(self, evictor: Evictor, reports: PodReporter) -> None:
        self.evictor = evictor
        self.reports = reports
        self.nominated: dict[str, str] = {}
        self.victims: dict[str, tuple[str, ...]] = {}
        self.terminating: set[str] = set()

    def clear(self) -> None:
        """A new term: decide afresh (the evictions of the previous term were cancelled)."""
        self.nominated.clear()
        self.victims.clear()

    def on_pod(self, pod: PodRecord, *, gone: bool) -> None:
        """Follow a pod event: forget a pod that left, note a bound pod being deleted."""
        uid = pod.metadata.uid
        if gone:
            self.nominated.pop(uid, None)
            self.victims.pop(uid, None)
            self.terminating.discard(uid)
        elif pod.metadata.deletion_timestamp is not None and pod.spec.node_name:
            self.terminating.add(uid)

    def candidates(self, running: Mapping[str, Running]) -> Mapping[str, Running]:
        """``running`` without pods on their way out (copied only while there are some)."""
        evicting, terminating = self.evictor.outstanding, self.terminating
        if not (evicting or terminating):
            return running
        return {
            uid: r for uid, r in running.items() if uid not in evicting and uid not in terminating
        }

    def rows(self, node_index: Mapping[str, int]) -> dict[str, int]:
        """The nominations as the engine takes them (nodes that left are dropped)."""
        return {uid: node_index[n] for uid, n in self.nominated.items() if n in node_index}

    def carry(self, nominations: Mapping[str, int], node_names: Sequence[str]) -> None:
        """Keep the nominations a cycle returned."""
        self.nominated = {uid: node_names[row] for uid, row in nominations.items()}

    def waiting_cause(self, uid: str, cause: WaitCause, pods: Mapping[str, PodRecord]) -> WaitCause:
        """A nominated pod still waits: why; gives the nomination up if its victims are gone."""
        if uid not in self.nominated:
            return cause
        blocked = self.evictor.blocked_reason(uid)
        if blocked:
            cause = WaitCause(WaitKind.PREEMPTING, blocked)
        if not any(victim in pods for victim in self.victims.get(uid, ())):
            self.nominated.pop(uid, None)
            self.victims.pop(uid, None)
        return cause

    def start(self, pod: PodRecord, decision: Preempt, pods: Mapping[str, PodRecord]) -> str:
        """Nominate the preemptor and evict its victims; returns its pending reason.

        The engine chose the node with the pod's own node selector, affinity and tolerations
        (they are part of its request), so the node is one the pod can use.
        """
        uid = pod.metadata.uid
        node = decision.node_name
        victims = [pods[name] for name in decision.victims if name in pods]
        self.victims[uid] = decision.victims
        rule = decision.rule.value
        self.reports.nominate(pod, node)
        note = f"Preempting {', '.join(v.key for v in victims)} on node {node} (rule {rule})"
        if decision.violating:  # chosen only because no victims a budget spares made room
            note += (
                f"; {len(decision.violating)} of them protected by a PodDisruptionBudget "
                "(no victims it spares make room)"
            )
        self.reports.event(pod, "Normal", "Preempting", note)
        for victim in victims:
            self.evictor.evict(victim, pod, rule, node)
        return f"nominated to node {node}: preempting {len(victims)} pod(s) (rule {rule})"
