"""Pools: membership, ambiguous and unselected nodes, routing, density and overcommit, MIG."""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.core.model import PodSpec
from gpupool.core.snapshot import AllocationError, ClusterSnapshot
from gpupool.policy.pools import NO_POOL, PoolLayout
from gpupool.policy.spec import (
    DEFAULT_MAX_PODS_PER_GPU,
    MODEL_LABEL,
    PolicyConfig,
    PoolMode,
    PoolSpec,
)
from gpupool.scheduling.decisions import Admit, Wait

from .builders import Cluster, mig, node, share, whole, work

EXCLUSIVE = PoolSpec("train", PoolMode.EXCLUSIVE, node_selector=(("group", "x"),))
SHARED = PoolSpec("dev", PoolMode.SHARED, node_selector=(("group", "s"),), max_pods_per_gpu=2)
MIG_POOL = PoolSpec("slices", PoolMode.MIG, node_selector=(("group", "m"),))
NODES = [
    node("x0", group="x"),
    node("s0", group="s"),
    node("m0", group="m", mig=(("1g.10gb", 2), ("3g.40gb", 1))),
    node("free"),
]


def test_membership_and_the_default_pool() -> None:
    layout = PoolLayout.build((EXCLUSIVE, SHARED, MIG_POOL), NODES)
    assert [pool.name for pool in layout.pools] == ["train", "dev", "slices", "default"]
    assert layout.node_pool.tolist() == [0, 1, 2, 3]
    # the MIG pool's node also offers 2 x 1g (143 each) and 1 x 3g (429): its real capacity
    assert layout.capacity.tolist() == [4000, 4000, 4715, 4000]
    assert layout.conflicts == ()
    assert layout.pods_per_gpu.tolist() == [1, 2, 1, DEFAULT_MAX_PODS_PER_GPU]


def test_a_node_two_pools_select_belongs_to_neither() -> None:
    both = PoolSpec("any-a100", PoolMode.SHARED, node_selector=((MODEL_LABEL, "A100"),))
    layout = PoolLayout.build((EXCLUSIVE, both), [node("x0", group="x"), node("h", model="H100")])
    assert layout.node_pool.tolist() == [NO_POOL, 2]  # x0 is A100 in group x; h matches neither
    assert layout.conflicts == (("x0", ("train", "any-a100")),)
    assert layout.pods_per_gpu.tolist() == [0, DEFAULT_MAX_PODS_PER_GPU]
    assert not any(mask[0] for mask in layout.masks)
    cluster = Cluster(
        [node("x0", group="x"), node("h", model="H100")], PolicyConfig((EXCLUSIVE, both))
    )
    (decision,) = cluster.cycle([work(whole("w"), pool="train")]).decisions
    assert isinstance(decision, Wait)
    assert decision.reason == (
        "pool train has no nodes: x0 selected by more than one pool, so by none"
    )


def test_no_pools_means_one_default_pool_over_every_node() -> None:
    cluster = Cluster(NODES, PolicyConfig())
    assert [pool.name for pool in cluster.policy.layout.pools] == ["default"]
    assert cluster.policy.layout.node_checks(0) == ()  # no mask: as fast as before
    # the agent advertises DEFAULT_MAX_PODS_PER_GPU devices per GPU there: no more pods fit
    assert (cluster.snapshot.gpu_pods_capacity[cluster.snapshot.gpu_exists] == 4).all()


def test_the_trace_protocol_alone_has_no_pod_limit_per_gpu() -> None:
    cluster = Cluster(NODES, PolicyConfig(default_pool_max_pods_per_gpu=None))
    assert not cluster.snapshot.sharing_limited  # nothing configured: the protocol's fast path


@pytest.mark.parametrize(
    ("pod", "workload_class", "asked", "expected"),
    [
        pytest.param(whole("w"), "", "", ["train", "default"], id="whole-to-exclusive"),
        pytest.param(share("s"), "", "", ["dev", "default"], id="share-to-shared"),
        pytest.param(mig("m"), "", "", ["slices", "default"], id="mig-to-mig"),
        pytest.param(PodSpec("c", 100, 1), "training", "", ["train", "dev", "slices", "default"],
                     id="cpu-training-prefers-exclusive"),
        pytest.param(PodSpec("c", 100, 1), "dev", "", ["dev", "train", "slices", "default"],
                     id="cpu-dev-prefers-shared"),
        pytest.param(whole("w"), "", "dev", "pool dev (Shared) does not take whole requests",
                     id="asked-pool-refuses-kind"),
        pytest.param(share("s"), "", "nope", "pool nope does not exist", id="unknown-pool"),
        pytest.param(share("s"), "", "dev", ["dev"], id="asked-pool"),
    ],
)  # fmt: skip
def test_routing(pod: PodSpec, workload_class: str, asked: str, expected: object) -> None:
    layout = PoolLayout.build((EXCLUSIVE, SHARED, MIG_POOL), NODES)
    routes = layout.route(work(pod, workload_class=workload_class, pool=asked), "q")
    if isinstance(routes, str):
        assert routes == expected
    else:
        assert [layout.pools[p].name for p in routes] == expected


def test_allowed_classes_and_queues() -> None:
    picky = PoolSpec("picky", PoolMode.SHARED, allowed_classes=frozenset({"inference"}),
                     allowed_queues=frozenset({"serving"}))  # fmt: skip
    layout = PoolLayout.build((picky,), [node("n")])
    assert layout.route(work(share("s"), workload_class="inference"), "serving") == (0,)
    assert "no pool admits a share request of class dev" in str(
        layout.route(work(share("s"), workload_class="dev"), "serving")
    )
    assert "from queue research" in str(
        layout.route(work(share("s"), workload_class="inference"), "research")
    )


def test_density_limit_is_enforced_at_placement_and_in_bind() -> None:
    cluster = Cluster([node("s0", gpus=1, group="s")], PolicyConfig((SHARED,)))
    pods = [work(share(f"s{i}", 100), created_at=i) for i in range(3)]
    decisions = cluster.run(pods).decisions
    assert [type(d).__name__ for d in decisions] == ["Admit", "Admit", "Wait"]
    assert cluster.snapshot.gpu_pods_free[0, 0] == 0
    with pytest.raises(AllocationError, match="no pod slot left"):
        cluster.snapshot.bind(share("extra", 100), 0, (0,))


def test_overcommit_hands_out_more_than_the_device_and_whole_gpus_stay_exclusive() -> None:
    over = PoolSpec("o", PoolMode.SHARED, max_pods_per_gpu=8, compute_overcommit=1.5,
                    memory_overcommit=2.0)  # fmt: skip
    snapshot = ClusterSnapshot([node("n", gpus=1, memory=16_384)])
    PoolLayout.build((over,), snapshot.nodes).apply_sharing(snapshot)
    assert snapshot.gpu_free[0, 0] == 1500
    assert snapshot.gpu_memory_capacity[0, 0] == 32_768
    for i in range(3):
        snapshot.bind(share(f"s{i}", 500, 10_000), 0, (0,))
    assert snapshot.gpu_free[0, 0] == 0
    with pytest.raises(AllocationError, match="compute"):
        snapshot.bind(share("s3", 1), 0, (0,))
    for i in range(3):
        snapshot.release(f"s{i}")
    snapshot.bind(share("half", 500), 0, (0,))
    with pytest.raises(AllocationError, match="compute"):
        snapshot.bind(whole("w"), 0, (0,))  # 1000 milli free, but a whole GPU needs all 1500
    snapshot.release("half")
    snapshot.bind(whole("w"), 0, (0,))
    assert (snapshot.gpu_free[0, 0], snapshot.gpu_memory_free[0, 0]) == (0, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"compute_overcommit": 4.5}, "compute overcommit"),
     ({"memory_overcommit": 0.5}, "memory overcommit"),
     ({"max_pods_per_gpu": 0}, "max_pods_per_gpu")],
)  # fmt: skip
def test_sharing_limits_are_capped(kwargs: dict[str, float], message: str) -> None:
    snapshot = ClusterSnapshot([node("n")])
    with pytest.raises(AllocationError, match=message):
        snapshot.configure_gpu_sharing(0, **kwargs)  # type: ignore[arg-type]


def test_sharing_cannot_change_under_running_pods() -> None:
    snapshot = ClusterSnapshot([node("n")])
    snapshot.bind(share("s"), 0, (0,))
    with pytest.raises(AllocationError, match="while pods run"):
        snapshot.configure_gpu_sharing(0, 4)


def test_a_mig_pod_gets_a_slice_of_its_profile_recorded_in_the_allocation() -> None:
    cluster = Cluster(NODES, PolicyConfig((EXCLUSIVE, SHARED, MIG_POOL)))
    decisions = cluster.run([work(mig("m1", "3g.40gb")), work(mig("m2", "3g.40gb"), created_at=1)])
    first, second = decisions.decisions
    assert isinstance(first, Admit)
    assert (first.bind.node_name, first.units) == ("m0", 429)
    assert cluster.snapshot.allocations["m1"].pod.mig_profile == "3g.40gb"
    column = cluster.snapshot.mig_profiles.index("3g.40gb")
    assert cluster.snapshot.mig_free[2, column] == 0
    assert isinstance(second, Wait)
    assert "Insufficient MIG slices 3g.40gb" in second.reason


def test_exclusive_pool_keeps_shares_off_its_nodes() -> None:
    cluster = Cluster(NODES[:2], PolicyConfig((EXCLUSIVE, SHARED)))
    pods = [work(share(f"s{i}", 500), created_at=i) for i in range(4)]
    placed = [d for d in cluster.run(pods).decisions if isinstance(d, Admit)]
    assert {d.bind.node_name for d in placed} == {"s0"}
    assert np.all(cluster.snapshot.gpu_free[0] == 1000)
