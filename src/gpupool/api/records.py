"""Governance actions, audit and cost: where the API reads them, and what it says without a store.

The store (:mod:`gpupool.store`) keeps these; until a control plane is given one, the API answers
with an empty list and ``configured: false`` with a note saying so, never with invented rows, so
a client can tell "nothing happened" from "nothing is recorded".
"""

from __future__ import annotations

from typing import Protocol

from gpupool.api.model import Cost, CostLine, Record, Records

NO_STORE = "no store configured: governance actions, audit and cost are not recorded"


class RecordSource(Protocol):
    """Reads what the store keeps."""

    def actions(self, limit: int) -> list[Record]:
        """The latest governance actions (reclaims, preemptions), newest first."""
        ...

    def audit(self, limit: int) -> list[Record]:
        """The latest audit entries, newest first."""
        ...

    def cost(self) -> list[CostLine]:
        """GPU-hours per team."""
        ...


def actions(source: RecordSource | None, limit: int) -> Records:
    """Governance actions, or the note that there is no store."""
    if source is None:
        return Records(configured=False, note=NO_STORE, items=[])
    return Records(configured=True, note="", items=source.actions(limit))


def audit(source: RecordSource | None, limit: int) -> Records:
    """Audit entries, or the note that there is no store."""
    if source is None:
        return Records(configured=False, note=NO_STORE, items=[])
    return Records(configured=True, note="", items=source.audit(limit))


def cost(source: RecordSource | None) -> Cost:
    """GPU-hours per team, or the note that there is no store."""
    if source is None:
        return Cost(configured=False, note=NO_STORE, teams=[])
    return Cost(configured=True, note="", teams=source.cost())
