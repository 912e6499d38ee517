"""Preemption carried out: victims evicted, and deleted only past their pool's budget wait.

Victims leave through :class:`~gpupool.kube.scheduler.departures.Departures`: an Eviction
(``POST .../pods/NAME/eviction``, ``policy/v1``), the API server's graceful, budget-aware delete,
which refuses with 429 while a PodDisruptionBudget allows no disruption. A refused eviction is
*retried* (1 s doubling to 30 s, never past the moment the wait ends) for as long as the
preemptor still waits for it, and its refusal becomes the preemptor's pending reason
(``waiting for eviction of ns/victim: ... disruption budget``), so nobody has to guess why a
nominated pod does not start. Once refusals have lasted the pool's ``disruptionBudgetWait`` the
victim is deleted directly, as kube-scheduler's preemption does; the grace it gets is capped by
the pool's ``maxEvictionGracePeriodSeconds`` either way.

Each victim that leaves gets an Event naming the preemptor, the rule and what it was given
(``Preempted``: its grace, and for a delete the budget that blocked and for how long), so the
owner of an evicted pod can tell who took its place and why; the same text is audited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.config import DecisionHook
from gpupool.kube.scheduler.departures import Departures, Outcome
from gpupool.kube.scheduler.writes import PodReporter
from gpupool.retry import Backoff

log = logging.getLogger(__name__)

EVICTION_BACKOFF = Backoff(1.0, 30.0)
"""Waits between tries of a refused eviction: a disruption budget frees up in seconds to
minutes (a replica becomes ready), and the preemptor waits meanwhile."""


@dataclass
class Eviction:
    """One victim to evict for one preemptor.

    Attributes:
        victim: The pod to evict.
        preemptor: The pod it makes room for.
        rule: ``priority`` or ``reclaim``.
        node: The node the preemptor is nominated to.
        refused: The API server's last refusal ("" while none).
        attempts: Requests made.
    """

    victim: PodRecord
    preemptor: PodRecord
    rule: str
    node: str
    refused: str = ""
    attempts: int = 0


Wanted = Callable[[Eviction], bool]
"""Whether an eviction is still wanted (the victim still runs, the preemptor still waits)."""


class Evictor:
    """Evicts victims in the background and remembers which preemptor waits for which.

    Args:
        departures: Evicts (and deletes past the budget wait).
        reports: Where Events go.
        wanted: Asked before each attempt; an eviction no longer wanted is dropped.
        on_refused: Called when the server refuses one (the preemptor's reason changes).
    """

    on_decision: DecisionHook | None = None
    """Called as ``hook(victim, "preempt", note)`` when a victim leaves (audited)."""

    def __init__(
        self,
        departures: Departures,
        reports: PodReporter,
        wanted: Wanted,
        on_refused: Callable[[], None],
    ) -> None:
        self.departures = departures
        self.reports = reports
        self.wanted = wanted
        self.on_refused = on_refused
        self.outstanding: dict[str, Eviction] = {}
        self.evicted = 0
        self.refusals = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def evict(self, victim: PodRecord, preemptor: PodRecord, rule: str, node: str) -> None:
        """Start evicting ``victim`` for ``preemptor`` (once; a repeat is ignored)."""
        uid = victim.metadata.uid
        if uid in self.outstanding:
            return
        eviction = Eviction(victim, preemptor, rule, node)
        self.outstanding[uid] = eviction
        task = asyncio.create_task(self._run(eviction))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def blocked_reason(self, preemptor_uid: str) -> str:
        """Why the preemptor's victims are not gone yet, if the server refused one ("" if not)."""
        for eviction in self.outstanding.values():
            if eviction.preemptor.metadata.uid == preemptor_uid and eviction.refused:
                return f"waiting for eviction of {eviction.victim.key}: {eviction.refused}"
        return ""

    def cancel_all(self) -> None:
        """Stop every eviction (leadership lost); the next leader decides afresh."""
        for task in list(self._tasks):
            task.cancel()
        self.outstanding.clear()

    async def _run(self, eviction: Eviction) -> None:
        victim = eviction.victim
        try:
            for delay in EVICTION_BACKOFF.delays():
                if not self.wanted(eviction):
                    return
                eviction.attempts += 1
                if await self._attempt(eviction):
                    return
                left = self.departures.wait_left(victim)  # wake when the budget wait ends
                await asyncio.sleep(min(delay, left) if left > 0 else delay)
        finally:
            self.outstanding.pop(victim.metadata.uid, None)

    async def _attempt(self, eviction: Eviction) -> bool:
        """One try; True when the eviction is settled (the victim left or is gone)."""
        victim, preemptor = eviction.victim, eviction.preemptor
        try:
            departure = await self.departures.remove(victim)
        except Exception as error:  # transport: try again
            log.warning("evicting %s: %s", victim.key, error)
            return False
        if departure.outcome is Outcome.REFUSED:
            self.refusals += 1
            eviction.refused = departure.note
            log.info("evicting %s for %s: %s", victim.key, preemptor.key, eviction.refused)
            self.on_refused()
            return False
        if departure.left:
            self.evicted += 1
            note = (
                f"Preempted by {preemptor.key} (rule {eviction.rule}) to make room on node "
                f"{eviction.node}; {departure.note}"
            )
            self.reports.event(victim, "Warning", "Preempted", note)
            if self.on_decision is not None:
                self.on_decision(victim, "preempt", note)
        return True
