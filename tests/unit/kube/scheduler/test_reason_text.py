"""Pending reasons name pods as users know them and date reservations as instants.

The engine names pods by UID and dates reservations in the cycle's clock (Unix time live); the
cause carries both as fields, so the sentence is written with keys and UTC instants, not
searched for UIDs afterwards.
"""

from __future__ import annotations

from gpupool.core.decisions import Reject
from gpupool.core.model import PodSpec
from gpupool.kube.scheduler.reason_text import readable
from gpupool.scheduling.wait_cause import WaitCause, WaitKind, rejected, waiting_behind

from ..builders import pod

BIG = "ffb7cc7f-20ea-421c-92be-36468bf45292"
GONE = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
PODS = {BIG: pod("big", uid=BIG, namespace="team-a")}


def test_a_backfill_reason_names_the_pod_and_the_time() -> None:
    cause = WaitCause(WaitKind.RESERVATION, pods=(BIG,), node="n1", at=1796284886.0)
    assert readable(cause, PODS) == (
        "backfill: would delay team-a/big, reserved on node n1 from 2026-12-03T08:01:26Z"
    )


def test_an_ordering_wait_names_each_head_and_leaves_a_pod_that_is_gone_by_uid() -> None:
    cause = waiting_behind((BIG, "a100"), (GONE, "default"), why="strict order")
    assert readable(cause, PODS) == (
        f"waiting behind team-a/big in pool a100, {GONE} in pool default (strict order)"
    )


def test_a_shared_rejection_names_the_pod_it_was_found_for() -> None:
    reject = Reject(
        PodSpec("p", 1000, 1024, gpu_count=4, gpu_milli=1000),
        "0/2 nodes are available: 2 Insufficient gpupool.io/gpu.",
        (("Insufficient gpupool.io/gpu", 2),),
    )
    assert readable(rejected(reject, like=BIG), PODS) == (
        "0/2 nodes are available: 2 Insufficient gpupool.io/gpu "
        "(found for team-a/big, which asks no more)."
    )
