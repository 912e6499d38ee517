"""The six published placement policies, checked against placement-benchmark.md sections 2 and 3.

Every expected score below was computed by hand from the formulas in the document (with integer
truncation); the arithmetic is written next to each table. The main cluster is:

==== ======= ====== ===== ============================== ========= ========
node model   GPUs   CPU   GPU free after the held pods   CPU free  G_n
==== ======= ====== ===== ============================== ========= ========
a    V100    4      32000 [1000, 400, 1000, 0]           24000     2400
b    G2      8      64000 [700, 1000, 500, 1000 x 5]     54000     7200
c    T4      2      16000 [1000, 1000]                   16000     2000
d    (none)  0      96000 []                             90000     0
==== ======= ====== ===== ============================== ========= ========

Held pods: on a a 600-milli share (GPU 1) and a whole GPU (GPU 3); on b two shares of 300 (GPU 0)
and 500 (GPU 2); on d a CPU-only pod. Node a therefore runs the clustering classes {share, 1-gpu},
b only {share}, c and d no GPU pods.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from gpupool.core.decisions import Bind, Reject
from gpupool.core.filtering import filter_nodes
from gpupool.core.framework import PlacementPolicy, Scheduler, apply
from gpupool.core.model import MILLI_PER_GPU, NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.fragmentation import FragmentationIndex
from gpupool.scheduling.policies.bestfit import BestFitPolicy
from gpupool.scheduling.policies.clustering import ClusteringPolicy, affinity_class
from gpupool.scheduling.policies.dotprod import DotProdPolicy
from gpupool.scheduling.policies.fgd import FGDPolicy
from gpupool.scheduling.policies.packing import PackingPolicy
from gpupool.scheduling.policies.randomfit import RandomPolicy
from gpupool.scheduling.registry import (
    PUBLISHED,
    PolicyContext,
    build_policy,
    policy_names,
)
from gpupool.scheduling.workload import ShapeKey, TargetWorkload, shape_key

BIG_MEM = 1_000_000
RANK = np.array([3, 0, 1, 2], dtype=np.int64)
"""Node b has the best rank, then c, d and a: a tie between a and c goes to c, a and b to b."""

Shape = tuple[int, int, int, frozenset[str], int]
"""``(cpu_milli, gpu_milli, gpu_count, allowed models, weight)`` of one typical task."""


# ------------------------------------------------------------------------------------------------
# Clusters and pods
# ------------------------------------------------------------------------------------------------


def main_cluster() -> ClusterSnapshot:
    """The cluster of the module docstring."""
    snapshot = ClusterSnapshot(
        [
            NodeSpec("a", 32_000, BIG_MEM, 4, "V100"),
            NodeSpec("b", 64_000, BIG_MEM, 8, "G2"),
            NodeSpec("c", 16_000, BIG_MEM, 2, "T4"),
            NodeSpec("d", 96_000, BIG_MEM),
        ]
    )
    snapshot.bind(PodSpec("held-share-a", 4000, 1000, 1, 600), 0, (1,))
    snapshot.bind(PodSpec("held-whole-a", 4000, 1000, 1, 1000), 0, (3,))
    snapshot.bind(PodSpec("held-share-b1", 8000, 1000, 1, 300), 1, (0,))
    snapshot.bind(PodSpec("held-share-b2", 2000, 1000, 1, 500), 1, (2,))
    snapshot.bind(PodSpec("held-cpu-d", 6000, 1000), 3)
    return snapshot


def tie_cluster() -> ClusterSnapshot:
    """Three empty 2-GPU nodes whose BestFit scores for SHARE are 84, 84 and 65."""
    return ClusterSnapshot(
        [
            NodeSpec("t0", 16_000, BIG_MEM, 2, "T4"),
            NodeSpec("t1", 16_500, BIG_MEM, 2, "P100"),
            NodeSpec("t2", 64_000, BIG_MEM, 2, "A10"),
        ]
    )


CLUSTERS: dict[str, Callable[[], ClusterSnapshot]] = {"main": main_cluster, "tie": tie_cluster}

SHARE = PodSpec("share", 2000, 1000, gpu_count=1, gpu_milli=350)
SHARE_AB = PodSpec(
    "share-ab", 2000, 1000, gpu_count=1, gpu_milli=350, gpu_models=frozenset({"V100", "G2"})
)
WHOLE = PodSpec("whole", 4000, 1000, gpu_count=1, gpu_milli=1000)
MULTI = PodSpec("multi", 8000, 1000, gpu_count=2, gpu_milli=1000)
MULTI_SHARE = PodSpec("multi-share", 2000, 1000, gpu_count=2, gpu_milli=300)
MULTI_SHARE_150 = PodSpec("multi-share-150", 2000, 1000, gpu_count=2, gpu_milli=150)
CPU = PodSpec("cpu", 10_000, 1000)

FGD_COUNTS: dict[ShapeKey, float] = {
    (2000, 350, 1, ""): 5,
    (4000, 1000, 1, ""): 3,
    (8000, 1000, 2, ""): 1,
    (10_000, 0, 0, ""): 1,
}
"""The FGD target workload of the tables: W = 10, the four request shapes above."""


def fgd_workload() -> TargetWorkload:
    return TargetWorkload.from_counts(FGD_COUNTS, coverage=1.0)


def make_policy(name: str, seed: int = 0) -> PlacementPolicy:
    """A fresh policy; FGD gets the table workload, Random a seeded generator."""
    factories: dict[str, Callable[[], PlacementPolicy]] = {
        "random": lambda: RandomPolicy(np.random.default_rng(seed)),
        "dotprod": DotProdPolicy,
        "clustering": ClusteringPolicy,
        "packing": PackingPolicy,
        "bestfit": BestFitPolicy,
        "fgd": lambda: FGDPolicy(fgd_workload()),
    }
    return factories[name]()


def test_main_cluster_is_as_documented() -> None:
    snapshot = main_cluster()
    assert snapshot.gpu_free.tolist() == [
        [1000, 400, 1000, 0, 0, 0, 0, 0],
        [700, 1000, 500, 1000, 1000, 1000, 1000, 1000],
        [1000, 1000, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
    ]
    assert snapshot.cpu_free.tolist() == [24_000, 54_000, 16_000, 90_000]
    assert snapshot.gpu_free_total.tolist() == [2400, 7200, 2000, 0]
    assert snapshot.used_gpu_milli == 600 + 1000 + 300 + 500


# ------------------------------------------------------------------------------------------------
# The deterministic policies: chosen node, chosen GPUs and raw scores
# ------------------------------------------------------------------------------------------------
#
# DotProd, d = (c_n c / 128000^2 + G_n G / 8000^2) / 2, score = trunc(100 (1 - d)):
#   SHARE (c 2000, G 350):  a (24000*2000/128000^2 = .0029297 + 2400*350/8000^2 = .013125)/2
#                           = .0080273 -> 99;  b (.0065918 + .039375)/2 = .0229834 -> 97;
#                           c (.0019531 + .0109375)/2 = .0064453 -> 99          => tie a/c
#   WHOLE (c 4000, G 1000): a (.0058594 + .0375)/2 -> 97; b (.0131836 + .1125)/2 -> 93;
#                           c (.0039063 + .03125)/2 -> 98
#   MULTI (c 8000, G 2000): a (.0117188 + .075)/2 -> 95; b (.0263672 + .225)/2 -> 87;
#                           c (.0078125 + .0625)/2 -> 96
#   CPU (c 10000):          a .0146484/2 -> 99; b .032959/2 -> 98; c .0097656/2 -> 99;
#                           d .0549316/2 -> 97                                     => tie a/c
#
# BestFit, s = .5 (c_n - c)/128000 + .5 (G_n - G)/8000, score = trunc(100 (1 - s)):
#   SHARE: a 22000/256000 + 2050/16000 = .2140625 -> 78; b .203125 + .428125 -> 36;
#          c .0546875 + .103125 -> 84
#   WHOLE: a .078125 + .0875 -> 83; b .1953125 + .3875 -> 41; c .046875 + .0625 -> 89
#   MULTI: a .0625 + .025 -> 91; b .1796875 + .325 -> 49; c .03125 + 0 -> 96
#   CPU:   a .0546875 + .15 -> 79; b .171875 + .45 -> 37; c .0234375 + .125 -> 85; d .3125 -> 68
#   tie cluster, SHARE: t0 14000/256000 + 1650/16000 = .1578125 -> 84;
#          t1 14500/256000 + .103125 = .1597656 -> 84; t2 62000/256000 + .103125 -> 65
#
# Packing (a: ascending free [0, 400, 1000, 1000]; b: [500, 700, 1000 x 6]; c all free):
#   SHARE (350): a takes 400 -> case 1, 100 - (40)//10 = 96; b takes 500 -> 100 - 50//10 = 95;
#                c case 3, max(33 - 2, 2) = 31
#   WHOLE: a and b take one fully free GPU -> case 2, max(50 - 1, 33) = 49; c 31 => tie a/b
#   MULTI: a and b, f = 2 -> 48; c 31                                             => tie a/b
#   MULTI_SHARE (2 x 300): a takes 400 and 1000 -> f = 1 -> 49; b takes 500 and 700 ->
#                100 - (50 + 70)//10 = 88; c 31
#   CPU: 0 everywhere
#
# Clustering, base = 25 (8000 - G_n) // 8000: a 17, b 2, c 18, d 25.
#   SHARE: a runs share among others -> 17 + 50 = 67; b only shares -> 2 + 75 = 77;
#          c no GPU pods -> 18 + 25 = 43
#   WHOLE (class 1-gpu): a 17 + 50 = 67; b only other classes -> 2 + 0 = 2; c 43
#   MULTI (class 2-gpu): a 17 + 0 = 17; b 2; c 43
#   CPU: 0 everywhere
#
# FGD with the workload share (2000, 350) x5, whole (4000, 1000) x3, 2-GPU (8000, 1000) x1,
# CPU-only (10000) x1 (W = 10). Node fragmentation before: a (5*0 + 3*400 + 400 + 2400)/10 = 400,
# b (0 + 3*1200 + 1200 + 7200)/10 = 1200, c 2000/10 = 200, d 0.
#   SHARE on a: GPU 0 -> [650, 400, 1000, 0]: (0 + 3*1050 + 2050 + 2050)/10 = 725, delta -325 -> 41;
#               GPU 1 -> [1000, 50, 1000, 0]: (5*50 + 3*50 + 50 + 2050)/10 = 250, delta 150 -> 53;
#               GPU 2 equals GPU 0.  Node score 53 (GPU 1).
#   SHARE on b: GPU 0 -> 350 free: (0 + 3*850 + 850 + 6850)/10 = 1025, delta 175 -> 54;
#               GPU 1 -> 650 free: (0 + 3*1850 + 1850 + 6850)/10 = 1425, delta -225 -> 44;
#               GPU 2 -> 150 free: (5*150 + 3*850 + 850 + 6850)/10 = 1100, delta 100 -> 52.
#               Node score 54 (GPU 0, not the best-fit GPU 2).
#   SHARE on c: [650, 1000]: (0 + 3*650 + 1650 + 1650)/10 = 525, delta -325 -> 41.
#   WHOLE: a [0, 400, 1000, 0] -> (3*400 + 1400 + 1400)/10 = 400 -> 50;
#          b [700, 0, 500, 1000 x 5] -> (3*1200 + 1200 + 6200)/10 = 1100, delta 100 -> 52;
#          c [0, 1000] -> (0 + 1000 + 1000)/10 = 200 -> 50
#   MULTI: a [0, 400, 0, 0] -> (3*400 + 400 + 400)/10 = 200, delta 200 -> 54;
#          b -> (3*1200 + 1200 + 5200)/10 = 1000, delta 200 -> 54; c -> 0, delta 200 -> 54
#   CPU:   a, b and d unchanged -> 50; c (6000 CPU left, the 2-GPU task no longer fits):
#          (2000 + 2000)/10 = 400, delta -200 -> 45
#   MULTI_SHARE_150 (2 x 150, the two fitting GPUs with the least free):
#          a 400 and 1000 -> [850, 250, 1000, 0]: (5*250 + 3*1100 + 2100 + 2100)/10 = 875,
#            delta -475 -> 38;
#          b 500 and 700 -> [550, 1000, 350, 1000 x 5] (350 still fits the share task):
#            (0 + 3*900 + 900 + 6900)/10 = 1050, delta 150 -> 53;
#          c -> [850, 850]: (0 + 3*1700 + 1700 + 1700)/10 = 850, delta -650 -> 34
#   (sigmoid: s(.15) = .5374, s(.175) = .5436, s(.1) = .5250, s(.2) = .5498, s(-.2) = .4502,
#    s(-.225) = .4440, s(-.325) = .4195, s(-.475) = .3834, s(-.65) = .3430)

SCORE_CASES = [
    # policy, cluster, pod, tie_rank, node, gpus, {node: score} on every feasible node
    pytest.param(
        "dotprod", "main", SHARE, None, 0, (1,), {0: 99, 1: 97, 2: 99}, id="dotprod-share"
    ),
    pytest.param(
        "dotprod", "main", SHARE, RANK, 2, (0,), {0: 99, 1: 97, 2: 99}, id="dotprod-share-rank"
    ),
    pytest.param(
        "dotprod", "main", WHOLE, None, 2, (0,), {0: 97, 1: 93, 2: 98}, id="dotprod-whole"
    ),
    pytest.param(
        "dotprod", "main", MULTI, None, 2, (0, 1), {0: 95, 1: 87, 2: 96}, id="dotprod-multi"
    ),
    pytest.param(
        "dotprod", "main", CPU, None, 0, (), {0: 99, 1: 98, 2: 99, 3: 97}, id="dotprod-cpu"
    ),
    pytest.param(
        "dotprod", "main", CPU, RANK, 2, (), {0: 99, 1: 98, 2: 99, 3: 97}, id="dotprod-cpu-rank"
    ),
    pytest.param(
        "bestfit", "main", SHARE, None, 2, (0,), {0: 78, 1: 36, 2: 84}, id="bestfit-share"
    ),
    pytest.param(
        "bestfit", "main", SHARE_AB, None, 0, (1,), {0: 78, 1: 36}, id="bestfit-share-model"
    ),
    pytest.param(
        "bestfit", "main", WHOLE, None, 2, (0,), {0: 83, 1: 41, 2: 89}, id="bestfit-whole"
    ),
    pytest.param(
        "bestfit", "main", MULTI, None, 2, (0, 1), {0: 91, 1: 49, 2: 96}, id="bestfit-multi"
    ),
    pytest.param(
        "bestfit", "main", CPU, None, 2, (), {0: 79, 1: 37, 2: 85, 3: 68}, id="bestfit-cpu"
    ),
    pytest.param("bestfit", "tie", SHARE, None, 0, (0,), {0: 84, 1: 84, 2: 65}, id="bestfit-tie"),
    pytest.param(
        "bestfit",
        "tie",
        SHARE,
        np.array([2, 1, 0]),
        1,
        (0,),
        {0: 84, 1: 84, 2: 65},
        id="bestfit-tie-rank",
    ),
    pytest.param(
        "packing", "main", SHARE, None, 0, (1,), {0: 96, 1: 95, 2: 31}, id="packing-share"
    ),
    pytest.param(
        "packing", "main", WHOLE, None, 0, (0,), {0: 49, 1: 49, 2: 31}, id="packing-whole"
    ),
    pytest.param(
        "packing", "main", WHOLE, RANK, 1, (1,), {0: 49, 1: 49, 2: 31}, id="packing-whole-rank"
    ),
    pytest.param(
        "packing", "main", MULTI, None, 0, (0, 2), {0: 48, 1: 48, 2: 31}, id="packing-multi"
    ),
    pytest.param(
        "packing", "main", MULTI, RANK, 1, (1, 3), {0: 48, 1: 48, 2: 31}, id="packing-multi-rank"
    ),
    pytest.param(
        "packing",
        "main",
        MULTI_SHARE,
        None,
        1,
        (2, 0),
        {0: 49, 1: 88, 2: 31},
        id="packing-multi-share",
    ),
    pytest.param("packing", "main", CPU, None, 0, (), {0: 0, 1: 0, 2: 0, 3: 0}, id="packing-cpu"),
    pytest.param(
        "packing", "main", CPU, RANK, 1, (), {0: 0, 1: 0, 2: 0, 3: 0}, id="packing-cpu-rank"
    ),
    pytest.param(
        "clustering", "main", SHARE, None, 1, (2,), {0: 67, 1: 77, 2: 43}, id="clustering-share"
    ),
    pytest.param(
        "clustering", "main", WHOLE, None, 0, (0,), {0: 67, 1: 2, 2: 43}, id="clustering-whole"
    ),
    pytest.param(
        "clustering",
        "main",
        WHOLE,
        RANK,
        0,
        (0,),
        {0: 67, 1: 2, 2: 43},
        id="clustering-whole-rank-no-tie",
    ),
    pytest.param(
        "clustering", "main", MULTI, None, 2, (0, 1), {0: 17, 1: 2, 2: 43}, id="clustering-multi"
    ),
    pytest.param(
        "clustering", "main", CPU, None, 0, (), {0: 0, 1: 0, 2: 0, 3: 0}, id="clustering-cpu"
    ),
    pytest.param(
        "clustering", "main", CPU, RANK, 1, (), {0: 0, 1: 0, 2: 0, 3: 0}, id="clustering-cpu-rank"
    ),
    pytest.param("fgd", "main", SHARE, None, 1, (0,), {0: 53, 1: 54, 2: 41}, id="fgd-share"),
    pytest.param("fgd", "main", WHOLE, None, 1, (1,), {0: 50, 1: 52, 2: 50}, id="fgd-whole"),
    pytest.param("fgd", "main", MULTI, None, 0, (0, 2), {0: 54, 1: 54, 2: 54}, id="fgd-multi"),
    pytest.param("fgd", "main", MULTI, RANK, 1, (1, 3), {0: 54, 1: 54, 2: 54}, id="fgd-multi-rank"),
    pytest.param(
        "fgd",
        "main",
        MULTI_SHARE_150,
        None,
        1,
        (2, 0),
        {0: 38, 1: 53, 2: 34},
        id="fgd-multi-share",
    ),
    pytest.param("fgd", "main", CPU, None, 0, (), {0: 50, 1: 50, 2: 45, 3: 50}, id="fgd-cpu"),
    pytest.param("fgd", "main", CPU, RANK, 1, (), {0: 50, 1: 50, 2: 45, 3: 50}, id="fgd-cpu-rank"),
]


@pytest.mark.parametrize(
    ("policy_name", "cluster", "pod", "tie_rank", "node", "gpus", "scores"), SCORE_CASES
)
def test_policy_scores_and_choice(
    policy_name: str,
    cluster: str,
    pod: PodSpec,
    tie_rank: npt.NDArray[np.int64] | None,
    node: int,
    gpus: tuple[int, ...],
    scores: dict[int, int],
) -> None:
    snapshot = CLUSTERS[cluster]()
    mask = filter_nodes(snapshot, pod).mask
    assert np.flatnonzero(mask).tolist() == sorted(scores)

    raw = make_policy(policy_name).score(snapshot, pod, mask)
    assert raw.shape == (snapshot.size,)
    assert {i: raw[i] for i in scores} == scores

    rank = None if tie_rank is None else np.asarray(tie_rank, dtype=np.int64)
    decision = Scheduler(make_policy(policy_name), rank).schedule(snapshot, pod)
    assert isinstance(decision, Bind)
    assert (decision.node, decision.gpus) == (node, gpus)
    assert decision.node_name == snapshot.node_names[node]
    assert decision.score == max(scores.values())
    assert decision.feasible_nodes == len(scores)


@pytest.mark.parametrize("policy_name", list(PUBLISHED))
def test_schedule_does_not_mutate_and_bind_applies(policy_name: str) -> None:
    snapshot = main_cluster()
    before = snapshot.gpu_free.copy(), snapshot.cpu_free.copy(), snapshot.node_gen.copy()
    decision = Scheduler(make_policy(policy_name)).schedule(snapshot, SHARE)
    assert isinstance(decision, Bind)
    np.testing.assert_array_equal(snapshot.gpu_free, before[0])
    np.testing.assert_array_equal(snapshot.cpu_free, before[1])
    np.testing.assert_array_equal(snapshot.node_gen, before[2])
    allocation = apply(snapshot, decision)
    assert allocation is not None
    assert snapshot.allocations[SHARE.name] == allocation
    gpu = decision.gpus[0]
    assert snapshot.gpu_free[decision.node, gpu] == before[0][decision.node, gpu] - 350


@pytest.mark.parametrize("policy_name", list(PUBLISHED))
def test_single_feasible_node_is_taken_without_scoring(policy_name: str) -> None:
    snapshot = main_cluster()
    pod = PodSpec("only-b", 2000, 1000, 1, 350, gpu_models=frozenset({"G2"}))
    decision = Scheduler(make_policy(policy_name)).schedule(snapshot, pod)
    assert isinstance(decision, Bind)
    assert decision.node == 1
    assert decision.score is None
    assert decision.feasible_nodes == 1
    # GPU choice: best fit (GPU 2, 500 free) for the packing baselines, the FGD-scored GPU 0
    # (see the FGD table), and any fitting GPU for Random.
    if policy_name == "fgd":
        assert decision.gpus == (0,)
    elif policy_name == "random":
        assert len(decision.gpus) == 1
        assert snapshot.gpu_free[1, decision.gpus[0]] >= 350
    else:
        assert decision.gpus == (2,)


# ------------------------------------------------------------------------------------------------
# Rejections
# ------------------------------------------------------------------------------------------------


def gpu_memory_cluster() -> ClusterSnapshot:
    return ClusterSnapshot(
        [
            NodeSpec("m0", 32_000, BIG_MEM, 2, "T4", gpu_memory_mib=16_384),
            NodeSpec("m1", 32_000, BIG_MEM, 4, "A10", gpu_memory_mib=24_576),
        ]
    )


def full_pods_cluster() -> ClusterSnapshot:
    snapshot = ClusterSnapshot(
        [
            NodeSpec("p0", 32_000, BIG_MEM, 2, "T4", max_pods=1),
            NodeSpec("p1", 32_000, BIG_MEM, 2, "A10", max_pods=1),
            NodeSpec("p2", 32_000, BIG_MEM, max_pods=5),
        ]
    )
    snapshot.bind(PodSpec("x0", 100, 100), 0)
    snapshot.bind(PodSpec("x1", 100, 100), 1)
    return snapshot


REASON_CPU = "Insufficient cpu"
REASON_MEMORY = "Insufficient memory"
REASON_MODEL = "node(s) had no GPU of an allowed model"
REASON_GPU = "Insufficient gpupool.io/gpu"
REASON_GPU_MEMORY = "Insufficient gpupool.io/gpu-memory"
REASON_PODS = "Too many pods"

REJECT_CASES = [
    pytest.param(
        main_cluster,
        PodSpec("r-model-cpu", 200_000, 1000, 1, 500, gpu_models=frozenset({"A100"})),
        ((REASON_CPU, 4), (REASON_MODEL, 4), (REASON_GPU, 1)),
        id="model-and-cpu",
    ),
    pytest.param(
        main_cluster,
        PodSpec("r-eight", 1000, 1000, 8, 1000),
        ((REASON_GPU, 4), (REASON_MODEL, 1)),
        id="eight-whole-gpus",
    ),
    pytest.param(
        main_cluster, PodSpec("r-mem", 1000, 2 * BIG_MEM), ((REASON_MEMORY, 4),), id="memory"
    ),
    pytest.param(
        gpu_memory_cluster,
        PodSpec("r-gmem", 1000, 1000, 1, 100, gpu_memory_mib=32_768),
        ((REASON_GPU, 2), (REASON_GPU_MEMORY, 2)),
        id="gpu-memory",
    ),
    pytest.param(
        full_pods_cluster,
        PodSpec("r-pods", 1000, 1000, 1, 500),
        ((REASON_PODS, 2), (REASON_GPU, 1), (REASON_MODEL, 1)),
        id="pod-slots",
    ),
]


@pytest.mark.parametrize("policy_name", list(PUBLISHED))
@pytest.mark.parametrize(("cluster", "pod", "reasons"), REJECT_CASES)
def test_pod_that_fits_nowhere_is_rejected(
    policy_name: str,
    cluster: Callable[[], ClusterSnapshot],
    pod: PodSpec,
    reasons: tuple[tuple[str, int], ...],
) -> None:
    snapshot = cluster()
    decision = Scheduler(make_policy(policy_name)).schedule(snapshot, pod)
    assert isinstance(decision, Reject)
    assert decision.pod is pod
    assert decision.reasons == reasons
    prefix = f"0/{snapshot.size} nodes are available:"
    assert decision.message.startswith(prefix)
    body = ", ".join(f"{count} {name}" for name, count in reasons)
    assert decision.message == f"{prefix} {body}."
    assert apply(snapshot, decision) is None


# ------------------------------------------------------------------------------------------------
# Random
# ------------------------------------------------------------------------------------------------

RANDOM_DRAWS = 300


@pytest.mark.parametrize(
    ("pod", "feasible_set", "gpu_sets"),
    [
        pytest.param(SHARE, {0, 1, 2}, {0: {0, 1, 2}, 1: set(range(8)), 2: {0, 1}}, id="share"),
        pytest.param(WHOLE, {0, 1, 2}, {0: {0}, 1: {1}, 2: {0}}, id="whole"),
        pytest.param(MULTI, {0, 1, 2}, {0: {0, 2}, 1: {1, 3}, 2: {0, 1}}, id="multi"),
        pytest.param(CPU, {0, 1, 2, 3}, {0: set(), 1: set(), 2: set(), 3: set()}, id="cpu"),
        pytest.param(SHARE_AB, {0, 1}, {0: {0, 1, 2}, 1: set(range(8))}, id="share-model"),
    ],
)
@pytest.mark.parametrize("tie_rank", [None, RANK], ids=["no-rank", "rank"])
def test_random_picks_every_feasible_node_and_gpu(
    pod: PodSpec,
    feasible_set: set[int],
    gpu_sets: dict[int, set[int]],
    tie_rank: npt.NDArray[np.int64] | None,
    feasible_nodes: Callable[[ClusterSnapshot, PodSpec], list[int]],
) -> None:
    snapshot = main_cluster()
    assert set(feasible_nodes(snapshot, pod)) == feasible_set
    scheduler = Scheduler(RandomPolicy(np.random.default_rng(1234)), tie_rank)
    nodes: Counter[int] = Counter()
    gpus: dict[int, set[int]] = {node: set() for node in feasible_set}
    for _ in range(RANDOM_DRAWS):
        decision = scheduler.schedule(snapshot, pod)
        assert isinstance(decision, Bind)
        assert decision.node in feasible_set
        assert len(decision.gpus) == pod.gpu_count
        for gpu in decision.gpus:
            assert snapshot.gpu_free[decision.node, gpu] >= pod.gpu_milli
        nodes[decision.node] += 1
        gpus[decision.node].update(decision.gpus)
    assert set(nodes) == feasible_set
    # Uniform over the feasible nodes: each gets a fair share of the draws.
    assert min(nodes.values()) > RANDOM_DRAWS / len(feasible_set) / 2
    assert gpus == gpu_sets


def test_random_score_marks_one_feasible_node() -> None:
    snapshot = main_cluster()
    policy = RandomPolicy(np.random.default_rng(5))
    mask = filter_nodes(snapshot, SHARE).mask
    winners = set()
    for _ in range(60):
        scores = policy.score(snapshot, SHARE, mask)
        assert sorted(scores.tolist()) == [0.0, 0.0, 0.0, 100.0]
        winner = int(np.argmax(scores))
        assert mask[winner]
        winners.add(winner)
    assert winners == {0, 1, 2}


def test_random_is_reproducible_per_seed() -> None:
    def run(seed: int) -> list[tuple[int, tuple[int, ...]]]:
        scheduler = Scheduler(RandomPolicy(np.random.default_rng(seed)))
        snapshot = main_cluster()
        out = []
        for _ in range(40):
            decision = scheduler.schedule(snapshot, SHARE)
            assert isinstance(decision, Bind)
            out.append((decision.node, decision.gpus))
        return out

    assert run(11) == run(11)
    assert run(11) != run(12)


# ------------------------------------------------------------------------------------------------
# Packing: the three cases
# ------------------------------------------------------------------------------------------------


def test_packing_case3_prefers_smaller_empty_nodes() -> None:
    snapshot = ClusterSnapshot(
        [
            NodeSpec("g8", 96_000, BIG_MEM, 8, "G2"),
            NodeSpec("g4", 96_000, BIG_MEM, 4, "T4"),
            NodeSpec("g2", 96_000, BIG_MEM, 2, "P100"),
            NodeSpec("g1", 96_000, BIG_MEM, 1, "A10"),
        ]
    )
    # Case 3 looks at GPUs only: CPU taken by a CPU-only pod does not change it.
    snapshot.bind(PodSpec("cpu-only", 50_000, 1000), 0)
    mask = filter_nodes(snapshot, SHARE).mask
    scores = PackingPolicy().score(snapshot, SHARE, mask)
    assert scores.tolist() == [25, 29, 31, 32]  # max(33 - N, N)
    decision = Scheduler(PackingPolicy()).schedule(snapshot, SHARE)
    assert isinstance(decision, Bind)
    assert (decision.node, decision.gpus) == (3, (0,))


@pytest.mark.parametrize(
    ("free", "pod", "expected"),
    [
        # case 1: 100 - (sum of floor(free * 100 / 1000)) // 10, at least 50
        pytest.param([99, 1000], PodSpec("p", 1, 1, 1, 50), 100, id="case1-free-99"),
        pytest.param([100, 1000], PodSpec("p", 1, 1, 1, 50), 99, id="case1-free-100"),
        pytest.param([199, 1000], PodSpec("p", 1, 1, 1, 50), 99, id="case1-free-199"),
        pytest.param([950, 1000], PodSpec("p", 1, 1, 1, 100), 91, id="case1-free-950"),
        pytest.param([950] * 8, PodSpec("p", 1, 1, 8, 100), 50, id="case1-floor-50"),
        pytest.param([300, 450, 1000], PodSpec("p", 1, 1, 2, 250), 93, id="case1-two-gpus"),
        # the floor is per GPU: 19 + 20 = 39 -> 97 (flooring the sum 19.9 + 20.5 would give 96)
        pytest.param([199, 205, 1000], PodSpec("p", 1, 1, 2, 150), 97, id="case1-floor-per-gpu"),
        # case 2: max(50 - f, 33)
        pytest.param([200, 1000, 1000], PodSpec("p", 1, 1, 1, 300), 49, id="case2-f1"),
        pytest.param([200, 1000, 1000], PodSpec("p", 1, 1, 2, 1000), 48, id="case2-f2"),
        pytest.param([0] + [1000] * 7, PodSpec("p", 1, 1, 7, 1000), 43, id="case2-f7"),
        pytest.param([999] + [1000] * 7, PodSpec("p", 1, 1, 7, 1000), 43, id="case2-f7-partial"),
        pytest.param([300, 1000, 1000], PodSpec("p", 1, 1, 2, 300), 49, id="case2-mixed"),
        # case 3: max(33 - N, N)
        pytest.param([1000] * 8, PodSpec("p", 1, 1, 1, 100), 25, id="case3-8"),
        pytest.param([1000] * 3, PodSpec("p", 1, 1, 3, 1000), 30, id="case3-3"),
    ],
)
def test_packing_cases(free: list[int], pod: PodSpec, expected: int) -> None:
    count = len(free)
    snapshot = ClusterSnapshot([NodeSpec("n", 128_000, BIG_MEM, count, "G2")])
    for gpu, value in enumerate(free):
        if value < MILLI_PER_GPU:
            snapshot.bind(PodSpec(f"held-{gpu}", 0, 0, 1, MILLI_PER_GPU - value), 0, (gpu,))
    assert snapshot.gpu_free[0, :count].tolist() == free
    scores = PackingPolicy().score(snapshot, pod, np.ones(1, dtype=np.bool_))
    assert scores.tolist() == [expected]


# ------------------------------------------------------------------------------------------------
# Clustering: classes, bands and base
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(CPU, "", id="cpu"),
        pytest.param(SHARE, "share", id="share"),
        pytest.param(PodSpec("s", 1, 1, 1, 999), "share", id="share-999"),
        pytest.param(WHOLE, "1-gpu", id="whole"),
        pytest.param(MULTI, "2-gpu", id="multi"),
        pytest.param(PodSpec("e", 1, 1, 8, 1000), "8-gpu", id="eight"),
    ],
)
def test_clustering_affinity_class(pod: PodSpec, expected: str) -> None:
    assert affinity_class(pod) == expected


def test_clustering_bands_follow_bindings() -> None:
    snapshot = ClusterSnapshot(
        [
            NodeSpec("e0", 96_000, BIG_MEM, 8, "G2"),
            NodeSpec("e1", 96_000, BIG_MEM, 8, "G2"),
            NodeSpec("e2", 96_000, BIG_MEM, 8, "G2"),
            NodeSpec("e3", 96_000, BIG_MEM, 8, "G2"),
        ]
    )
    policy = ClusteringPolicy()
    mask = np.ones(4, dtype=np.bool_)
    # Everything empty: base 25 (8000 - 8000) // 8000 = 0, band 25 (no GPU pods).
    assert policy.score(snapshot, MULTI, mask).tolist() == [25, 25, 25, 25]
    snapshot.bind(PodSpec("m1", 1, 1, 2, 1000), 0, (0, 1))  # e0: {2-gpu}, G 6000
    snapshot.bind(PodSpec("m2", 1, 1, 2, 1000), 1, (0, 1))  # e1: {2-gpu, share}, G 5500
    snapshot.bind(PodSpec("s1", 1, 1, 1, 500), 1, (2,))
    snapshot.bind(PodSpec("s2", 1, 1, 1, 500), 2, (0,))  # e2: {share}, G 7500
    snapshot.bind(PodSpec("c1", 1000, 1), 3)  # e3: CPU-only pod, no GPU class, G 8000
    # base: e0 25*2000//8000 = 6, e1 25*2500//8000 = 7, e2 25*500//8000 = 1, e3 0
    assert policy.score(snapshot, MULTI, mask).tolist() == [6 + 75, 7 + 50, 1 + 0, 0 + 25]
    assert policy.score(snapshot, SHARE, mask).tolist() == [6 + 0, 7 + 50, 1 + 75, 0 + 25]
    assert policy.score(snapshot, WHOLE, mask).tolist() == [6, 7, 1, 25]
    assert policy.score(snapshot, CPU, mask).tolist() == [0, 0, 0, 0]
    # Releasing the share on e1 leaves only 2-gpu pods there.
    snapshot.release("s1")
    assert policy.score(snapshot, MULTI, mask).tolist() == [6 + 75, 6 + 75, 1, 25]
    # A full node: base 25, this class only -> 100.
    for gpu in range(2, 8, 2):
        snapshot.bind(PodSpec(f"f{gpu}", 1, 1, 2, 1000), 0, (gpu, gpu + 1))
    assert policy.score(snapshot, MULTI, mask)[0] == 100


def test_clustering_reused_on_a_second_snapshot_scores_that_snapshot() -> None:
    nodes = [NodeSpec("a", 64_000, BIG_MEM, 2, "A"), NodeSpec("b", 64_000, BIG_MEM, 2, "A")]
    mask = np.ones(2, dtype=np.bool_)
    policy = ClusteringPolicy()
    first = ClusterSnapshot(nodes)
    first.bind(PodSpec("x", 1, 1, 1, 500), 0, (0,))
    # Node a of the first snapshot runs one share: base 25 * 6500 // 8000 = 20, band 75.
    assert policy.score(first, SHARE, mask).tolist() == [20 + 75, 18 + 25]
    second = ClusterSnapshot(nodes)
    second.bind(PodSpec("y", 1, 1, 2, 1000), 0, (0, 1))
    # Node a of the second snapshot runs a 2-gpu pod only: base 25 + band 0.
    assert policy.score(second, SHARE, mask).tolist() == [25 + 0, 18 + 25]


# ------------------------------------------------------------------------------------------------
# FGD: fragmentation against a plain-Python reference (section 3.6)
# ------------------------------------------------------------------------------------------------


def reference_fragmentation_scaled(
    gpu_free: list[int], cpu_free: int, model: str, shapes: list[Shape]
) -> int:
    """``W * F_n(M)`` of one node, with plain loops (integer weights keep it exact).

    Args:
        gpu_free: Free milli of each existing GPU of the node.
        cpu_free: Free milli-CPU of the node.
        model: The node's GPU model ("" for a CPU-only node).
        shapes: The typical tasks.
    """
    total_free = sum(gpu_free)
    frag = 0
    for cpu, milli, count, models, weight in shapes:
        if milli == 0:
            amount = total_free  # CPU-only task: all idle GPU is fragment
        elif not gpu_free or (models and model not in models):
            amount = total_free  # no access
        else:
            fitting = 0
            for free in gpu_free:
                if free >= milli:
                    fitting += 1
            if fitting >= count and cpu_free >= cpu:
                amount = 0  # Q3: only the GPUs too small for the task are fragment
                for free in gpu_free:
                    if free < milli:
                        amount += free
            else:
                amount = total_free  # Q1, Q2 and Q4
        frag += weight * amount
    return frag


def workload_shapes(workload: TargetWorkload) -> list[Shape]:
    return [
        (
            int(workload.cpu_milli[m]),
            int(workload.gpu_milli[m]),
            int(workload.gpu_count[m]),
            workload.gpu_models[m],
            int(workload.weight[m]),
        )
        for m in range(workload.size)
    ]


def reference_node_fragmentation(
    snapshot: ClusterSnapshot, node: int, shapes: list[Shape]
) -> float:
    spec = snapshot.nodes[node]
    free = [int(g) for g in snapshot.gpu_free[node, : spec.gpu_count]]
    total_weight = sum(shape[4] for shape in shapes)
    scaled = reference_fragmentation_scaled(
        free, int(snapshot.cpu_free[node]), spec.gpu_model, shapes
    )
    return scaled / total_weight


def reference_fgd(
    snapshot: ClusterSnapshot, pod: PodSpec, node: int, shapes: list[Shape]
) -> tuple[int, tuple[int, ...]]:
    """FGD's score and GPUs for ``pod`` on ``node``, following section 3.6 step by step."""
    spec = snapshot.nodes[node]
    free = [int(g) for g in snapshot.gpu_free[node, : spec.gpu_count]]
    cpu = int(snapshot.cpu_free[node])
    total_weight = sum(shape[4] for shape in shapes)
    before = reference_fragmentation_scaled(free, cpu, spec.gpu_model, shapes)

    def score(after_free: list[int]) -> int:
        after = reference_fragmentation_scaled(
            after_free, cpu - pod.cpu_milli, spec.gpu_model, shapes
        )
        delta = (before - after) / total_weight
        return math.trunc(100.0 / (1.0 + math.exp(-delta / 1000.0)))

    eligible = [
        i
        for i in range(spec.gpu_count)
        if free[i] >= pod.gpu_milli
        and (not pod.gpu_memory_mib or snapshot.gpu_memory_free[node, i] >= pod.gpu_memory_mib)
    ]
    if pod.gpu_count == 1 and pod.gpu_milli < MILLI_PER_GPU:
        best, chosen = -1, -1
        for i in eligible:
            after = list(free)
            after[i] -= pod.gpu_milli
            value = score(after)
            if value > best:
                best, chosen = value, i
        return best, (chosen,)
    taken = sorted(eligible, key=lambda i: free[i])[: pod.gpu_count]
    after = list(free)
    for i in taken:
        after[i] -= pod.gpu_milli
    return score(after), tuple(taken)


def test_reference_fragmentation_matches_hand_values() -> None:
    snapshot = main_cluster()
    shapes = workload_shapes(fgd_workload())
    assert [reference_node_fragmentation(snapshot, n, shapes) for n in range(4)] == [
        400,
        1200,
        200,
        0,
    ]
    index = FragmentationIndex(snapshot, fgd_workload())
    assert index.node_fragmentation(snapshot).tolist() == [400, 1200, 200, 0]


def test_fragmentation_with_model_constraints_by_hand() -> None:
    snapshot = main_cluster()
    workload = TargetWorkload.from_counts(
        {(2000, 350, 1, "G2"): 1, (4000, 1000, 1, "T4|V100"): 1, (90_000, 500, 1, ""): 2},
        coverage=1.0,
    )
    # a: G2 task no access (2400), T4|V100 whole fits (400), 90000-CPU task CPU short (2400)
    #    -> (2400 + 400 + 2*2400)/4 = 1900
    # b: G2 share fits (0), no access for T4|V100 (7200), CPU short (7200) -> 21600/4 = 5400
    # c: no access (2000), whole fits on T4 (0), CPU short (2000) -> 6000/4 = 1500
    # d: no GPUs -> 0
    index = FragmentationIndex(snapshot, workload)
    assert index.node_fragmentation(snapshot).tolist() == [1900, 5400, 1500, 0]
    shapes = workload_shapes(workload)
    assert [reference_node_fragmentation(snapshot, n, shapes) for n in range(4)] == [
        1900,
        5400,
        1500,
        0,
    ]


MODELS = ("A", "B", "C")


def random_state(
    rng: np.random.Generator,
) -> tuple[ClusterSnapshot, TargetWorkload, list[PodSpec]]:
    """A random cluster with random pods bound on random GPUs, and a random target workload."""
    nodes = []
    for i in range(int(rng.integers(2, 6))):
        gpus = int(rng.choice([0, 1, 2, 4, 8]))
        model = str(rng.choice(MODELS)) if gpus else ""
        nodes.append(
            NodeSpec(f"n{i}", int(rng.choice([8000, 32_000, 96_000])), BIG_MEM, gpus, model)
        )
    snapshot = ClusterSnapshot(nodes)
    pods = []
    for j in range(int(rng.integers(0, 25))):
        node = int(rng.integers(snapshot.size))
        count = int(snapshot.gpu_count[node])
        cpu = int(rng.choice([0, 1000, 4000, 12_000]))
        if count == 0 or rng.random() < 0.2:
            pod = PodSpec(f"held{j}", cpu, 10)
            gpus: tuple[int, ...] = ()
        else:
            k = int(rng.choice([1, 1, 1, 2]))
            milli = 1000 if rng.random() < 0.3 else int(rng.integers(50, 1000))
            pod = PodSpec(f"held{j}", cpu, 10, min(k, count), milli)
            options = np.flatnonzero(snapshot.gpu_free[node, :count] >= milli)
            if options.size < pod.gpu_count:
                continue
            gpus = tuple(int(g) for g in rng.choice(options, pod.gpu_count, replace=False))
        if snapshot.cpu_free[node] < cpu:
            continue
        snapshot.bind(pod, node, gpus)
        pods.append(pod)
    counts: dict[ShapeKey, float] = {}
    for _ in range(int(rng.integers(1, 7))):
        kind = rng.random()
        cpu = int(rng.choice([1000, 8000, 30_000]))
        models = "|".join(sorted(rng.choice(MODELS, int(rng.integers(1, 3)), replace=False)))
        models = models if rng.random() < 0.4 else ""
        if kind < 0.2:
            key: ShapeKey = (cpu, 0, 0, "")
        elif kind < 0.6:
            key = (cpu, int(rng.choice([100, 250, 500, 810])), 1, models)
        else:
            key = (cpu, 1000, int(rng.choice([1, 2, 4])), models)
        counts[key] = counts.get(key, 0) + int(rng.integers(1, 6))
    return snapshot, TargetWorkload.from_counts(counts, coverage=1.0), pods


@pytest.mark.parametrize("seed", range(25))
def test_fragmentation_index_matches_reference_on_random_states(seed: int) -> None:
    rng = np.random.default_rng(seed)
    snapshot, workload, _ = random_state(rng)
    shapes = workload_shapes(workload)
    index = FragmentationIndex(snapshot, workload)
    expected = [reference_node_fragmentation(snapshot, n, shapes) for n in range(snapshot.size)]
    np.testing.assert_allclose(index.node_fragmentation(snapshot), expected, rtol=0, atol=1e-9)
    # The index refreshes only changed nodes: change some and compare again.
    for j in range(5):
        node = int(rng.integers(snapshot.size))
        options = np.flatnonzero(snapshot.gpu_free[node] >= 100)
        if options.size and snapshot.cpu_free[node] >= 500:
            snapshot.bind(PodSpec(f"extra{j}", 500, 1, 1, 100), node, (int(options[0]),))
    expected = [reference_node_fragmentation(snapshot, n, shapes) for n in range(snapshot.size)]
    np.testing.assert_allclose(index.node_fragmentation(snapshot), expected, rtol=0, atol=1e-9)


FGD_PROBES = [
    PodSpec("probe-share", 1000, 1, 1, 250),
    PodSpec("probe-share-big", 4000, 1, 1, 810),
    PodSpec("probe-share-model", 1000, 1, 1, 500, gpu_models=frozenset({"A", "B"})),
    PodSpec("probe-whole", 8000, 1, 1, 1000),
    PodSpec("probe-multi", 4000, 1, 2, 1000),
    PodSpec("probe-multi-share", 1000, 1, 2, 400),
    PodSpec("probe-cpu", 20_000, 1),
]


@pytest.mark.parametrize("seed", range(25))
def test_fgd_scores_match_reference_on_random_states(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    snapshot, workload, _ = random_state(rng)
    shapes = workload_shapes(workload)
    for pod in FGD_PROBES:
        mask = filter_nodes(snapshot, pod).mask
        feasible = np.flatnonzero(mask)
        if feasible.size == 0:
            continue
        policy = FGDPolicy(workload)
        scores = policy.score(snapshot, pod, mask)
        for node in feasible:
            expected_score, expected_gpus = reference_fgd(snapshot, pod, int(node), shapes)
            assert scores[node] == expected_score, (pod.name, int(node))
            assert policy.select_gpus(snapshot, pod, int(node)) == expected_gpus, pod.name
        decision = Scheduler(FGDPolicy(workload)).schedule(snapshot, pod)
        assert isinstance(decision, Bind)
        if feasible.size > 1:
            best = max(reference_fgd(snapshot, pod, int(n), shapes)[0] for n in feasible)
            first = next(
                int(n) for n in feasible if reference_fgd(snapshot, pod, int(n), shapes)[0] == best
            )
            assert decision.node == first
            assert decision.score == best


def test_fgd_delta_is_the_placed_share_when_no_task_can_fit() -> None:
    snapshot = main_cluster()
    workload = TargetWorkload.from_counts({(100, 1000, 8, ""): 1}, coverage=1.0)
    # No node can ever host an 8-GPU task: F = G before and after, so delta equals G_tau.
    policy = FGDPolicy(workload)
    pod = PodSpec("tiny", 100, 1, 1, 100)
    scores = policy.score(snapshot, pod, filter_nodes(snapshot, pod).mask)
    # delta = F_before - F_after = G_tau = 100 -> trunc(100 * sigmoid(0.1)) = 52
    assert scores[:3].tolist() == [52, 52, 52]
    cpu_pod = PodSpec("cpu-small", 100, 1)
    scores = policy.score(snapshot, cpu_pod, filter_nodes(snapshot, cpu_pod).mask)
    assert scores.tolist() == [50, 50, 50, 50]


# ------------------------------------------------------------------------------------------------
# The target workload and the registry
# ------------------------------------------------------------------------------------------------


def test_shape_key_counts_zero_cpu_as_100m() -> None:
    pod = PodSpec("z", 0, 10, 1, 500, gpu_models=frozenset({"T4", "G2"}))
    assert shape_key(pod) == (100, 500, 1, "G2|T4")


def test_workload_keeps_most_common_shapes_up_to_coverage() -> None:
    counts: dict[ShapeKey, float] = {
        (1000, 500, 1, ""): 50,
        (2000, 1000, 1, ""): 30,
        (3000, 0, 0, ""): 15,
        (4000, 1000, 2, "T4"): 4,
        (5000, 1000, 8, ""): 1,
    }
    workload = TargetWorkload.from_counts(counts)  # 95%: 50 + 30 + 15 = 95 reaches it
    assert workload.cpu_milli.tolist() == [1000, 2000, 3000]
    assert workload.weight.tolist() == [50, 30, 15]
    assert workload.total_weight == 95
    everything = TargetWorkload.from_counts(counts, coverage=1.0)
    assert everything.gpu_count.tolist() == [1, 1, 0, 2, 8]
    assert everything.gpu_models[3] == frozenset({"T4"})
    assert everything.gpu_models[0] == frozenset()
    # Equal counts: the larger key first.
    tied = TargetWorkload.from_counts({(1000, 0, 0, ""): 1, (2000, 0, 0, ""): 1}, coverage=0.5)
    assert tied.cpu_milli.tolist() == [2000]


def test_workload_from_pods_counts_each_pod_once() -> None:
    pods = [PodSpec(f"s{i}", 2000, 1, 1, 350) for i in range(3)] + [WHOLE, CPU]
    workload = TargetWorkload.from_pods(pods, coverage=1.0)
    assert workload.weight.tolist() == [3, 1, 1]
    # Equal counts sort by key, descending: (10000, 0, 0) before (4000, 1000, 1).
    assert workload.gpu_milli.tolist() == [350, 0, 1000]


@pytest.mark.parametrize(
    ("counts", "coverage"),
    [
        pytest.param({}, 0.95, id="empty"),
        pytest.param({(1, 1, 1, ""): 1}, 0.0, id="zero-coverage"),
        pytest.param({(1, 1, 1, ""): 1}, 1.5, id="coverage-above-one"),
    ],
)
def test_workload_rejects_bad_input(counts: dict[ShapeKey, float], coverage: float) -> None:
    with pytest.raises(ValueError, match=r"workload|coverage"):
        TargetWorkload.from_counts(counts, coverage)


@pytest.mark.parametrize("name", policy_names())
def test_registry_builds_every_policy(name: str) -> None:
    policy = build_policy(name, PolicyContext(np.random.default_rng(0), [SHARE, WHOLE, CPU]))
    assert policy.name == name
    decision = Scheduler(policy).schedule(main_cluster(), SHARE)
    assert isinstance(decision, Bind)


def test_registry_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match=r"unknown policy 'tetris'.*random.*fgd.*default"):
        build_policy("tetris", PolicyContext(np.random.default_rng(0), [SHARE]))
