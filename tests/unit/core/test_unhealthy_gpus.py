"""Unhealthy GPUs in the pure core: no policy places on them, pods already there stay held."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.core.decisions import Bind, Reject
from gpupool.core.filtering import REASON_GPU, REASON_UNHEALTHY, filter_nodes
from gpupool.core.framework import Scheduler
from gpupool.core.model import MILLI_PER_GPU, InvalidSpecError, NodeSpec, PodSpec
from gpupool.core.snapshot import AllocationError, ClusterSnapshot
from gpupool.scheduling.registry import PolicyContext, build_policy, policy_names


def gpu_node(name: str, gpus: int, unhealthy: tuple[int, ...] = ()) -> NodeSpec:
    return NodeSpec(
        name=name,
        cpu_milli=64_000,
        memory_mib=65_536,
        gpu_count=gpus,
        gpu_model="A100",
        gpu_memory_mib=40_960,
        unhealthy_gpus=unhealthy,
    )


def share(name: str, milli: int = 500, count: int = 1) -> PodSpec:
    return PodSpec(name=name, cpu_milli=100, memory_mib=128, gpu_milli=milli, gpu_count=count)


def test_a_gpu_index_the_node_does_not_have_is_refused_by_field() -> None:
    with pytest.raises(InvalidSpecError) as caught:
        gpu_node("n", 2, unhealthy=(2,))
    assert "unhealthy_gpus" in str(caught.value)


@pytest.mark.parametrize("policy_name", policy_names())
def test_no_policy_places_a_pod_on_an_unhealthy_gpu(policy_name: str) -> None:
    snapshot = ClusterSnapshot([gpu_node("n0", 4, unhealthy=(0, 2)), gpu_node("n1", 2, (0, 1))])
    pods = [share(f"p{i}", milli=400) for i in range(4)]
    scheduler = Scheduler(build_policy(policy_name, PolicyContext(np.random.default_rng(0), pods)))
    placed: list[tuple[int, ...]] = []
    for pod in pods:
        scheduler.observe(pod)
        decision = scheduler.schedule(snapshot, pod)
        assert isinstance(decision, Bind), decision
        assert decision.node_name == "n0"
        snapshot.bind(decision.pod, decision.node, decision.gpus)
        placed.append(decision.gpus)
    assert {gpu for gpus in placed for gpu in gpus} <= {1, 3}
    rejected = scheduler.schedule(snapshot, share("late", milli=400))
    assert isinstance(rejected, Reject)


def test_a_node_with_room_only_on_broken_gpus_says_so() -> None:
    snapshot = ClusterSnapshot([gpu_node("broken", 2, (1,)), gpu_node("full", 1)])
    snapshot.bind(share("busy", milli=MILLI_PER_GPU), 1, (0,))
    snapshot.bind(share("half", milli=600), 0, (0,))
    result = filter_nodes(snapshot, share("new", milli=600))
    assert not result.mask.any()
    assert dict(result.reasons()) == {REASON_GPU: 1, REASON_UNHEALTHY: 1}
    assert "unhealthy" in result.message()


def test_healthy_snapshot_keeps_the_old_reason() -> None:
    snapshot = ClusterSnapshot([gpu_node("n", 1)])
    result = filter_nodes(snapshot, share("big", milli=MILLI_PER_GPU, count=2))
    assert [name for name, _ in result.checks if name == REASON_UNHEALTHY] == []


def test_bind_refuses_a_new_placement_on_an_unhealthy_gpu() -> None:
    snapshot = ClusterSnapshot([gpu_node("n", 2, (1,))])
    with pytest.raises(AllocationError, match="GPU 1 is unhealthy"):
        snapshot.bind(share("p"), 0, (1,))
    assert snapshot.gpu_free[0, 1] == MILLI_PER_GPU  # nothing was taken


def test_a_running_pod_stays_held_on_its_unhealthy_gpu_through_a_what_if() -> None:
    snapshot = ClusterSnapshot([gpu_node("n", 2, (1,))])
    snapshot.bind(share("old", milli=700), 0, (1,), running=True)
    assert snapshot.gpu_free[0, 1] == 300
    restore = snapshot.simulate_removal(["old"])
    assert snapshot.gpu_free[0, 1] == MILLI_PER_GPU
    assert filter_nodes(snapshot, share("new", milli=700)).mask.all()  # GPU 0 is still good
    restore()
    assert snapshot.allocations["old"].gpus == (1,)
    assert snapshot.gpu_free[0, 1] == 300
    copy = snapshot.copy()
    assert not copy.gpu_usable[0, 1]
