"""When a pod's idleness started, and how long it may last: the idle rule's two questions.

The idle rule (:mod:`gpupool.governance.rules`) warns a pod whose share has been quiet for its
idle period. Both halves are judgement calls with a history of false reclaims (an inference
endpoint whose gaps between request bursts grew as it aged was reclaimed two minutes before its
requests came back), so they live here, apart from the rules' plumbing, with the reasoning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.governance.usage import UsageHistory

if TYPE_CHECKING:
    from gpupool.governance.rules import Limits


def idle_since(
    usage: UsageHistory, last_active: float | None = None, allocated_at: float | None = None
) -> float | None:
    """Since when a pod has been idle, or ``None`` if it is active now or nothing is known.

    The idle run is the quiet run still going on (:attr:`UsageHistory.quiet_since`). When no
    active sample is known (the controller restarted, history is short), the agent's
    ``last_active`` (the last time SM was above zero, hence the last time the pod could have
    been at or above any threshold > 0) may start the run earlier. A pod is never idle since
    before its allocation.
    """
    start = usage.quiet_since
    if start is None or usage.last is None:
        return None
    if not usage.active_seen and last_active is not None and usage.last.sm_percent == 0:
        start = min(start, last_active)
    if allocated_at is not None:
        start = max(start, allocated_at)
    return start


def idle_period(usage: UsageHistory, limits: Limits, quiet_age: float | None = None) -> float:
    """How long this pod may stay idle before it is warned: the pool's, or what it has shown.

    A pod that came back from a quiet phase of ``q`` seconds gets ``quiet_history_factor * q``,
    and at least ``quiet_age_fraction`` times ``quiet_age`` (how long it had held its share
    when its current quiet phase began; ``None``: unknown), at most ``quiet_history_cap`` times
    the pool's idle period: the same silence that was a checkpoint or a gap between requests
    last time is not taken for abandonment this time, nor is a longer one from a service whose
    gaps grew as it aged, and the cap bounds what a pod that once paused can hold idle. A pod
    that never resumed from a quiet phase gets the pool's period, however old it is: nothing
    says its silence is a pause.
    """
    base = limits.idle_period
    if usage.longest_quiet <= 0:
        return base
    learned = limits.quiet_history_factor * usage.longest_quiet
    if quiet_age is not None:
        learned = max(learned, limits.quiet_age_fraction * quiet_age)
    return max(base, min(learned, limits.quiet_history_cap * base))
