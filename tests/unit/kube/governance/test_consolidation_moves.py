"""Which live pods consolidation may move, and how its plans read in Events and ``explain``."""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.governance.consolidation_plan import Declined, Move, Plan
from gpupool.kube.governance.consolidation import describe, workload_key
from gpupool.kube.objects.records import PodRecord
from gpupool.policy.spec import ConsolidationMode

from ..builders import decode_pod, pod_dict


def _pod(name: str, owner: str | None, *, deleting: bool = False) -> PodRecord:
    obj: dict[str, Any] = pod_dict(name, namespace="team", gpus=1)
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner, "name": "web", "uid": "u", "controller": True}
        ]
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return decode_pod(obj)


@pytest.mark.parametrize(
    ("owner", "deleting", "key"),
    [
        ("ReplicaSet", False, "team/ReplicaSet/web"),
        ("StatefulSet", False, "team/StatefulSet/web"),
        ("Job", False, None),  # an eviction would count against its backoffLimit
        (None, False, None),  # a bare pod: nothing creates it again
        ("ReplicaSet", True, None),  # already leaving
    ],
)
def test_only_replicaset_and_statefulset_pods_not_leaving_may_move(
    owner: str | None, deleting: bool, key: str | None
) -> None:
    assert workload_key(_pod("p", owner, deleting=deleting)) == key


def test_a_plan_reads_with_pod_and_node_names_and_report_only_says_would() -> None:
    pod = _pod("web-1", "ReplicaSet")
    move = Move(pod.metadata.uid, "team/ReplicaSet/web", 0, 1, 0.5, 300.0)
    plan = Plan("big", 0, 0, (move,), 120.0, 7320.0, 7200.0, 300.0)
    names = ("n0", "n1")
    text = describe(plan, names, {pod.metadata.uid: pod})
    assert text.startswith("consolidation moving team/web-1 from n0 (fits on n1)")
    assert "fits on n0: it gains 2.00 GPU-hours (it waited 120 s), the moves cost 0.08" in text
    report = describe(Plan(**{**_fields(plan), "mode": ConsolidationMode.REPORT_ONLY}), names, {})
    assert report.startswith("consolidation would move ")
    declined = describe(Declined("big", 0, "the pods to move would fit nowhere"), names, {})
    assert declined == "consolidation: no moves: the pods to move would fit nowhere"


def _fields(plan: Plan) -> dict[str, Any]:
    return {name: getattr(plan, name) for name in Plan.__dataclass_fields__}
