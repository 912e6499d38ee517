"""Preferred node affinity and soft taints rank nodes the GPU score leaves tied, as kube does.

The policy's score (here best-fit) decides first: a preference never moves a pod off the node
packing chose, it only picks among equals (where the node order alone decided before).
"""

from __future__ import annotations

import msgspec
import pytest

from gpupool.core.constraints import (
    NodeConstraints,
    PreferredTerm,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from gpupool.core.framework import Scheduler
from gpupool.core.model import InvalidSpecError, NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import InvalidObjectError, node_constraints
from gpupool.scheduling.policies.bestfit import BestFitPolicy


def _node(name: str, zone: str, *taints: Taint) -> NodeSpec:
    return NodeSpec(
        name, 16000, 65536, 2, "H100", 81920, labels=(("zone", zone),), taints=tuple(taints)
    )


def _pod(name: str, constraints: NodeConstraints | None = None) -> PodSpec:
    return PodSpec(name, 1000, 1024, 1, 500, constraints=constraints)


def _prefers(zone: str, weight: int = 50) -> PreferredTerm:
    return PreferredTerm(weight, SelectorTerm((Requirement("zone", "In", (zone,)),)))


def _where(snapshot: ClusterSnapshot, pod: PodSpec) -> str:
    return Scheduler(BestFitPolicy()).schedule(snapshot, pod).node_name  # type: ignore[union-attr]


def test_a_preferred_zone_wins_among_equal_nodes() -> None:
    snapshot = ClusterSnapshot([_node("a", "east"), _node("b", "west")])
    assert _where(snapshot, _pod("plain")) == "a"  # the node order decides alone
    assert _where(snapshot, _pod("p", NodeConstraints(preferred=(_prefers("west"),)))) == "b"


def test_the_heavier_preference_wins() -> None:
    snapshot = ClusterSnapshot([_node("a", "east"), _node("b", "west"), _node("c", "north")])
    wants = NodeConstraints(preferred=(_prefers("west", 10), _prefers("north", 60)))
    assert _where(snapshot, _pod("p", wants)) == "c"


def test_a_preference_does_not_override_the_gpu_score() -> None:
    snapshot = ClusterSnapshot([_node("a", "east"), _node("b", "west")])
    snapshot.bind(_pod("resident"), 0, (0,))  # best-fit now packs shares onto node a
    assert _where(snapshot, _pod("p", NodeConstraints(preferred=(_prefers("west"),)))) == "a"


def test_an_untolerated_soft_taint_ranks_its_node_last_and_a_toleration_lifts_it() -> None:
    soft = Taint("spot", "yes", "PreferNoSchedule")
    snapshot = ClusterSnapshot([_node("a", "east", soft), _node("b", "west")])
    assert _where(snapshot, _pod("plain")) == "b"
    tolerant = NodeConstraints(tolerations=(Toleration("spot", "Exists"),))
    assert _where(snapshot, _pod("tolerant", tolerant)) == "a"


def test_a_weight_outside_the_apis_range_is_refused() -> None:
    with pytest.raises(InvalidSpecError, match="weight"):
        _prefers("west", 0)


def test_the_pods_preferred_terms_are_read_and_a_bad_weight_is_named_by_its_path() -> None:
    def pod(weight: int) -> PodRecord:
        preference = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["w"]}]}
        affinity = {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": weight, "preference": preference}
                ]
            }
        }
        return msgspec.convert(
            {"metadata": {"name": "p", "namespace": "n"}, "spec": {"affinity": affinity}},
            PodRecord,
        )

    read = node_constraints(pod(30))
    assert read is not None
    assert [p.weight for p in read.preferred] == [30]
    with pytest.raises(InvalidObjectError) as refused:
        node_constraints(pod(101))
    assert refused.value.field.startswith(
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
    )
