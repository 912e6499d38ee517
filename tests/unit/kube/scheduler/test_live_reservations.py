"""Backfill reservations in the live scheduler hold across cycles, as the engine's do in the sim.

The live scheduler parks a pod nothing fits and tries it again only when capacity changes, so
a pod arriving later is often decided in a cycle of its own. These tests put the two in
separate cycles, as the control plane on the dev cluster did when the large pod lost its node.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from gpupool.kube.client.informer import ADDED
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.scheduler.config import LiveConfig
from gpupool.kube.scheduler.live import LiveScheduler, _holders

from ..builders import annotated, node, pod
from ..live_recorder import Recorder, live_scheduler, reasons_of, reports_of, settle


def _uid(name: str) -> str:
    """A UID as the API server writes them (the reason names the pod, not this)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def _now() -> str:
    return datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _running(name: str, at: str, gpus: tuple[int, ...], runtime: str) -> PodRecord:
    return pod(
        name,
        uid=_uid(name),
        gpus=len(gpus),
        node=at,
        phase="Running",
        created=_now(),
        annotations={
            **annotated(at, gpus, uid=_uid(name)),
            "gpupool.io/expected-runtime": runtime,
        },
    )


def _pending(name: str, gpus: int, runtime: str, **fields: Any) -> PodRecord:
    fields.setdefault("created", _now())
    return pod(
        name,
        uid=_uid(name),
        gpus=gpus,
        **fields,
        annotations={"gpupool.io/expected-runtime": runtime},
    )


async def _cluster(backfill: str) -> tuple[Recorder, LiveScheduler]:
    """n0 full for an hour; n1 with 3 of 4 GPUs busy for two minutes; a 4-GPU pod waits."""
    recorder = Recorder()
    scheduler = live_scheduler(recorder, LiveConfig(identity="test", backfill=backfill))
    for name in ("n0", "n1"):
        scheduler._on_node(ADDED, node(name, gpus=4))
    scheduler._on_pod(ADDED, _running("long", "n0", (0, 1, 2, 3), "3600"))
    scheduler._on_pod(ADDED, _running("short", "n1", (0, 1, 2), "120"))
    scheduler._on_pod(ADDED, _pending("big", 4, "600"))
    await scheduler.cycle()
    await settle(scheduler)
    return recorder, scheduler


async def test_a_long_pod_arriving_alone_is_kept_off_the_node_a_large_pod_waits_for() -> None:
    recorder, scheduler = await _cluster("large-pods")
    scheduler._on_pod(ADDED, _pending("small", 1, "9000"))
    await scheduler.cycle()
    await settle(scheduler)

    assert recorder.posted("/binding") == []
    reason = reasons_of(reports_of(scheduler))["small"]
    assert reason.startswith("backfill: would delay default/big, reserved on node n1 from 20")


async def test_a_short_pod_arriving_alone_still_backfills() -> None:
    recorder, scheduler = await _cluster("large-pods")
    scheduler._on_pod(ADDED, _pending("quick", 1, "60"))
    await scheduler.cycle()
    await settle(scheduler)

    ((path, _),) = recorder.posted("/binding")
    assert path.endswith("/pods/quick/binding")


@pytest.mark.parametrize("backfill", ["strict", "large-pods"])
async def test_pods_deferred_behind_a_holder_do_not_keep_the_scheduler_busy(backfill: str) -> None:
    """The holder is tried in every cycle; a pod behind it must not be retried in a loop."""
    _, scheduler = await _cluster(backfill)
    scheduler._on_pod(ADDED, _pending("behind", 4, "600"))  # same shape: no room this cycle
    before = scheduler.stats.cycles
    for _ in range(5):
        await scheduler.cycle()
        if not scheduler.wake.is_set():
            break
        scheduler.wake.clear()
    assert not scheduler.wake.is_set()
    assert scheduler.stats.cycles - before <= 3


def _created(offset: float) -> str:
    return datetime.fromtimestamp(time.time() - 60 + offset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_a_large_pod_blocked_after_its_pools_sweep_is_protected_in_a_later_cycle() -> None:
    """big1 blocks, quick is tried behind it (the sweep), big2 blocks after: big2 holds nothing.

    n2 has two GPUs free for five minutes, then four, the earliest node for big2 once big1
    holds n1. Parked, big2 was in no later sweep, so a long pod arriving alone took n2.
    """
    recorder = Recorder()
    scheduler = live_scheduler(recorder, LiveConfig(identity="test"))
    for name in ("n0", "n1", "n2"):
        scheduler._on_node(ADDED, node(name, gpus=4))
    scheduler._on_pod(ADDED, _running("long", "n0", (0, 1, 2, 3), "3600"))
    scheduler._on_pod(ADDED, _running("short", "n1", (0, 1, 2), "120"))
    scheduler._on_pod(ADDED, _running("mid", "n2", (0, 1), "300"))
    # big2 asks less CPU than big1, so it is tried (and rejected, so parked) rather than
    # skipped as no smaller than a pod that failed this cycle (skipped pods are retried)
    for offset, (name, gpus, runtime, cpu) in enumerate(
        (("big1", 4, "600", "2"), ("quick", 1, "30", "1"), ("big2", 4, "600", "1"))
    ):
        scheduler._on_pod(ADDED, _pending(name, gpus, runtime, cpu=cpu, created=_created(offset)))
    await scheduler.cycle()
    await settle(scheduler)
    ((path, _),) = recorder.posted("/binding")
    assert path.endswith("/pods/quick/binding")

    scheduler._on_pod(ADDED, _pending("small", 1, "9000"))
    await scheduler.cycle()
    await settle(scheduler)

    assert len(recorder.posted("/binding")) == 1
    reason = reasons_of(reports_of(scheduler))["small"]
    assert reason.startswith("backfill: would delay default/big2, reserved on node n2 from 20")


async def test_no_pod_behind_a_holder_waits_without_a_reason() -> None:
    """big holds n1 and is tried in every cycle; pods decided beside it are each told why at once.

    ``wider`` asks no less than big, so it is skipped for big's size: it was deferred (big
    fails in every cycle) and given no condition. ``huge`` asks more CPU than any node has: it
    says it can never fit, and holds no reservation in any later cycle.
    """
    _, scheduler = await _cluster("large-pods")
    scheduler._on_pod(ADDED, _pending("wider", 4, "600", cpu="2", created=_created(120)))
    scheduler._on_pod(ADDED, _pending("huge", 4, "600", cpu="500", created=_created(120)))
    await scheduler.cycle()
    await settle(scheduler)

    reasons = reasons_of(reports_of(scheduler))
    assert reasons["wider"].endswith("(found for default/big, which asks no more).")
    assert reasons["huge"].startswith("0/2 nodes are available: 2 Insufficient cpu")
    assert reasons["huge"].endswith("(no node could ever hold it).")
    for _ in range(2):
        await scheduler.cycle()
        await settle(scheduler)
        assert _uid("huge") not in _holders(scheduler._reservations) | scheduler._awaiting


async def test_the_live_ledger_charges_a_parked_reservation_wait_to_the_holders_class() -> None:
    """small (dev) is kept off n1 by big's (training) reservation, then parked: a later cycle
    that does not try it must leave it charged to training until it is decided again."""
    recorder = Recorder()
    scheduler = live_scheduler(recorder, LiveConfig(identity="test"))
    for name in ("n0", "n1"):
        scheduler._on_node(ADDED, node(name, gpus=4))
    scheduler._on_pod(ADDED, _running("long", "n0", (0, 1, 2, 3), "3600"))
    scheduler._on_pod(ADDED, _running("short", "n1", (0, 1, 2), "120"))
    for name, gpus, runtime, workload_class in (
        ("big", 4, "600", "training"),
        ("small", 1, "9000", "dev"),
        ("later", 1, "9000", "dev"),
    ):
        labels = {"gpupool.io/class": workload_class}
        scheduler._on_pod(ADDED, _pending(name, gpus, runtime, labels=labels))
        await scheduler.cycle()
        await settle(scheduler)
    ledger = scheduler.applier.congestion.ledger
    ledger.settle(time.time() + 60)
    imposed = ledger.totals.imposed
    by_class = {(party.workload_class, cause): s for (party, cause), s in imposed.items()}
    assert by_class[("training", "reservation")] >= 2 * 60  # small and later, a minute each
    assert not [key for key in by_class if key[0] == "dev"]
