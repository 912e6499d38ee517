"""Preemption carried out: victims leave through the Eviction API, never by a direct delete.

An Eviction (``POST .../pods/NAME/eviction``, ``policy/v1``) is the API server's graceful,
budget-aware delete: it refuses with 429 while a PodDisruptionBudget allows no disruption, and
otherwise deletes the pod with its grace period. Deleting victims directly would break the
budgets operators set exactly to keep serving replicas up. So a refused eviction is *retried*
(1 s doubling to 30 s) for as long as the preemptor still waits for it, and its refusal becomes
the preemptor's pending reason (``waiting for eviction of ns/victim: ... disruption budget``),
so nobody has to guess why a nominated pod does not start.

Each eviction the server accepts gets an Event on the victim naming the preemptor and the rule
(``Preempted``), so the owner of an evicted pod can tell who took its place and why. The eviction
carries the victim's uid as a precondition: a pod recreated under the same name is not evicted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.records import PodRecord
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


def eviction_body(victim: PodRecord) -> dict[str, object]:
    """The policy/v1 Eviction for ``victim``, with its uid as a precondition."""
    meta = victim.metadata
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta.name, "namespace": meta.namespace},
        "deleteOptions": {"preconditions": {"uid": meta.uid}},
    }


class Evictor:
    """Evicts victims in the background and remembers which preemptor waits for which.

    Args:
        api: The API port.
        reports: Where Events go.
        wanted: Asked before each attempt; an eviction no longer wanted is dropped.
        on_refused: Called when the server refuses one (the preemptor's reason changes).
    """

    def __init__(
        self, api: KubeAPI, reports: PodReporter, wanted: Wanted, on_refused: Callable[[], None]
    ) -> None:
        self.api = api
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
                await asyncio.sleep(delay)
        finally:
            self.outstanding.pop(victim.metadata.uid, None)

    async def _attempt(self, eviction: Eviction) -> bool:
        """One request; True when the eviction is settled (done, or the victim is gone)."""
        victim, preemptor = eviction.victim, eviction.preemptor
        meta = victim.metadata
        path = f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}/eviction"
        try:
            await self.api.request("POST", path, body=eviction_body(victim))
        except ApiError as error:
            if error.status in (404, 409):  # gone, or replaced under the same name
                return True
            self.refusals += 1
            eviction.refused = (
                f"a PodDisruptionBudget allows no disruption now ({error.message})"
                if error.status == 429
                else f"eviction refused ({error.status}): {error.message}"
            )
            log.info("evicting %s for %s: %s", victim.key, preemptor.key, eviction.refused)
            self.on_refused()
            return False
        except Exception as error:  # transport: try again
            log.warning("evicting %s: %s", victim.key, error)
            return False
        self.evicted += 1
        note = (
            f"Preempted by {preemptor.key} (rule {eviction.rule}) to make room on node "
            f"{eviction.node}"
        )
        self.reports.event(victim, "Warning", "Preempted", note)
        return True
