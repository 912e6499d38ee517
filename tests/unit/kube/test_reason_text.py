"""Pending reasons name pods as users know them and date reservations as instants."""

from __future__ import annotations

from gpupool.kube.scheduler.reason_text import readable

from .builders import pod

BIG = "ffb7cc7f-20ea-421c-92be-36468bf45292"
GONE = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"


def test_a_backfill_reason_names_the_pod_and_the_time() -> None:
    pods = {BIG: pod("big", uid=BIG, namespace="team-a")}
    reason = f"backfill: would delay {BIG}, reserved on node n1 from t=1796284886s"
    assert readable(reason, pods) == (
        "backfill: would delay team-a/big, reserved on node n1 from 2026-12-03T08:01:26Z"
    )


def test_unknown_uids_and_other_text_are_left_as_they_are() -> None:
    pods = {BIG: pod("big", uid=BIG)}
    reason = f"0/2 nodes are available: 1 node(s) reserved for {BIG}, {GONE}; t=5s"
    assert readable(reason, pods) == (
        f"0/2 nodes are available: 1 node(s) reserved for default/big, {GONE}; t=5s"
    )
