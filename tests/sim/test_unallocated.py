"""The unallocated split: hand-made snapshots where every part is known, and a real replay."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.scheduling.workload import TargetWorkload
from gpupool.sim.replay.packing_lp import placed_share_floor_milli
from gpupool.sim.replay.protocol import seeded_run
from gpupool.sim.replay.run import replay
from gpupool.sim.replay.unallocated import arrived_by, split_at_mark, split_unallocated
from gpupool.sim.trace import read_trace

# Every GPU pod of the workload asks for (4000 cpu, 2048 MiB) or (6000 cpu, 512 MiB).
WORKLOAD = [
    PodSpec("w1", 4000, 2048, gpu_count=1, gpu_milli=500),
    PodSpec("w2", 6000, 512, gpu_count=1, gpu_milli=1000),
    PodSpec("cpu-only", 10, 10),  # not a GPU pod: it never makes a node fit
]


def cluster() -> ClusterSnapshot:
    snapshot = ClusterSnapshot(
        [
            NodeSpec("a", 8000, 8192, gpu_count=2, gpu_model="T4"),
            NodeSpec("b", 4000, 8192, gpu_count=1, gpu_model="T4"),
            NodeSpec("c", 16000, 8192, gpu_count=2, gpu_model="T4"),
            NodeSpec("d", 7000, 3048, gpu_count=4, gpu_model="T4"),
            NodeSpec("e", 64000, 65536, gpu_count=1, gpu_model="T4"),
        ]
    )
    # a: one 810 share on GPU 0; 6000 cpu and 7168 MiB left, so GPU 1 is usable (part c).
    snapshot.bind(PodSpec("s810", 2000, 1024, gpu_count=1, gpu_milli=810), 0, (0,))
    # b: a CPU-only pod leaves 1000 cpu: its whole free GPU is stranded by CPU (part b).
    snapshot.bind(PodSpec("cpu-b", 3000, 1024), 1)
    # c: a whole-GPU pod takes all memory: GPU 1 is stranded by memory (part b).
    snapshot.bind(PodSpec("whole-c", 1000, 8192, gpu_count=1, gpu_milli=1000), 2, (0,))
    # d: 5000 cpu and 1000 MiB left. Each resource alone covers some pod's request (5000 >=
    # 4000, 1000 >= 512) but no pod gets both, so d is short; GPU 0 holds two shares (part a).
    snapshot.bind(PodSpec("s300", 1000, 1024, gpu_count=1, gpu_milli=300), 3, (0,))
    snapshot.bind(PodSpec("s200", 1000, 1024, gpu_count=1, gpu_milli=200), 3, (0,))
    # e: untouched, one whole free GPU (part c).
    return snapshot


FAILED = [
    PodSpec("f1", 1000, 1, gpu_count=1, gpu_milli=300),
    PodSpec("f2", 1000, 1, gpu_count=2, gpu_milli=400),
    PodSpec("f3", 1000, 1, gpu_count=2, gpu_milli=1000),  # whole GPUs: not a share
    PodSpec("f4", 99_000, 1),  # CPU-only
]


def test_each_part_holds_what_was_left_there() -> None:
    snapshot = cluster()
    split = split_unallocated(snapshot, WORKLOAD, FAILED)
    assert split.capacity_milli == 10_000
    assert split.share_gpu_free_milli == 190 + 500  # a GPU 0, d GPU 0
    assert split.share_gpu_free_on_short_milli == 500  # d is short, a is not
    assert split.short_node_free_milli == 1000 + 1000 + 3000  # b, c GPU 1, d GPUs 1-3
    assert split.other_free_milli == 1000 + 1000  # a GPU 1, e
    assert split.short_nodes == 3
    assert split.failed_share_milli == 300 + 2 * 400
    assert split.failed_shares == 2
    assert split.failed_gpu_milli == 300 + 800 + 2000


def test_the_parts_add_up_to_the_unallocated_capacity_exactly() -> None:
    snapshot = cluster()
    split = split_unallocated(snapshot, WORKLOAD, FAILED)
    assert split.unallocated_milli == snapshot.total_gpus * 1000 - snapshot.used_gpu_milli
    parts = (split.share_gpu_free_milli, split.short_node_free_milli, split.other_free_milli)
    assert sum(split.pct(part) for part in parts) == pytest.approx(
        100.0 - snapshot.used_gpu_milli / (snapshot.total_gpus * 10), abs=1e-12
    )


def test_without_gpu_pods_in_the_workload_no_node_is_short() -> None:
    split = split_unallocated(cluster(), [PodSpec("cpu", 1, 1)], [])
    assert split.short_node_free_milli == 0
    assert split.other_free_milli == 7000
    assert (split.failed_share_milli, split.failed_shares, split.failed_gpu_milli) == (0, 0, 0)


def test_a_snapshot_without_gpus_is_refused() -> None:
    with pytest.raises(ValueError, match="no GPU"):
        split_unallocated(ClusterSnapshot([NodeSpec("cpu", 1000, 1000)]), WORKLOAD, [])


def test_arrived_by_stops_before_the_pod_that_crosses_the_mark() -> None:
    pods = [PodSpec(f"p{i}", 1, 1, gpu_count=1, gpu_milli=400) for i in range(5)]
    assert arrived_by(pods, 1200) == 3
    assert arrived_by(pods, 1199) == 2
    assert arrived_by(pods, 10_000) == 5
    assert arrived_by([], 0) == 0


def replayed(
    pods: list[PodSpec], gpus_per_node: int, policy: str = "bestfit"
) -> tuple[ClusterSnapshot, list[int]]:
    nodes = [
        NodeSpec(f"n{i}", 16000, 65536, gpu_count=gpus_per_node, gpu_model="T4") for i in range(4)
    ]
    context = PolicyContext(np.random.default_rng(0), pods)
    result = replay(nodes, pods, build_policy(policy, context), TargetWorkload.from_pods(pods))
    return result.snapshot, [int(used) for used in result.used_milli]


def gpu_count(count: int, milli: int) -> int:
    return count if milli == 1000 else min(milli, 1)


shapes = st.tuples(
    st.integers(500, 9000),  # cpu
    st.sampled_from([1, 2, 4]),  # gpus
    st.sampled_from([0, 150, 250, 400, 500, 810, 1000]),  # milli per GPU
)


@settings(max_examples=25, deadline=None)
@given(st.lists(shapes, min_size=1, max_size=40), st.sampled_from([2, 4]))
def test_split_at_the_mark_matches_the_replay_and_leaves_it_as_it_was(
    drawn: list[tuple[int, int, int]], gpus_per_node: int
) -> None:
    # Whole-GPU pods take 1, 2 or 4 GPUs, shares one GPU, and milli 0 means CPU-only.
    pods = [
        PodSpec(f"p{i}", cpu, 1024, gpu_count=gpu_count(count, milli), gpu_milli=milli)
        for i, (cpu, count, milli) in enumerate(drawn)
    ]
    snapshot, used = replayed(pods, gpus_per_node)
    capacity = snapshot.total_gpus * 1000
    before = (snapshot.used_gpu_milli, snapshot.gpu_free.copy(), snapshot.cpu_free.copy())
    for mark in (capacity // 2, capacity):
        at = split_at_mark(snapshot, pods, mark)
        arrived = sum(pod.total_gpu_milli for pod in pods[: at.arrived])
        used_then = used[at.arrived - 1] if at.arrived else 0
        split = at.breakdown
        assert split.unallocated_milli == capacity - used_then
        # What arrived and did not fail is what is allocated.
        assert split.unallocated_milli == capacity - arrived + split.failed_gpu_milli
        assert split.share_gpu_free_milli + 1e-6 >= placed_share_floor_milli(
            Counter(at.placed_shares)
        )
    assert snapshot.used_gpu_milli == before[0]
    assert np.array_equal(snapshot.gpu_free, before[1])
    assert np.array_equal(snapshot.cpu_free, before[2])


def test_split_of_a_real_run_on_a_quarter_of_the_openb_cluster(trace_dir: Path) -> None:
    trace = read_trace(
        trace_dir / "openb_node_list_gpu_node.csv", trace_dir / "openb_pod_list_default.csv"
    )
    nodes = sorted(trace.nodes, key=lambda node: node.name)[::4]
    run = seeded_run(nodes, trace.pods, 42)
    policy = build_policy("bestfit", PolicyContext(run.policy_rng, trace.pods))
    result = replay(nodes, run.arrivals, policy, TargetWorkload.from_pods(trace.pods), run.tie_rank)
    capacity = result.total_gpus * 1000
    at = split_at_mark(result.snapshot, run.arrivals, capacity)
    split = at.breakdown
    assert 0 < at.arrived < len(run.arrivals)
    assert result.arrived_milli[at.arrived - 1] <= capacity < result.arrived_milli[at.arrived]
    assert split.unallocated_milli == capacity - result.used_milli[at.arrived - 1]
    assert split.unallocated_milli == split.failed_gpu_milli + capacity - int(
        result.arrived_milli[at.arrived - 1]
    )
    assert split.share_gpu_free_milli >= placed_share_floor_milli(Counter(at.placed_shares)) > 0
    assert split.failed_shares > 0  # best fit strands shares on this cluster by 100%
