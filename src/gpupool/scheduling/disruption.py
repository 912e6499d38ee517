"""PodDisruptionBudgets as the victim search sees them: which victims a preemption would break.

A budget is best effort for preemption, as in kube-scheduler: a victim set that breaks fewer
budgets is preferred, and a preemption that can only be had by breaking one still happens (the
evictions wait a bounded time for the budget, then delete; see
:mod:`gpupool.kube.scheduler.evictions`). Otherwise a tenant's ``maxUnavailable: 0`` would beat
every guarantee.

Victims are counted the way kube-scheduler's preemption counts "PDB violations": walking the
victims in order, each takes one disruption from every budget that covers it; a victim that
takes a budget below zero violates it. The live side says which budgets cover which running pod
(a budget covers the pods of its namespace its selector matches) and how many disruptions each
allows now (``status.disruptionsAllowed``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DisruptionBudgets:
    """The budgets that cover running pods, and how many disruptions each allows now.

    Attributes:
        allowed: Budget key (``namespace/name``) to the disruptions it allows now.
        covering: Running pod name to the keys of the budgets that cover it (pods no budget
            covers are absent).
    """

    allowed: Mapping[str, int] = field(default_factory=dict)
    covering: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def violating(self, victims: Iterable[str]) -> tuple[str, ...]:
        """The victims, in order, whose eviction takes a budget below zero."""
        if not self.covering:
            return ()
        taken: Counter[str] = Counter()
        found = []
        for victim in victims:
            breaks = False
            for budget in self.covering.get(victim, ()):
                taken[budget] += 1
                breaks |= taken[budget] > self.allowed.get(budget, 0)
            if breaks:
                found.append(victim)
        return tuple(found)

    def after(self, victims: Iterable[str]) -> DisruptionBudgets:
        """The budgets once ``victims`` are evicted (each takes one from its budgets).

        One cycle may choose several victim sets; the second must not count on a disruption
        the first already took.
        """
        taken = Counter(b for victim in victims for b in self.covering.get(victim, ()))
        if not taken:
            return self
        keys = self.allowed.keys() | taken.keys()
        allowed = {key: self.allowed.get(key, 0) - taken[key] for key in keys}
        return DisruptionBudgets(allowed, self.covering)


NO_BUDGETS = DisruptionBudgets()
"""No budget covers any pod (the simulator; a cluster without PodDisruptionBudgets)."""
