"""When a usage sample is too old to say anything: the one definition of "stale".

The node agent publishes each node's usage every publication period. If it stops (the agent
crashed, its node lost the API server, NVML hangs), its last sample stays on the Node for
ever; read as current, a pod that was idle at that moment would be reclaimed on the dead
agent's last word, and a pod that was busy would never be. A sample older than
:data:`STALE_AFTER_PERIODS` periods therefore counts as neither idle nor active: the idle rule
does not fire on it, and a warning already given is neither carried out nor cleared, until
fresh samples say which.

Pure: times are seconds from the caller (the controller's clock), periods are what the agent
says it publishes at.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpupool.governance.decisions import ClearWarning, Decision, Rule
from gpupool.governance.rules import CleanupLimits, Limits, PodFacts, decide
from gpupool.governance.usage import UsageHistory

STALE_AFTER_PERIODS = 3
"""Publication periods a sample may miss before it is stale (one late patch, a slow watch and
a sampling delay must not make a live agent look silent)."""
DEFAULT_PUBLICATION_PERIOD = 60.0
"""The agent's default ``usage_period``: assumed when a node does not say its own."""
LONGEST_PUBLICATION_PERIOD = 3600.0
"""A period beyond this is read as this: no node can make an hour-old sample count as fresh."""


def stale_after(period: float) -> float:
    """Seconds after which a sample published every ``period`` seconds is stale."""
    if not (math.isfinite(period) and period > 0):
        period = DEFAULT_PUBLICATION_PERIOD
    return STALE_AFTER_PERIODS * min(period, LONGEST_PUBLICATION_PERIOD)


def is_stale(sampled_at: float | None, period: float, now: float) -> bool:
    """Whether a sample taken at ``sampled_at`` (None: none yet) is too old to count."""
    return sampled_at is not None and now - sampled_at > stale_after(period)


def usage_is_stale(usage: UsageHistory, period: float, now: float) -> bool:
    """Whether a pod's newest sample is too old to count (no sample yet: not stale)."""
    return is_stale(usage.last.time if usage.last is not None else None, period, now)


def decide_on_fresh_usage(
    pod: PodFacts, limits: Limits, cleanup: CleanupLimits, now: float, period: float
) -> Decision | None:
    """:func:`~gpupool.governance.rules.decide`, with stale usage counting as neither.

    Cleanup and share-duration rules do not read usage and apply as ever; on stale usage the
    idle rule sees no samples (so it cannot fire), and the clearing of an idle warning, which
    would mean "active again", is held back.
    """
    if not usage_is_stale(pod.usage, period, now):
        return decide(pod, limits, cleanup, now)
    decision = decide(replace(pod, usage=UsageHistory(), last_active=None), limits, cleanup, now)
    if isinstance(decision, ClearWarning) and decision.rule is Rule.IDLE:
        return None
    return decision
