"""A pod made to leave by gpupool: the Eviction API first, a direct delete past the pool's wait.

Preemption, reclaim and governance's reclaims (idle, share duration, declared runtime, cleanup)
all remove pods here, so one rule holds for all of them:

* the pod is **evicted** (``POST .../pods/NAME/eviction``, ``policy/v1``), the API server's
  graceful, budget-aware delete, with its uid as a precondition (a pod recreated under the same
  name is never touched);
* while a PodDisruptionBudget (or anything else) refuses the eviction, the caller tries again;
  once the refusals have lasted the pool's ``disruptionBudgetWait``, the pod is **deleted**
  directly, as kube-scheduler's preemption deletes its victims and Kueue's reclaim does not wait
  on budgets. A budget is the owner's wish for voluntary disruptions; left absolute, a tenant's
  ``maxUnavailable: 0`` would beat every guarantee, idle reclaim and time limit of the pool;
* either way the pod gets at most the pool's ``maxEvictionGracePeriodSeconds`` of grace (the
  smaller of that and its own ``terminationGracePeriodSeconds``), or a tenant's grace period
  would delay each eviction as long as it liked.

The note of each departure says what was given and why (the budget that blocked, for how long,
the grace and where it was capped) for the pod's Event and the audit record.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.policy.requeue import runs_again
from gpupool.policy.spec import EvictionSpec

DEFAULT_TERMINATION_GRACE = 30
"""The API server's ``terminationGracePeriodSeconds`` for a pod that sets none."""
REFUSALS_APART = 600.0
"""Seconds after which a new refusal starts a new wait: longer than any pause between two
tries of one removal (the evictor's backoff ends at 30 s; governance passes every 5 s by
default, and an interval set longer than this would never let a budget's wait run out)."""


class Outcome(enum.Enum):
    """How one try to remove a pod ended."""

    EVICTED = "evicted"
    """The Eviction API accepted it."""
    DELETED = "deleted"
    """Deleted directly: evictions were refused for the pool's whole ``disruptionBudgetWait``."""
    GONE = "gone"
    """Already gone, or replaced by a pod of the same name."""
    REFUSED = "refused"
    """Refused for now (a budget, a server error): try again later."""


@dataclass(frozen=True, slots=True)
class Departure:
    """One try's outcome.

    Attributes:
        outcome: How it ended.
        note: For the Event and audit: the grace given (and its cap) when the pod leaves, the
            budget and wait when it was deleted, the refusal when refused.
    """

    outcome: Outcome
    note: str = ""

    @property
    def left(self) -> bool:
        """Whether the pod is on its way out (evicted or deleted)."""
        return self.outcome in (Outcome.EVICTED, Outcome.DELETED)


Terms = Callable[[PodRecord], EvictionSpec]
"""The eviction terms of the pool a pod runs in."""
Covering = Callable[[PodRecord], tuple[str, ...]]
"""The PodDisruptionBudgets known to cover a pod (``namespace/name``), to name them."""


def grace_given(pod: PodRecord, terms: EvictionSpec) -> tuple[int, str]:
    """The grace a removed pod gets, and what to say of it."""
    own = pod.spec.termination_grace_period_seconds
    own = DEFAULT_TERMINATION_GRACE if own is None else own
    if own <= terms.max_grace:
        return own, f"grace {own} s"
    return terms.max_grace, (
        f"grace {terms.max_grace} s (its terminationGracePeriodSeconds {own} capped by the "
        "pool's maxEvictionGracePeriodSeconds)"
    )


def refusal_text(error: ApiError) -> str:
    """What a refused eviction means, for the preemptor's reason and the logs."""
    if error.status == 429:
        return f"a PodDisruptionBudget allows no disruption now ({error.message})"
    return f"eviction refused ({error.status}): {error.message}"


class Departures:
    """Removes pods within their pool's terms and remembers since when each is refused.

    Args:
        api: The API port.
        terms: The eviction terms of a pod's pool.
        covering: The budgets known to cover a pod (named in the note of a delete).
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        api: KubeAPI,
        terms: Terms,
        covering: Covering,
        clock: Callable[[], float] = time.monotonic,
        on_left: Callable[[PodRecord], None] | None = None,
    ) -> None:
        self.api = api
        self.terms = terms
        self.covering = covering
        self.clock = clock
        self.on_left = on_left
        """Told of each pod that leaves by gpupool's hand (its work keeps its queue place)."""
        self.refused: dict[str, tuple[float, float]] = {}
        """Per pod uid, its first and latest refusal of the blockage going on."""
        self.deleted = 0

    def forget(self, uid: str) -> None:
        """The pod left the cache: its refusals no longer count."""
        self.refused.pop(uid, None)

    def wait_left(self, pod: PodRecord) -> float:
        """Seconds until a refused pod would be deleted (its pool's whole wait if not refused)."""
        wait = self.terms(pod).budget_wait
        since = self._blocked_since(pod.metadata.uid)
        return wait if since is None else max(0.0, since + wait - self.clock())

    async def remove(self, pod: PodRecord) -> Departure:
        """One try: evict; delete if evictions have now been refused for the pool's wait."""
        uid = pod.metadata.uid
        terms = self.terms(pod)
        grace, grace_note = grace_given(pod, terms)
        try:
            await self.api.request("POST", _path(pod) + "/eviction", body=_eviction(pod, grace))
        except ApiError as error:
            if error.status in (404, 409):  # gone, or replaced under the same name
                self.forget(uid)
                return Departure(Outcome.GONE)
            now = self.clock()
            since = self._blocked_since(uid)
            since = now if since is None else since
            self.refused[uid] = (since, now)
            if now - since < terms.budget_wait:
                return Departure(Outcome.REFUSED, refusal_text(error))
            return await self._delete(pod, (grace, grace_note), now - since)
        return self._left(pod, Departure(Outcome.EVICTED, grace_note))

    def _blocked_since(self, uid: str) -> float | None:
        """When the refusals of ``uid``'s eviction began, if they still go on.

        Refusals further apart than :data:`REFUSALS_APART` are not one blockage: a victim
        whose preemptor gave up, chosen again an hour later, is evicted first, not deleted.
        """
        times = self.refused.get(uid)
        if times is None or self.clock() - times[1] > REFUSALS_APART:
            return None
        return times[0]

    async def _delete(self, pod: PodRecord, grace: tuple[int, str], blocked: float) -> Departure:
        uid = pod.metadata.uid
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": grace[0],
            "preconditions": {"uid": uid},
        }
        try:
            await self.api.request("DELETE", _path(pod), body=body)
        except ApiError as error:
            if error.status in (404, 409):
                self.forget(uid)
                return Departure(Outcome.GONE)
            return Departure(Outcome.REFUSED, f"deleting past the budget wait failed: {error}")
        self.deleted += 1
        budgets = self.covering(pod)
        who = f"PodDisruptionBudget {', '.join(budgets)}" if budgets else "a PodDisruptionBudget"
        return self._left(
            pod,
            Departure(
                Outcome.DELETED,
                f"{who} blocked eviction for {blocked:.0f} s; deleted past the pool's "
                f"disruptionBudgetWait ({self.terms(pod).budget_wait:g} s), {grace[1]}",
            ),
        )

    def _left(self, pod: PodRecord, departure: Departure) -> Departure:
        """The pod left: forget its refusals, keep its work's place, say what becomes of it."""
        self.forget(pod.metadata.uid)
        if self.on_left is not None:
            self.on_left(pod)
        return Departure(departure.outcome, f"{departure.note}; {runs_again(pod)}")


def _path(pod: PodRecord) -> str:
    meta = pod.metadata
    return f"/api/v1/namespaces/{meta.namespace}/pods/{meta.name}"


def _eviction(pod: PodRecord, grace: int) -> dict[str, object]:
    """The policy/v1 Eviction of ``pod``: its uid as a precondition, the grace it is given."""
    meta = pod.metadata
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta.name, "namespace": meta.namespace},
        "deleteOptions": {"preconditions": {"uid": meta.uid}, "gracePeriodSeconds": grace},
    }
