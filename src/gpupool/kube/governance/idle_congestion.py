"""Idle GPU-hours per class and queue for the congestion view, from governance's idle pods.

Each governance pass finds the pods idle now (every usage sample under their pool's threshold
since a moment it names, :func:`~gpupool.governance.idleness.idle_since`). This charges, for
each, the GPUs it holds over the time since the previous pass (or since it went idle, if later)
to its class and queue in the scheduler's congestion ledger, so that the live dashboard, API and
report show what each class held idle, as the demo's simulated usage does. A pod counts only
while its pool has an idle threshold (the rule that says what idle means there).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.governance.congestion_feed import party
from gpupool.kube.scheduler.governance_port import GovernancePort, GovernanceReading
from gpupool.policy.units import MILLI_UNITS


class IdleCharges:
    """Charges idle pods' GPUs to their class between governance passes.

    Args:
        port: Governance's door into the replica's scheduler (its congestion ledger).
    """

    def __init__(self, port: GovernancePort) -> None:
        self.port = port
        self._last: float | None = None

    def charge(
        self, idle: Mapping[tuple[str, str], float], reading: GovernanceReading, now: float
    ) -> None:
        """``idle``: (namespace, name) of each pod idle now, to how long it has been idle."""
        last, self._last = self._last, now
        policy = reading.policy
        if last is None or not idle or policy is None:
            return
        ledger = self.port.congestion
        for uid, pod in reading.pods.items():
            seconds = idle.get((pod.metadata.namespace, pod.metadata.name))
            running = reading.running.get(uid) if seconds is not None else None
            if seconds is None or running is None:
                continue
            who = party(policy, running.workload, running.queue)
            ledger.idle(who, running.units / MILLI_UNITS, max(last, now - seconds), now)
