"""What a governance rule decides, as data: warn, reclaim, clean up, release, clear a warning.

The rules (:mod:`gpupool.governance.rules`) return these and do nothing else; the live
controller (:mod:`gpupool.kube.governance.controller`) and the simulator carry them out. Keeping
decisions as plain values is what lets one set of rules run against a real cluster and a simulated
one, and lets every action name the rule that fired and the values it fired on (the audit log and
the Events show exactly those).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class Rule(enum.StrEnum):
    """Which governance rule fired."""

    IDLE = "idle"
    MAX_SHARE_DURATION = "max-share-duration"
    DECLARED_RUNTIME = "declared-runtime"
    CRASH_LOOP = "crash-loop"
    NOT_RUNNING = "not-running"
    NODE_NOT_READY = "node-not-ready"
    PHANTOM = "phantom"


RECLAIM_RULES = (Rule.IDLE, Rule.MAX_SHARE_DURATION, Rule.DECLARED_RUNTIME)
"""Rules that warn first and reclaim after the grace period."""
CLEANUP_RULES = (Rule.CRASH_LOOP, Rule.NOT_RUNNING, Rule.NODE_NOT_READY)
"""Rules that clean up an abnormal pod at once (it does no useful work)."""


@dataclass(frozen=True, slots=True)
class Action:
    """One decision about one pod.

    Attributes:
        pod_uid: The pod.
        rule: The rule that fired.
        values: The deciding values (seconds idle, threshold, restarts, ...), JSON-ready.
    """

    pod_uid: str
    rule: Rule
    values: Mapping[str, float | int | str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """The rule and its values in words, for Events and logs."""
        shown = ", ".join(f"{key}={_shown(value)}" for key, value in sorted(self.values.items()))
        return f"rule {self.rule.value}: {shown}"


def _shown(value: float | int | str) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True, slots=True)
class Warn(Action):
    """The pod will be reclaimed after the grace period unless the rule stops firing."""


@dataclass(frozen=True, slots=True)
class Reclaim(Action):
    """Evict the pod: it was warned and the rule still fires after the grace period."""


@dataclass(frozen=True, slots=True)
class Cleanup(Action):
    """Evict an abnormal pod (crash loop, stuck before running, on a node gone NotReady)."""


@dataclass(frozen=True, slots=True)
class Release(Action):
    """Release a phantom allocation: the pod is gone, finished or bound elsewhere."""


@dataclass(frozen=True, slots=True)
class ClearWarning(Action):
    """The rule no longer fires (the pod became active again): drop its warning."""


Decision = Warn | Reclaim | Cleanup | Release | ClearWarning
