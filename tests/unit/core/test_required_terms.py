"""Groups of terms required besides a pod's own affinity (its volumes'), in the core.

A pod's volumes narrow its nodes the way kube-scheduler's VolumeBinding does, as a separate
filter: a node must meet the pod's affinity AND every group, and a node failing a group is
counted under that group's reason. The filter, ``fits_on_node`` and ``admissible`` (preemption,
backfill, explain) read the same compiled masks.
"""

from __future__ import annotations

from gpupool.core.constraints import NodeConstraints, RequiredTerms, Requirement, SelectorTerm
from gpupool.core.filtering import REASON_SELECTOR, admissible, filter_nodes, fits_on_node
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot

HOST = "kubernetes.io/hostname"
NODE_AFFINITY = "node(s) didn't match PersistentVolume's node affinity"
ZONE = "node(s) had no available volume zone"


def _on(*hosts: str) -> SelectorTerm:
    return SelectorTerm((Requirement(HOST, "In", hosts),))


def _cluster() -> ClusterSnapshot:
    return ClusterSnapshot(
        [
            NodeSpec(f"n{i}", 8000, 8192, 1, "A100", labels=((HOST, f"n{i}"), ("zone", zone)))
            for i, zone in enumerate("aab")
        ]
    )


def _pod(constraints: NodeConstraints) -> PodSpec:
    return PodSpec("p", 1000, 1024, gpu_count=1, gpu_milli=1000, constraints=constraints)


def test_every_group_must_hold_besides_the_pods_affinity() -> None:
    groups = (
        RequiredTerms(NODE_AFFINITY, (_on("n0", "n1"),)),
        RequiredTerms(NODE_AFFINITY, (_on("n1", "n2"),)),
    )
    snapshot = _cluster()
    alone = _pod(NodeConstraints.of(required=groups))
    assert filter_nodes(snapshot, alone).mask.tolist() == [False, True, False]
    with_affinity = _pod(NodeConstraints.of(affinity=(_on("n0"),), required=groups))
    result = filter_nodes(snapshot, with_affinity)
    assert result.mask.tolist() == [False, False, False]
    assert dict(result.reasons()) == {NODE_AFFINITY: 2, REASON_SELECTOR: 2}


def test_each_reason_is_its_own_check_and_a_group_without_terms_fits_no_node() -> None:
    zone = SelectorTerm((Requirement("zone", "In", ("b",)),))
    groups = (RequiredTerms(NODE_AFFINITY, (_on("n0", "n2"),)), RequiredTerms(ZONE, (zone,)))
    result = filter_nodes(_cluster(), _pod(NodeConstraints.of(required=groups)))
    assert result.mask.tolist() == [False, False, True]
    assert dict(result.reasons()) == {NODE_AFFINITY: 1, ZONE: 2}
    nowhere = _pod(NodeConstraints.of(required=(RequiredTerms("no volume"),)))
    assert admissible(_cluster(), nowhere).tolist() == [False, False, False]


def test_preemption_and_backfill_see_the_groups_as_the_filter_does() -> None:
    snapshot = _cluster()
    pod = _pod(NodeConstraints.of(required=(RequiredTerms(NODE_AFFINITY, (_on("n2"),)),)))
    mask = filter_nodes(snapshot, pod).mask.tolist()
    assert [fits_on_node(snapshot, pod, n) for n in range(3)] == mask
    assert admissible(snapshot, pod).tolist() == mask == [False, False, True]


def test_groups_make_constraints_distinct_and_non_empty() -> None:
    group = RequiredTerms(NODE_AFFINITY, (_on("n0"),))
    assert not NodeConstraints.of(required=(group,)).empty
    assert NodeConstraints.of(required=(group,)) != NodeConstraints.of()
    assert _pod(NodeConstraints.of(required=(group,))).constraints is not None
