"""How the governance controller runs: its pass interval, cleanup limits and phantom checks.

Split from :mod:`gpupool.kube.governance.controller` so the process that starts it (the control
plane's options) builds its settings without the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.governance.rules import CleanupLimits


@dataclass(frozen=True, slots=True)
class GovernanceConfig:
    """How the controller runs.

    Attributes:
        interval: Seconds between passes.
        cleanup: When a pod counts as abnormal.
        phantom_interval: Least seconds between two phantom checks (each LISTs every pod, so
            on a large cluster it runs less often than the passes; 0: every pass).
    """

    interval: float = 5.0
    cleanup: CleanupLimits = field(default_factory=CleanupLimits)
    phantom_interval: float = 30.0

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"interval: must be > 0, got {self.interval}")
        if not self.phantom_interval >= 0:
            raise ValueError(f"phantom_interval: must be >= 0, got {self.phantom_interval}")
