"""``/api/v1/congestion``: the pending time each class and queue imposes on the others.

The numbers are the congestion ledger's (:mod:`gpupool.governance.congestion_ledger`), kept by
whoever runs the engine: the live scheduler's applier, or the demo's simulated cluster. A
:data:`CongestionSource` hands over the ledger's JSON with bucket starts as Unix seconds (the
demo's clock counts from its session's epoch), so the dashboard plots both on the same axis.
The live source is read in the scheduler's loop (the one thread that feeds the ledger), the
demo's under its session's lock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from gpupool.governance.congestion_ledger import CongestionLedger

CongestionSource = Callable[[], dict[str, Any]]
"""The ledger's JSON (:meth:`~.CongestionLedger.as_json`), bucket starts in Unix seconds."""

Guard = Callable[[Request, str], Awaitable[None]]
"""Refuses a reader who may not see a cluster-wide view (raises a 403)."""


class ClassCongestion(BaseModel):
    """One class and queue: the waits it caused others, its own, its idle GPUs."""

    workload_class: str = Field(description="gpupool.io/class of the pods ('(none)': no class)")
    queue: str = Field(description="The queue the pods are charged to")
    imposed_seconds: float = Field(
        description="Seconds other classes' or queues' pods waited because of this one"
    )
    imposed_by_cause: dict[str, float] = Field(
        description="imposed_seconds by cause: a wait kind (reservation, waiting_behind, "
        "insufficient_resources) or preemption (the victims' lost run time)"
    )
    self_imposed_seconds: float = Field(
        description="Seconds its own pods waited on itself: its quota ceiling, its own "
        "reservations, its own requests"
    )
    idle_gpu_hours: float = Field(
        description="GPU-hours its pods held without using them (where usage is known)"
    )
    contention_share: float | None = Field(
        None,
        description="Of the shares on contended GPUs, the fraction that are its class's; null: "
        "no contention source",
    )


class CongestionPoint(BaseModel):
    """One bucket of the series."""

    start: float = Field(description="Start of the bucket, Unix seconds")
    imposed_seconds: dict[str, float] = Field(
        description="Seconds imposed on others in the bucket, per causing class"
    )
    idle_gpu_hours: dict[str, float] = Field(description="Idle GPU-hours in the bucket, per class")
    pending_seconds: float = Field(description="Every pending second charged in the bucket")


class Congestion(BaseModel):
    """Congestion by class: totals since the scheduler started counting, and over time."""

    bucket_seconds: float
    pending_seconds: float = Field(description="Every pending second charged")
    unattributed_seconds: dict[str, float] = Field(
        description="Pending seconds no class could be named for, by cause"
    )
    classes: list[ClassCongestion] = Field(description="Most imposed first")
    series: list[CongestionPoint] = Field(description="Oldest first")


def congestion_routes(source: CongestionSource | None, guard: Guard) -> APIRouter:
    """``/api/v1/congestion`` (cluster-wide); an empty answer where nothing feeds a ledger."""
    router = APIRouter()

    @router.get("/api/v1/congestion", tags=["governance"])
    async def get_congestion(request: Request) -> Congestion:
        """Pending time each class and queue imposes on the others, idle GPU-hours, over time."""
        await guard(request, "/api/v1/congestion")
        body = source() if source is not None else CongestionLedger().as_json()
        return Congestion.model_validate(body)

    return router
