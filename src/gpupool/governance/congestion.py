"""Who makes a pending pod wait: the attribution rules of the congestion-by-class view.

A :class:`~gpupool.scheduling.wait_cause.WaitCause` says what holds a pod and names the pods it
holds it for; this module turns that into *who pays*: a list of (culprit, fraction) whose
fractions add up to one. The culprit is a :class:`Party`, a workload class and queue (both come
from policy, so the set is bounded), never a pod: an operator asks "which class keeps the others
waiting", and a per-pod answer would give every pod its own series.

The rules, one per wait kind:

* ``reservation``: the class and queue of the pod that holds the backfill reservation the waiter
  would delay (the cause's first pod). The reservation is what keeps it out, whatever else runs.
* ``waiting_behind``: the pods it waits behind, in equal parts (an ordering wait names one head
  per blocked pool; each head holds it as much as the others).
* ``insufficient_resources``: capacity is full, so whoever holds the GPUs keeps it out. The
  rejection counts nodes per reason but names none, so the pods holding GPUs are charged in
  proportion to the GPU units each class and queue holds over the whole cluster (the driver's
  running pods; :func:`proportional`). A fragment (free GPUs spread too thin) is charged the
  same way: the holders of the GPUs around the holes made the fragments.
* ``quota``, ``preempting``, ``gang``, ``pool``, ``node_constraints``, ``never_fits``,
  ``invalid_request``: the waiter's own party, *self-imposed*. A queue at its ceiling or
  ``maxConcurrentPods`` is held by its own limit, not by the queues under theirs; a pod waiting
  for the victims it preempts chose to preempt (the victims' lost time is charged to it, see
  :func:`eviction_shares`); a gang, pool or constraint wait is the pod's own request. The cause
  names no borrower when a reclaim is refused, so charging borrowers would be a guess.
* ``other`` (a failed Binding, a scheduling error) and any pod the driver cannot name: nobody,
  *unattributed*, so the total still adds up.

Whether a share is imposed on others or self-imposed is decided by the caller comparing the
culprit with the waiter (:meth:`Share.imposed_on`): a training pod waiting behind another training
pod of its queue congests its own class, and that is shown apart, never as a cost another class
imposes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpupool.scheduling.wait_cause import WaitCause, WaitKind

PREEMPTION = "preemption"
"""The cause under which victims' lost run time is charged to the preemptor's party."""

CAUSES = (*(kind.value for kind in WaitKind), PREEMPTION)
"""Every cause a charge is filed under: a bounded label set."""

SELF_IMPOSED = frozenset(
    {
        WaitKind.QUOTA,
        WaitKind.PREEMPTING,
        WaitKind.GANG,
        WaitKind.POOL,
        WaitKind.NODE_CONSTRAINTS,
        WaitKind.NEVER_FITS,
        WaitKind.INVALID,
    }
)
"""The wait kinds held by the waiter's own request, queue limit or choice."""


@dataclass(frozen=True, slots=True, order=True)
class Party:
    """Who causes or suffers a wait: a workload class and a queue."""

    workload_class: str
    queue: str


@dataclass(frozen=True, slots=True)
class Share:
    """A fraction of a wait charged to ``culprit`` (``None``: nobody could be named)."""

    culprit: Party | None
    fraction: float

    def imposed_on(self, waiter: Party) -> bool:
        """Whether this share is a cost another party imposes on ``waiter``."""
        return self.culprit is not None and self.culprit != waiter


NOBODY = (Share(None, 1.0),)


def wait_shares(
    waiter: Party,
    cause: WaitCause,
    parties: Mapping[str, Party],
    capacity: tuple[Share, ...],
) -> tuple[Share, ...]:
    """Who keeps ``waiter`` waiting for ``cause``; the fractions add up to one.

    Args:
        waiter: The waiting pod's class and queue.
        cause: Why it waits.
        parties: The class and queue of each pod a cause may name (pending and running).
        capacity: Who a wait on capacity is charged to: :func:`proportional` of what each
            party holds, computed once per cycle (every such wait of the cycle shares it).
    """
    kind = cause.kind
    if kind in SELF_IMPOSED:
        return (Share(waiter, 1.0),)
    if kind is WaitKind.RESERVATION and cause.pods:
        return (Share(parties.get(cause.pods[0]), 1.0),)
    if kind is WaitKind.BEHIND and cause.pods:
        part = 1.0 / len(cause.pods)
        return tuple(Share(parties.get(pod), part) for pod in cause.pods)
    if kind is WaitKind.RESOURCES:
        return capacity
    return NOBODY


def proportional(holding: Mapping[Party, float]) -> tuple[Share, ...]:
    """Shares in proportion to what each party holds (nobody when nothing is held)."""
    total = sum(units for units in holding.values() if units > 0)
    if total <= 0:
        return NOBODY
    return tuple(
        Share(party, units / total) for party, units in sorted(holding.items()) if units > 0
    )


def eviction_shares(
    preemptor: Party, victims: Sequence[tuple[Party, float]]
) -> tuple[tuple[Party, Party, float], ...]:
    """(culprit, victim, seconds) for each victim's lost run time, charged to the preemptor.

    A victim goes back to pending having lost the time it ran: it finishes that much later, a
    wait the preemptor's class caused as surely as a reservation does.

    Raises:
        ValueError: A negative lost time (the message names the field).
    """
    for _, seconds in victims:
        if seconds < 0:
            raise ValueError(f"lost_seconds: must be >= 0, got {seconds}")
    return tuple((preemptor, victim, seconds) for victim, seconds in victims)
