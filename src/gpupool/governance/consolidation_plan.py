"""What consolidation decides, as data: a plan of moves, or why none, and the moves made.

The rule (:mod:`gpupool.governance.consolidation`) returns these and does nothing else; the
simulator and the live controller carry them out, audit them and show them. Split from the rule
so that the drivers and the face read the plan without the search.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpupool.policy.spec import ConsolidationMode

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Move:
    """One pod moved: from where, to where the what-if found it room, and what it loses."""

    pod: str
    workload_key: str
    source: int
    target: int
    gpus: float
    loss_gpu_seconds: float


@dataclass(frozen=True, slots=True)
class Plan:
    """Moves after which a waiting pod fits on ``node``, with the model's gain and loss.

    Attributes:
        pod: The waiting pod.
        pool: Its pool.
        node: Node row it is nominated to.
        moves: The pods to move.
        waited: Seconds it had waited.
        expected_start: When it would start without moves (seconds, the cycle's clock).
        gain_gpu_seconds: Its GPUs times how much sooner it starts.
        loss_gpu_seconds: The moved pods' GPUs times their restart cost.
        mode: The pool's mode: a ReportOnly plan is shown, not carried out.
    """

    pod: str
    pool: int
    node: int
    moves: tuple[Move, ...]
    waited: float
    expected_start: float
    gain_gpu_seconds: float
    loss_gpu_seconds: float
    mode: ConsolidationMode = ConsolidationMode.ON

    @property
    def pays(self) -> bool:
        """Whether the waiting pod gains more GPU time than the moves lose."""
        return self.gain_gpu_seconds > self.loss_gpu_seconds

    def values(self, node_names: Sequence[str]) -> dict[str, float | int | str]:
        """The what-if as the audit and Events record it."""
        return {
            "node": node_names[self.node],
            "moves": len(self.moves),
            "moved": ", ".join(
                f"{m.pod} {node_names[m.source]}->{node_names[m.target]}" for m in self.moves
            ),
            "waited_s": round(self.waited),
            "gain_gpu_hours": round(self.gain_gpu_seconds / HOUR, 3),
            "loss_gpu_hours": round(self.loss_gpu_seconds / HOUR, 3),
            "mode": self.mode.value,
        }


@dataclass(frozen=True, slots=True)
class Declined:
    """A waiting pod for which no plan is made, and why (``plan``: one that did not pay)."""

    pod: str
    pool: int
    why: str
    plan: Plan | None = None


Outcome = Plan | Declined


RETRY_AFTER = 600.0
"""Seconds a waiting pod no moves could help is left out of the searches. Oldest first, a few a
pass: without a rest the same oldest pods, those no move can serve, would be searched every pass
and the younger ones moves could serve never."""


@dataclass
class MoveHistory:
    """The moves made in the last hour (the caps count them), and what the searches left."""

    _moves: deque[tuple[float, int, str]] = field(default_factory=deque)
    last_search: float = -math.inf
    """When moves were last searched for (``SEARCH_INTERVAL`` apart at least)."""
    _resting: dict[str, float] = field(default_factory=dict)
    """Waiting pod to when it may be searched for again (:data:`RETRY_AFTER`)."""

    def resting(self, pod: str, now: float) -> bool:
        """Whether a search declined ``pod`` less than :data:`RETRY_AFTER` ago."""
        return self._resting.get(pod, -math.inf) > now

    def searched(self, outcomes: Sequence[Outcome], now: float) -> None:
        """A search ran now: the pods it declined rest (those it planned for need no rest)."""
        self.last_search = now
        self._resting = {pod: until for pod, until in self._resting.items() if until > now}
        for outcome in outcomes:
            if isinstance(outcome, Declined):
                self._resting[outcome.pod] = now + RETRY_AFTER

    def _trim(self, now: float) -> None:
        while self._moves and self._moves[0][0] <= now - HOUR:
            self._moves.popleft()

    def in_pool(self, pool: int, now: float) -> int:
        """Pods the pool moved in the last hour."""
        self._trim(now)
        return sum(1 for _, p, _ in self._moves if p == pool)

    def of_workload(self, key: str, now: float) -> int:
        """Times the workload was moved in the last hour."""
        self._trim(now)
        return sum(1 for _, _, k in self._moves if k == key)

    def record(self, plan: Plan, now: float) -> None:
        """A plan was carried out now."""
        self._moves.extend((now, plan.pool, move.workload_key) for move in plan.moves)
