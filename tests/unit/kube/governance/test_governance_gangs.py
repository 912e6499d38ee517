"""Governance takes a gang with the pod it reclaims or cleans up, unless its PodGroup says
``disruptionMode: single``."""

from __future__ import annotations

from typing import Any

import msgspec

from gpupool.governance.decisions import Reclaim, Rule
from gpupool.kube.governance.gang_peers import with_gang
from gpupool.kube.objects.records import PodRecord
from gpupool.scheduling.decisions import GangSpec

from ..builders import pod_dict


def _pod(name: str, group: str = "", node: str = "n0", **fields: Any) -> PodRecord:
    body = pod_dict(name, namespace="ml", gpus=1, node=node, phase="Running", **fields)
    if group:
        body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return msgspec.convert(body, PodRecord)


PODS = {
    pod.metadata.uid: pod
    for pod in (
        _pod("w0", "train"),
        _pod("w1", "train", node="n1"),
        _pod("w2", "train"),
        _pod("pending", "train", node=""),
        _pod("other", "serve"),
        _pod("alone"),
    )
}
IDLE = Reclaim("uid-w1", Rule.IDLE, {"idle_seconds": 3600.0})


def test_the_running_pods_of_the_gang_go_with_the_reclaimed_one() -> None:
    taken = with_gang(PODS["uid-w1"], IDLE, PODS, {"ml/train": GangSpec(3)})
    assert [(pod.metadata.name, decision.pod_uid) for pod, decision in taken] == [
        ("w1", "uid-w1"),
        ("w0", "uid-w0"),
        ("w2", "uid-w2"),
    ]
    assert taken[1][1].rule is Rule.IDLE
    assert taken[1][1].values["gang"] == "ml/train"
    assert taken[1][1].values["with"] == "ml/w1"


def test_a_gang_that_may_lose_pods_alone_and_a_pod_of_no_gang_go_alone() -> None:
    single = {"ml/train": GangSpec(3, evict_alone=True)}
    assert [p.metadata.name for p, _ in with_gang(PODS["uid-w1"], IDLE, PODS, single)] == ["w1"]
    alone = Reclaim("uid-alone", Rule.IDLE, {})
    assert [p.metadata.name for p, _ in with_gang(PODS["uid-alone"], alone, PODS, {})] == ["alone"]
