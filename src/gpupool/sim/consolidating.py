"""Consolidation in the simulated cluster: the rule after each cycle, its moves, what they cost.

The same pure rule the live controller runs (:func:`~gpupool.governance.consolidation.consolidate`,
with its inputs built by :func:`~gpupool.governance.consolidation_inputs.inputs_after`), run
after every cycle that preempted nothing. A plan of a pool in ``Enabled`` mode is carried out as
the live controller does: each moved pod leaves its node and is pending again (it resumes from
its checkpoint, so it runs what it had left plus its class's restart cost), and the waiting pod
is nominated to the node the moves empty. Every simulated pod counts as one a controller
creates again (the workload process stands for its controller), under its own name as the
workload key; the rule itself keeps gang pods and claims where they are.

What is measured, over the metric window: plans carried out, pods moved and moves per hour, the
GPU-hours the moves cost by the model and the GPU-hours the plans gained by it, report-only plans,
and the plans declined by reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from gpupool.governance.consolidation import consolidate
from gpupool.governance.consolidation_inputs import inputs_after, pool_settings
from gpupool.governance.consolidation_plan import Declined, MoveHistory, Plan
from gpupool.policy.spec import ConsolidationMode, ConsolidationSpec
from gpupool.scheduling.decisions import CycleRequest, CycleResult
from gpupool.sim.cluster import SimulatedCluster

HOUR = 3600.0


class Consolidating:
    """One simulated cluster's consolidation: its move history and its counters.

    Args:
        cluster: The cluster it moves pods in.
        window: The metric window (start, end) in seconds.
        settings: Every pool's settings (``None``: each pool's own ``spec.consolidation``).
    """

    def __init__(
        self,
        cluster: SimulatedCluster,
        window: tuple[float, float],
        settings: ConsolidationSpec | None = None,
    ) -> None:
        self.cluster = cluster
        self.window = window
        pools = pool_settings(cluster.engine)
        self.settings = pools if settings is None else [settings] * len(pools)
        self.enabled = any(s.mode is not ConsolidationMode.OFF for s in self.settings)
        self.history = MoveHistory()
        self.plans = 0
        self.moved = 0
        self.reported = 0
        self.loss_gpu_seconds = 0.0
        self.gain_gpu_seconds = 0.0
        self.least_margin: float | None = None
        """The smallest gain less loss of a plan carried out (the rule makes none below 0)."""
        self.declined: Counter[str] = Counter()

    def after(self, request: CycleRequest, result: CycleResult) -> bool:
        """Plan after a cycle and carry out what pays; whether a pod was moved."""
        if not self.enabled:
            return False
        cluster = self.cluster
        owners = {name: name for name in cluster.running}
        inputs = inputs_after(cluster.engine, request, result, owners, self.settings)
        outcomes = consolidate(inputs, self.history) if inputs.stuck else None
        moved = False
        for outcome in outcomes or ():
            counted = self.window[0] <= cluster.now <= self.window[1]
            if isinstance(outcome, Declined):
                self.declined[outcome.why] += counted
            elif outcome.mode is ConsolidationMode.REPORT_ONLY:
                self.reported += counted
            else:
                self._carry_out(outcome, counted)
                moved = True
        return moved

    def _carry_out(self, plan: Plan, counted: bool) -> None:
        cluster = self.cluster
        for move in plan.moves:
            restart = move.loss_gpu_seconds / move.gpus if move.gpus else 0.0
            cluster.move(move.pod, restart, plan.pod)
        cluster.nominate(plan.pod, plan.node)
        self.history.record(plan, cluster.now)
        if counted:
            self.plans += 1
            self.moved += len(plan.moves)
            self.loss_gpu_seconds += plan.loss_gpu_seconds
            self.gain_gpu_seconds += plan.gain_gpu_seconds
            margin = plan.gain_gpu_seconds - plan.loss_gpu_seconds
            self.least_margin = (
                margin if self.least_margin is None else min(self.least_margin, margin)
            )

    def report(self) -> dict[str, Any]:
        """The counters, under the report's ``consolidation`` key."""
        hours = (self.window[1] - self.window[0]) / HOUR
        modes = sorted({s.mode.value for s in self.settings})
        return {
            "mode": modes[0] if len(modes) == 1 else modes,
            "plans": self.plans,
            "moves": self.moved,
            "moves_per_hour": self.moved / hours if hours else 0.0,
            "gpu_hours_lost_to_moves": self.loss_gpu_seconds / HOUR,
            "gpu_hours_gained_by_model": self.gain_gpu_seconds / HOUR,
            "least_plan_margin_gpu_hours": (
                None if self.least_margin is None else self.least_margin / HOUR
            ),
            "report_only_plans": self.reported,
            "declined": dict(sorted(self.declined.items())),
        }


def every_pool(mode: ConsolidationMode, **changes: Any) -> ConsolidationSpec:
    """The settings ``sim dynamic --consolidation`` gives every pool."""
    return replace(ConsolidationSpec(mode=mode), **changes)
