"""Governance actions, audit and cost: where the API reads them, and what it says without a store.

The store (:mod:`gpupool.store`, read by :mod:`gpupool.api.store_records`) keeps these; until a
control plane is given one, the API answers with an empty list and ``configured: false`` with a
note saying so, never with invented rows, so a client can tell "nothing happened" from "nothing
is recorded".

Every read takes the namespaces the reader may see (``None``: all, cluster-scoped objects
included), so a tenant's answer is filtered where the records are, not after a limit was
applied to everyone's.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from gpupool.api.model import Cost, CostBucket, CostLine, Record, Records

NO_STORE = "no store configured: governance actions, audit and cost are not recorded"

Namespaces = Collection[str] | None
"""Namespaces to show; ``None``: every record, cluster-scoped ones included."""


class RecordSource(Protocol):
    """Reads what the store keeps."""

    async def namespaces(self) -> set[str]:
        """The namespaces the records mention ("" for cluster-scoped objects)."""
        ...

    async def actions(self, limit: int, namespaces: Namespaces) -> list[Record]:
        """The latest governance actions (reclaims, preemptions), newest first."""
        ...

    async def audit(self, limit: int, namespaces: Namespaces) -> list[Record]:
        """The latest audit entries, newest first."""
        ...

    async def cost(self, namespaces: Namespaces) -> tuple[list[CostLine], list[CostBucket]]:
        """GPU-hours per team, and the same hours over time (oldest bucket first)."""
        ...


async def actions(source: RecordSource | None, limit: int, namespaces: Namespaces) -> Records:
    """Governance actions, or the note that there is no store."""
    if source is None:
        return Records(configured=False, note=NO_STORE, items=[])
    return Records(configured=True, note="", items=await source.actions(limit, namespaces))


async def audit(source: RecordSource | None, limit: int, namespaces: Namespaces) -> Records:
    """Audit entries, or the note that there is no store."""
    if source is None:
        return Records(configured=False, note=NO_STORE, items=[])
    return Records(configured=True, note="", items=await source.audit(limit, namespaces))


async def cost(source: RecordSource | None, namespaces: Namespaces) -> Cost:
    """GPU-hours per team, or the note that there is no store."""
    if source is None:
        return Cost(configured=False, note=NO_STORE, teams=[])
    teams, buckets = await source.cost(namespaces)
    return Cost(configured=True, note="", teams=teams, buckets=buckets)


async def recorded_namespaces(source: RecordSource | None) -> set[str]:
    """The namespaces a source mentions (none without a store)."""
    return await source.namespaces() if source is not None else set()
