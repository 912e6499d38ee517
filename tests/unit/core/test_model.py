"""The resource model: spec validation, request kinds, the snapshot layout and MIG placement."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpupool.core.decisions import Bind, Reject
from gpupool.core.framework import Scheduler
from gpupool.core.model import InvalidSpecError, NodeSpec, PodSpec, RequestKind
from gpupool.core.snapshot import UNKNOWN_GPU_MEMORY, AllocationError, ClusterSnapshot
from gpupool.scheduling.registry import PUBLISHED, PolicyContext, build_policy

NODE_OK: dict[str, Any] = {"name": "n", "cpu_milli": 1000, "memory_mib": 1000}
POD_OK: dict[str, Any] = {"name": "p", "cpu_milli": 1000, "memory_mib": 1000}


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field", "owner"),
    [
        pytest.param({"name": ""}, "name", "node", id="empty-name"),
        pytest.param({"cpu_milli": -1}, "cpu_milli", "node 'n'", id="cpu"),
        pytest.param({"memory_mib": -1}, "memory_mib", "node 'n'", id="memory"),
        pytest.param({"gpu_count": -1}, "gpu_count", "node 'n'", id="gpu-count"),
        pytest.param({"gpu_memory_mib": -1}, "gpu_memory_mib", "node 'n'", id="gpu-memory"),
        pytest.param({"max_pods": -1}, "max_pods", "node 'n'", id="max-pods"),
        pytest.param({"gpu_count": 2}, "gpu_model", "node 'n'", id="gpus-without-model"),
        pytest.param(
            {"mig_slices": (("1g.10gb", 1), ("2g.20gb", -1))},
            "mig_slices[2g.20gb]",
            "node 'n'",
            id="mig-slices",
        ),
    ],
)
def test_node_spec_validation(changes: dict[str, Any], field: str, owner: str) -> None:
    with pytest.raises(InvalidSpecError) as info:
        NodeSpec(**(NODE_OK | changes))
    assert info.value.field_name == field
    assert info.value.owner == owner
    assert f"field '{field}'" in str(info.value)
    assert str(info.value).startswith(owner)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("changes", "field", "owner"),
    [
        pytest.param({"name": ""}, "name", "pod", id="empty-name"),
        pytest.param({"cpu_milli": -1}, "cpu_milli", "pod 'p'", id="cpu"),
        pytest.param({"memory_mib": -1}, "memory_mib", "pod 'p'", id="memory"),
        pytest.param({"gpu_count": -1}, "gpu_count", "pod 'p'", id="gpu-count"),
        pytest.param({"gpu_count": 1, "gpu_milli": -1}, "gpu_milli", "pod 'p'", id="milli"),
        pytest.param(
            {"gpu_count": 1, "gpu_milli": 100, "gpu_memory_mib": -1},
            "gpu_memory_mib",
            "pod 'p'",
            id="gpu-memory",
        ),
        pytest.param({"gpu_count": 1, "gpu_milli": 1001}, "gpu_milli", "pod 'p'", id="milli>1000"),
        pytest.param({"gpu_milli": 500}, "gpu_count", "pod 'p'", id="share-without-count"),
        pytest.param({"gpu_memory_mib": 512}, "gpu_count", "pod 'p'", id="memory-without-count"),
        pytest.param({"gpu_count": 2}, "gpu_milli", "pod 'p'", id="count-without-share"),
        pytest.param(
            {"mig_profile": "1g.10gb", "gpu_count": 1, "gpu_milli": 1000},
            "mig_profile",
            "pod 'p'",
            id="mig-and-gpus",
        ),
        pytest.param(
            {"mig_profile": "1g.10gb", "gpu_milli": 300},
            "mig_profile",
            "pod 'p'",
            id="mig-and-milli",
        ),
        pytest.param(
            {"mig_profile": "1g.10gb", "gpu_memory_mib": 300},
            "mig_profile",
            "pod 'p'",
            id="mig-and-memory",
        ),
    ],
)
def test_pod_spec_validation(changes: dict[str, Any], field: str, owner: str) -> None:
    with pytest.raises(InvalidSpecError) as info:
        PodSpec(**(POD_OK | changes))
    assert info.value.field_name == field
    assert info.value.owner == owner
    assert f"field '{field}'" in str(info.value)
    assert str(info.value).startswith(owner)


@pytest.mark.parametrize(
    ("changes", "kind", "total"),
    [
        pytest.param({}, RequestKind.NONE, 0, id="cpu-only"),
        pytest.param({"gpu_count": 1, "gpu_milli": 1000}, RequestKind.WHOLE, 1000, id="whole"),
        pytest.param({"gpu_count": 8, "gpu_milli": 1000}, RequestKind.WHOLE, 8000, id="eight"),
        pytest.param({"gpu_count": 1, "gpu_milli": 999}, RequestKind.SHARE, 999, id="share"),
        pytest.param({"gpu_count": 2, "gpu_milli": 50}, RequestKind.SHARE, 100, id="two-shares"),
        pytest.param(
            {"gpu_count": 1, "gpu_milli": 1000, "gpu_memory_mib": 1024},
            RequestKind.SHARE,
            1000,
            id="full-compute-with-memory-cap",
        ),
        pytest.param(
            {"gpu_count": 1, "gpu_memory_mib": 1024}, RequestKind.SHARE, 0, id="memory-only"
        ),
        pytest.param({"mig_profile": "1g.10gb"}, RequestKind.MIG, 0, id="mig"),
    ],
)
def test_request_kind(changes: dict[str, Any], kind: RequestKind, total: int) -> None:
    pod = PodSpec(**(POD_OK | changes))
    assert pod.kind is kind
    assert pod.total_gpu_milli == total


def test_valid_specs_keep_their_fields() -> None:
    node = NodeSpec("n", 0, 0, 2, "T4", 16_384, 0, (("1g.10gb", 0),), (("pool", "a"),))
    assert (node.gpu_count, node.gpu_model, node.max_pods) == (2, "T4", 0)
    pod = PodSpec("p", 0, 0, 1, 1000, gpu_models=frozenset({"T4"}), workload_class="training")
    assert pod.kind is RequestKind.WHOLE
    assert pod.gpu_models == frozenset({"T4"})


# ------------------------------------------------------------------------------------------------
# Snapshot layout
# ------------------------------------------------------------------------------------------------


def test_snapshot_rejects_empty_and_duplicate_inventories() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        ClusterSnapshot([])
    with pytest.raises(ValueError, match="duplicate node name 'a'"):
        ClusterSnapshot([NodeSpec("a", 1, 1), NodeSpec("b", 1, 1), NodeSpec("a", 2, 2)])


def test_snapshot_layout() -> None:
    snapshot = ClusterSnapshot(
        [
            NodeSpec("x", 8000, 100, 2, "T4", 16_384),
            NodeSpec("y", 4000, 200),
            NodeSpec("z", 16_000, 300, 3, "A100", mig_slices=(("1g.10gb", 2), ("3g.40gb", 1))),
        ]
    )
    assert snapshot.size == 3
    assert snapshot.models == ("A100", "T4")
    assert snapshot.model_id.tolist() == [1, -1, 0]
    assert snapshot.node_index == {"x": 0, "y": 1, "z": 2}
    assert snapshot.gpu_exists.tolist() == [
        [True, True, False],
        [False, False, False],
        [True, True, True],
    ]
    assert snapshot.gpu_free.tolist() == [[1000, 1000, 0], [0, 0, 0], [1000, 1000, 1000]]
    assert snapshot.gpu_memory_capacity[0].tolist() == [16_384, 16_384, 0]
    assert snapshot.gpu_memory_capacity[2].tolist() == [UNKNOWN_GPU_MEMORY] * 3
    assert snapshot.mig_profiles == ("1g.10gb", "3g.40gb")
    assert snapshot.mig_capacity.tolist() == [[0, 0], [0, 0], [2, 1]]
    assert snapshot.total_gpus == 5
    assert snapshot.model_mask(frozenset()).tolist() == [True, False, True]
    assert snapshot.model_mask(frozenset({"T4", "V100"})).tolist() == [True, False, False]
    assert snapshot.model_mask(frozenset({"V100"})).tolist() == [False, False, False]


# ------------------------------------------------------------------------------------------------
# MIG placement
# ------------------------------------------------------------------------------------------------


def mig_cluster() -> ClusterSnapshot:
    return ClusterSnapshot(
        [
            NodeSpec(
                "a100", 32_000, 65_536, 2, "A100", mig_slices=(("1g.10gb", 2), ("3g.40gb", 1))
            ),
            NodeSpec("t4", 32_000, 65_536, 2, "T4"),
            NodeSpec("a30", 32_000, 65_536, 1, "A30", mig_slices=(("1g.10gb", 1),)),
        ]
    )


def mig_pod(name: str, profile: str = "1g.10gb", cpu: int = 1000) -> PodSpec:
    return PodSpec(name, cpu, 1024, mig_profile=profile)


@pytest.mark.parametrize("policy_name", list(PUBLISHED))
def test_mig_pods_go_to_nodes_with_free_slices(policy_name: str) -> None:
    snapshot = mig_cluster()
    stream = [mig_pod(f"m{i}") for i in range(4)]
    policy = build_policy(policy_name, PolicyContext(np.random.default_rng(0), stream))
    scheduler = Scheduler(policy)
    placed: list[int] = []
    for pod in stream[:3]:
        decision = scheduler.schedule(snapshot, pod)
        assert isinstance(decision, Bind)
        assert decision.gpus == ()
        column = snapshot.mig_profiles.index("1g.10gb")
        assert snapshot.mig_free[decision.node, column] >= 1
        snapshot.bind(decision.pod, decision.node, decision.gpus)
        placed.append(decision.node)
    assert sorted(placed) == [0, 0, 2]
    assert snapshot.mig_free.tolist() == [[0, 1], [0, 0], [0, 0]]
    assert snapshot.used_gpu_milli == 0
    assert snapshot.gpu_free_total.tolist() == [2000, 2000, 1000]

    decision = scheduler.schedule(snapshot, stream[3])
    assert isinstance(decision, Reject)
    assert decision.reasons == (("Insufficient MIG slices 1g.10gb", 3),)
    assert decision.message == "0/3 nodes are available: 3 Insufficient MIG slices 1g.10gb."

    # Releasing one slice makes its node the only candidate.
    snapshot.release(f"m{placed.index(2)}")
    decision = scheduler.schedule(snapshot, stream[3])
    assert isinstance(decision, Bind)
    assert (decision.node, decision.score, decision.feasible_nodes) == (2, None, 1)


@pytest.mark.parametrize("policy_name", list(PUBLISHED))
def test_mig_profile_only_one_node_has(policy_name: str) -> None:
    snapshot = mig_cluster()
    pod = mig_pod("big", "3g.40gb")
    policy = build_policy(policy_name, PolicyContext(np.random.default_rng(0), [pod]))
    decision = Scheduler(policy).schedule(snapshot, pod)
    assert isinstance(decision, Bind)
    assert (decision.node, decision.gpus, decision.feasible_nodes) == (0, (), 1)


@pytest.mark.parametrize(
    ("pod", "reasons"),
    [
        pytest.param(
            mig_pod("unknown", "7g.80gb"),
            (("Insufficient MIG slices 7g.80gb", 3),),
            id="unknown-profile",
        ),
        pytest.param(
            mig_pod("hungry", "3g.40gb", cpu=64_000),
            (("Insufficient cpu", 3), ("Insufficient MIG slices 3g.40gb", 2)),
            id="cpu-and-slices",
        ),
    ],
)
def test_mig_rejections(pod: PodSpec, reasons: tuple[tuple[str, int], ...]) -> None:
    snapshot = mig_cluster()
    policy = build_policy("fgd", PolicyContext(np.random.default_rng(0), [pod]))
    decision = Scheduler(policy).schedule(snapshot, pod)
    assert isinstance(decision, Reject)
    assert decision.reasons == reasons
    assert decision.message.startswith("0/3 nodes are available: ")


def test_mig_bind_needs_a_free_slice() -> None:
    snapshot = mig_cluster()
    with pytest.raises(AllocationError, match=r"no free MIG slice 1g\.10gb"):
        snapshot.bind(mig_pod("m"), 1)
    snapshot.bind(mig_pod("m"), 2)
    with pytest.raises(AllocationError, match=r"no free MIG slice 1g\.10gb"):
        snapshot.bind(mig_pod("m2"), 2)
    snapshot.release("m")
    assert snapshot.mig_free.tolist() == [[2, 1], [0, 0], [1, 0]]
