"""The score terms gpupool's policy adds to FGD: CPU- and memory-aware fragmentation, hole value.

Each scenario is a tiny hand-made cluster where the term must pick a specific node, next to the
same decision without the term, so that a term that stopped working fails the test.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.core.decisions import Bind
from gpupool.core.framework import Scheduler
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.fragmentation import FragmentationIndex, ResourceAwareIndex
from gpupool.scheduling.hole_value import HoleTable, expected_leftover
from gpupool.scheduling.online_workload import OnlineWorkload
from gpupool.scheduling.policies.fgd import FGDPolicy
from gpupool.scheduling.policies.gpupool_default import GpupoolPolicy
from gpupool.scheduling.workload import TargetWorkload

GIB = 1024


def learned(policy: GpupoolPolicy, mix: list[tuple[PodSpec, int]]) -> GpupoolPolicy:
    for pod, count in mix:
        for _ in range(count):
            policy.observe(pod)
    return policy


def node_choice(policy: FGDPolicy, snapshot: ClusterSnapshot, pod: PodSpec) -> int:
    """Where ``pod`` goes; the fixed order prefers node 0, so any other answer is the score's."""
    ranks = np.arange(snapshot.size, dtype=np.int64)
    decision = Scheduler(policy, tie_rank=ranks).schedule(snapshot, pod)
    assert isinstance(decision, Bind)
    return decision.node


# ------------------------------------------------------------------------------------------------
# CPU and memory cap the usable GPU
# ------------------------------------------------------------------------------------------------
def test_cpu_caps_what_a_shape_can_use_by_hand() -> None:
    # 8 free GPUs and 12 vCPU: FGD counts all 8 GPUs usable by 1-GPU pods of 11 vCPU, since one
    # fits; only one such pod can ever run there, so 8000 - floor(12000 * 1000 / 11000) = 6910
    # milli are stranded.
    snapshot = ClusterSnapshot([NodeSpec("n", 12_000, 512 * GIB, 8, "G2")])
    workload = TargetWorkload.from_counts({(11_000, 1000, 1, ""): 1}, coverage=1.0)
    assert FragmentationIndex(snapshot, workload).node_fragmentation(snapshot).tolist() == [0]
    aware = ResourceAwareIndex(snapshot, workload).node_fragmentation(snapshot)
    assert aware.tolist() == [6910]


def test_memory_caps_what_a_shape_can_use_by_hand() -> None:
    # Enough CPU for all 4 GPUs, but 100 GiB of memory holds two pods of 48 GiB: usable
    # floor(102400 * 1000 / 49152) = 2083 of 4000.
    snapshot = ClusterSnapshot([NodeSpec("n", 96_000, 100 * GIB, 4, "G2")])
    key = (8000, 1000, 1, "")
    workload = TargetWorkload.from_counts({key: 1}, coverage=1.0, memory={key: 48.0 * GIB})
    aware = ResourceAwareIndex(snapshot, workload).node_fragmentation(snapshot)
    assert aware.tolist() == [4000 - 2083]
    # Without memory per shape (FGD's oracle workload) memory is not a limit.
    plain = TargetWorkload.from_counts({key: 1}, coverage=1.0)
    assert ResourceAwareIndex(snapshot, plain).node_fragmentation(snapshot).tolist() == [0]


WHOLE_11_VCPU = PodSpec("whole", 11_000, 40 * GIB, gpu_count=1, gpu_milli=1000)


def test_cpu_only_pod_keeps_off_the_node_whose_gpus_it_would_strand() -> None:
    # n0 has 2 GPUs and 24 vCPU (enough for both of the expected 11-vCPU pods), n1 2 GPUs and
    # 104 vCPU. A 12-vCPU CPU-only pod on n0 leaves room for one of them: FGD sees no change
    # (one still fits), the resource-aware measure sees a GPU stranded.
    nodes = [
        NodeSpec("n0", 24_000, 512 * GIB, 2, "T4"),
        NodeSpec("n1", 104_000, 512 * GIB, 2, "T4"),
    ]
    pod = PodSpec("cpu-only", 12_000, 8 * GIB)
    policy = learned(GpupoolPolicy(), [(WHOLE_11_VCPU, 20), (pod, 1)])
    assert node_choice(FGDPolicy(policy.workload), ClusterSnapshot(nodes), pod) == 0
    assert node_choice(policy, ClusterSnapshot(nodes), pod) == 1
    why = policy.explain(ClusterSnapshot(nodes), pod, 0)
    assert why.fragmentation_after > why.fragmentation_before


def test_memory_heavy_pod_keeps_off_the_node_whose_gpus_it_would_strand() -> None:
    # Same CPU everywhere; n0 has 100 GiB for its 2 GPUs (two 40-GiB pods fit), n1 512 GiB.
    # A CPU-only pod of 30 GiB on n0 leaves memory for one GPU pod only.
    nodes = [NodeSpec("n0", 64_000, 100 * GIB, 2, "T4"), NodeSpec("n1", 64_000, 512 * GIB, 2, "T4")]
    pod = PodSpec("memory-heavy", 1000, 30 * GIB)
    policy = learned(GpupoolPolicy(), [(WHOLE_11_VCPU, 20), (pod, 1)])
    assert node_choice(FGDPolicy(policy.workload), ClusterSnapshot(nodes), pod) == 0
    assert node_choice(policy, ClusterSnapshot(nodes), pod) == 1


def test_learner_records_the_mean_memory_of_each_shape() -> None:
    learner = OnlineWorkload(half_life=1e9, rebuild_every=1)
    for memory in (10 * GIB, 30 * GIB):
        learner.observe(PodSpec("p", 4000, memory, gpu_count=1, gpu_milli=500))
    learner.observe(PodSpec("q", 4000, 7 * GIB))
    built = learner.current()
    assert built is not None
    assert built.memory_mib is not None
    by_shape = dict(zip(built.gpu_milli.tolist(), built.memory_mib.tolist(), strict=True))
    assert by_shape == pytest.approx({500: 20.0 * GIB, 0: 7.0 * GIB})


# ------------------------------------------------------------------------------------------------
# The expected leftover of a GPU hole
# ------------------------------------------------------------------------------------------------
def test_expected_leftover_by_hand() -> None:
    # Only 500-milli shares arrive. Below 500 nothing fits: E(h) = h. From 500 on, with the
    # fill share at 1 (any fitting hole is filled), E(h) = E(h - 500).
    workload = TargetWorkload.from_counts({(1000, 500, 1, ""): 3}, coverage=1.0)
    sure = expected_leftover(workload, 1000, fill_share=1.0)
    assert sure[[0, 300, 499, 500, 600, 999, 1000]].tolist() == [0, 300, 499, 0, 100, 499, 0]
    # With a fill share of 2, a hole all of the pods fit is filled with chance 1/2:
    # E(600) = 600/2 + E(100)/2 = 350; E(1000) = 1000/2 + E(500)/2 = 500 + 250/2 = 625.
    half = expected_leftover(workload, 1000, fill_share=2.0)
    assert half[[500, 600, 1000]].tolist() == [250, 350, 625]


def test_expected_leftover_weighs_the_pods_that_fit() -> None:
    # 300 and 700 shares, 3:1, and CPU-only pods that fill no hole.
    workload = TargetWorkload.from_counts(
        {(1000, 300, 1, ""): 3, (1000, 700, 1, ""): 1, (1000, 0, 0, ""): 50}, coverage=1.0
    )
    leftover = expected_leftover(workload, 1000, fill_share=1e-9)
    # E(300) = E(0) = 0; E(600) = E(300) = 0; E(700) = 3/4 E(400) + 1/4 E(0) = 3/4 * 100.
    assert leftover[[299, 300, 600, 700]].tolist() == [299, 0, 0, 75]


@pytest.mark.parametrize(("capacity", "fill_share"), [(-1, 0.03), (1000, 0.0)])
def test_expected_leftover_rejects_bad_arguments(capacity: int, fill_share: float) -> None:
    workload = TargetWorkload.from_counts({(1000, 500, 1, ""): 1}, coverage=1.0)
    with pytest.raises(ValueError, match="capacity" if capacity < 0 else "fill_share"):
        expected_leftover(workload, capacity, fill_share)


def test_a_hole_whose_node_cannot_feed_a_pod_that_fits_it_is_kept_for_good() -> None:
    # 470 shares need 8 vCPU and 20 GiB, 320 shares 4 vCPU and 30 GiB: a 530 hole needs at
    # least 4 vCPU and 20 GiB free on its node (the least of each over the shapes that fit).
    counts = {(8000, 470, 1, ""): 1, (4000, 320, 1, ""): 1}
    memory = {(8000, 470, 1, ""): 20.0 * GIB, (4000, 320, 1, ""): 30.0 * GIB}
    workload = TargetWorkload.from_counts(counts, coverage=1.0, memory=memory)
    table = HoleTable.build(workload, 1000, fill_share=1.0)
    assert table.leftover[530] == pytest.approx(0.5 * 60 + 0.5 * 210)  # 470 or 320 next
    free = np.array([530, 530, 530, 100, 0])
    cpu = np.array([4000, 3999, 64_000, 64_000, 0])
    memory_free = np.array([20 * GIB, 64 * GIB, 20 * GIB - 1, 64 * GIB, 0])
    kept = table.kept(free, cpu, memory_free)
    # alive; CPU short; memory short; nothing fits a 100 hole anyway; a full GPU keeps nothing
    assert kept.tolist() == [pytest.approx(135.0), 530, 530, 100, 0]


def share(milli: int) -> PodSpec:
    return PodSpec(f"share-{milli}", 4000, GIB, gpu_count=1, gpu_milli=milli)


def test_share_leaves_the_hole_the_next_pods_would_close() -> None:
    # n0's GPU holds a 470 share (530 free), n1's GPU is free (n1 runs a CPU pod, so both
    # nodes are in use and the tie-break is equal). A 320 share in the 530 hole leaves 210
    # milli that no expected share fits; FGD prefers it (the 530 were already fragment for
    # every shape above 530). The hole term sees that the 530 hole would have been closed by
    # the next 470 and sends the 320 to the free GPU, where a 650 will close it.
    nodes = [NodeSpec(f"n{i}", 64_000, 256 * GIB, 1, "A100") for i in range(2)]
    mix = [(share(470), 4), (share(650), 2), (share(320), 2), (share(1000), 1)]

    def cluster() -> ClusterSnapshot:
        snapshot = ClusterSnapshot(nodes)
        snapshot.bind(share(470), 0, (0,))
        snapshot.bind(PodSpec("cpu-pod", 4000, GIB), 1, ())
        return snapshot

    without = learned(GpupoolPolicy(hole_weight=0.0), mix)
    assert node_choice(without, cluster(), share(320)) == 0
    policy = learned(GpupoolPolicy(), mix)
    assert node_choice(policy, cluster(), share(320)) == 1
    into_hole, onto_free = (policy.explain(cluster(), share(320), n) for n in range(2))
    assert into_hole.leftover_change > onto_free.leftover_change > 0
    assert into_hole.fgd_score < onto_free.fgd_score
