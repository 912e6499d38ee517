"""The governance rules applied to simulated pods, with each pod's warning remembered.

The live controller keeps a pod's warning on the pod (an annotation), so that the grace period
runs from the warning and a pod that recovers is cleared. Both simulations (the demo's embedded
cluster and the dynamic simulation's governance model) keep it here instead, so that the same
pure :func:`~gpupool.governance.rules.decide` sees the same history in the simulator as live.
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.governance.decisions import ClearWarning, Decision, Warn
from gpupool.governance.rules import CleanupLimits, Limits, PodFacts, PodWarning, decide


class WarnedPods:
    """The warnings given to simulated pods, by pod name.

    Args:
        cleanup: The cleanup rules' settings (their defaults: simulated pods run normally).
    """

    def __init__(self, cleanup: CleanupLimits | None = None) -> None:
        self.cleanup = cleanup or CleanupLimits()
        self._given: dict[str, PodWarning] = {}

    def review(self, facts: PodFacts, limits: Limits, now: float) -> Decision | None:
        """What the rules decide for the pod now, with the warning it was given before.

        A new warning is kept (the grace runs from now); a cleared one is dropped.
        """
        warned = replace(facts, warning=self._given.get(facts.uid))
        decision = decide(warned, limits, self.cleanup, now)
        if isinstance(decision, Warn):
            self._given[facts.uid] = PodWarning(decision.rule, now)
        elif isinstance(decision, ClearWarning):
            self._given.pop(facts.uid, None)
        return decision

    def forget(self, name: str) -> None:
        """The pod let go of its GPUs: its warning goes with its allocation."""
        self._given.pop(name, None)
