"""Property tests: whatever a policy decides, the snapshot's invariants hold.

Random small clusters get random pod streams scheduled one pod at a time by each published
policy; after every step the snapshot is recomputed from its allocations and compared. Binding,
releasing and the reversible what-if of ``simulate_removal`` are checked the same way.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from gpupool.core.decisions import Bind, Reject
from gpupool.core.framework import Scheduler
from gpupool.core.model import MILLI_PER_GPU, HostPort, NodeSpec, PodSpec, RequestKind
from gpupool.core.snapshot import MAX_OVERCOMMIT, Allocation, AllocationError, ClusterSnapshot
from gpupool.scheduling.registry import PUBLISHED, PolicyContext, build_policy

MODELS = ("A", "B", "C")
PROFILES = ("1g.10gb", "3g.40gb")
ARRAYS = (
    "cpu_free",
    "memory_free",
    "pods_free",
    "gpu_free",
    "gpu_free_total",
    "gpu_memory_free",
    "gpu_pods_free",
    "mig_free",
    "extra_free",
)
EXTRAS = ("example.com/rdma", "hugepages-2Mi", "vendor.io/never-offered")
PORTS = (
    HostPort(80),
    HostPort(80, "UDP"),
    HostPort(80, host_ip="10.0.0.1"),
    HostPort(80, host_ip="10.0.0.2"),
    HostPort(443),
)

FeasibleNodes = Callable[[ClusterSnapshot, PodSpec], list[int]]
ExtrasFit = Callable[[ClusterSnapshot, PodSpec, int], bool]


# ------------------------------------------------------------------------------------------------
# Strategies
# ------------------------------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeSpec]:
    """1 to 6 nodes with 0 to 8 GPUs of a few models, some with GPU memory and MIG slices."""
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.integers(0, 8))
        profiles = draw(st.lists(st.sampled_from(PROFILES), unique=True, max_size=2))
        nodes.append(
            NodeSpec(
                name=f"n{i}",
                cpu_milli=draw(st.sampled_from([4000, 16_000, 64_000])),
                memory_mib=draw(st.sampled_from([8192, 65_536])),
                gpu_count=gpus,
                gpu_model=draw(st.sampled_from(MODELS)) if gpus else "",
                gpu_memory_mib=draw(st.sampled_from([0, 16_384, 32_768])) if gpus else 0,
                max_pods=draw(st.integers(1, 12)),
                mig_slices=tuple((p, draw(st.integers(0, 2))) for p in profiles),
                extra_resources=tuple(
                    (name, draw(st.integers(0, 3)))
                    for name in draw(st.lists(st.sampled_from(EXTRAS[:2]), unique=True))
                ),
            )
        )
    return nodes


@st.composite
def extras_and_ports(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly nothing; else some extra resources (one no node offers) and host ports."""
    if draw(st.integers(0, 2)):
        return {}
    names = draw(st.lists(st.sampled_from(EXTRAS), unique=True, max_size=2))
    return {
        "extra_resources": tuple((name, draw(st.integers(1, 2))) for name in names),
        "host_ports": tuple(draw(st.lists(st.sampled_from(PORTS), unique=True, max_size=2))),
    }


@st.composite
def pods(draw: st.DrawFn, name: str) -> PodSpec:
    """A CPU-only pod, a share, whole GPUs or a MIG slice, with optional constraints."""
    kind = draw(st.sampled_from(["cpu", "share", "share", "whole", "whole", "mig"]))
    cpu = draw(st.sampled_from([0, 500, 2000, 8000, 20_000]))
    memory = draw(st.sampled_from([0, 1024, 4096, 30_000]))
    models = draw(st.frozensets(st.sampled_from((*MODELS, "Z")), max_size=2))
    gpu_memory = draw(st.sampled_from([0, 0, 4096, 20_000]))
    more = draw(extras_and_ports())
    if kind == "cpu":
        return PodSpec(name, cpu, memory, **more)
    if kind == "mig":
        profile = draw(st.sampled_from((*PROFILES, "7g")))
        return PodSpec(name, cpu, memory, mig_profile=profile, **more)
    if kind == "share":
        count = draw(st.sampled_from([1, 1, 1, 2]))
        milli = draw(st.integers(50, 999))
    else:
        count = draw(st.sampled_from([1, 2, 4, 8]))
        milli = MILLI_PER_GPU
    return PodSpec(name, cpu, memory, count, milli, gpu_memory, models, **more)


@st.composite
def pod_streams(draw: st.DrawFn, max_size: int = 24) -> list[PodSpec]:
    size = draw(st.integers(1, max_size))
    return [draw(pods(f"p{i}")) for i in range(size)]


# ------------------------------------------------------------------------------------------------
# Invariants, recomputed from the allocations
# ------------------------------------------------------------------------------------------------


def check_invariants(snapshot: ClusterSnapshot, models: bool = True) -> None:
    """Every array of the snapshot agrees with its allocations and stays within capacity.

    Args:
        snapshot: The snapshot to check.
        models: Also check that every GPU pod runs on an allowed GPU model. The filter enforces
            that, not :meth:`ClusterSnapshot.bind`, so it is checked only for scheduled pods.
    """
    exists = snapshot.gpu_exists
    free = snapshot.gpu_free
    capacity = snapshot.gpu_milli_capacity
    assert np.all(free[exists] >= 0)
    assert np.all(free[exists] <= capacity[exists])
    assert np.all(capacity[exists] <= MAX_OVERCOMMIT * MILLI_PER_GPU)
    assert np.all(free[~exists] == 0)

    n = snapshot.size
    milli = np.zeros_like(free)
    gpu_memory = np.zeros_like(free)
    cpu = np.zeros(n, dtype=np.int64)
    memory = np.zeros(n, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    mig = np.zeros_like(snapshot.mig_free)
    extra = np.zeros_like(snapshot.extra_free)
    ports: list[list[tuple[str, HostPort]]] = [[] for _ in range(n)]
    gpu_pods = np.zeros_like(free)
    holders: defaultdict[tuple[int, int], list[str]] = defaultdict(list)
    for name, allocation in snapshot.allocations.items():
        pod, node = allocation.pod, allocation.node
        assert pod.name == name
        assert name in snapshot.pods_on_node[node]
        spec = snapshot.nodes[node]
        cpu[node] += pod.cpu_milli
        memory[node] += pod.memory_mib
        count[node] += 1
        assert len(allocation.gpus) == pod.gpu_count
        assert len(set(allocation.gpus)) == len(allocation.gpus)
        for gpu in allocation.gpus:
            assert 0 <= gpu < spec.gpu_count
            # A whole GPU takes all of its (possibly overcommitted) compute.
            whole = pod.kind is RequestKind.WHOLE
            milli[node, gpu] += capacity[node, gpu] if whole else pod.gpu_milli
            gpu_pods[node, gpu] += 1
            # A whole GPU is exclusive: it holds all of the device's memory.
            gpu_memory[node, gpu] += (
                snapshot.gpu_memory_capacity[node, gpu]
                if pod.kind is RequestKind.WHOLE
                else pod.gpu_memory_mib
            )
            holders[(node, gpu)].append(name)
        if pod.kind is RequestKind.MIG:
            mig[node, snapshot.mig_profiles.index(pod.mig_profile)] += 1
        for resource, amount in pod.extra_resources:
            extra[node, snapshot.extras.names.index(resource)] += amount
        ports[node].extend((name, port) for port in pod.host_ports)
        if pod.kind in (RequestKind.WHOLE, RequestKind.SHARE):
            assert spec.gpu_count > 0
            assert not models or not pod.gpu_models or spec.gpu_model in pod.gpu_models
    for allocation in snapshot.allocations.values():
        if allocation.pod.kind is RequestKind.WHOLE:
            for gpu in allocation.gpus:
                assert holders[(allocation.node, gpu)] == [allocation.pod.name]

    np.testing.assert_array_equal(milli[exists], capacity[exists] - free[exists])
    assert np.all(milli[~exists] == 0)
    np.testing.assert_array_equal(snapshot.gpu_free_total, free.sum(axis=1))
    assert snapshot.used_gpu_milli == sum(
        a.pod.total_gpu_milli for a in snapshot.allocations.values()
    )
    np.testing.assert_array_equal(
        snapshot.gpu_memory_free, snapshot.gpu_memory_capacity - gpu_memory
    )
    assert np.all(snapshot.gpu_memory_free >= 0)
    for free_arr, capacity, used in (
        (snapshot.cpu_free, snapshot.cpu_capacity, cpu),
        (snapshot.memory_free, snapshot.memory_capacity, memory),
        (snapshot.pods_free, snapshot.pods_capacity, count),
        (snapshot.mig_free, snapshot.mig_capacity, mig),
        (snapshot.gpu_pods_free, snapshot.gpu_pods_capacity, gpu_pods),
        (snapshot.extra_free, snapshot.extras.capacity, extra),
    ):
        np.testing.assert_array_equal(free_arr, capacity - used)
        assert np.all(free_arr >= 0)
    for node, held in enumerate(ports):  # no two pods on a node hold conflicting host ports
        for i, (holder, port) in enumerate(held):
            for other_holder, other in held[i + 1 :]:
                same = (port.protocol, port.port) == (other.protocol, other.port)
                ips = {port.host_ip, other.host_ip}
                assert (
                    holder == other_holder or not same or ("0.0.0.0" not in ips and len(ips) == 2)
                )
        in_use = {
            (protocol, number, ip): count
            for (protocol, number), ips in snapshot.ports.by_node[node].items()
            for ip, count in ips.items()
        }
        assert in_use == Counter((p.protocol, p.port, p.host_ip) for _, p in held)
    on_nodes = [name for names in snapshot.pods_on_node for name in names]
    assert sorted(on_nodes) == sorted(snapshot.allocations)


def state_of(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """A deep copy of everything bind and release may change, except the generation counters."""
    state: dict[str, Any] = {name: getattr(snapshot, name).copy() for name in ARRAYS}
    state["used_gpu_milli"] = snapshot.used_gpu_milli
    state["allocations"] = dict(snapshot.allocations)
    state["pods_on_node"] = [set(names) for names in snapshot.pods_on_node]
    state["ports"] = snapshot.ports.copy().by_node
    return state


def assert_same_state(snapshot: ClusterSnapshot, state: dict[str, Any]) -> None:
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(snapshot, name), state[name], err_msg=name)
    assert snapshot.used_gpu_milli == state["used_gpu_milli"]
    assert snapshot.allocations == state["allocations"]
    assert snapshot.pods_on_node == state["pods_on_node"]
    assert snapshot.ports.by_node == state["ports"]


def fits_exactly(
    snapshot: ClusterSnapshot,
    pod: PodSpec,
    node: int,
    gpus: tuple[int, ...],
    extras_fit: Callable[[ClusterSnapshot, PodSpec, int], bool],
) -> bool:
    """Whether ``bind(pod, node, gpus)`` must succeed, in plain Python."""
    if pod.name in snapshot.allocations or not 0 <= node < snapshot.size:
        return False
    if not extras_fit(snapshot, pod, node):
        return False
    if snapshot.cpu_free[node] < pod.cpu_milli or snapshot.memory_free[node] < pod.memory_mib:
        return False
    if snapshot.pods_free[node] < 1:
        return False
    if pod.kind is RequestKind.MIG:
        if pod.mig_profile not in snapshot.mig_profiles:
            return False
        if snapshot.mig_free[node, snapshot.mig_profiles.index(pod.mig_profile)] < 1:
            return False
    if len(gpus) != pod.gpu_count or len(set(gpus)) != len(gpus):
        return False
    for gpu in gpus:
        if not 0 <= gpu < snapshot.nodes[node].gpu_count:
            return False
        if snapshot.gpu_free[node, gpu] < pod.gpu_milli:
            return False
        if snapshot.gpu_memory_free[node, gpu] < pod.gpu_memory_mib:
            return False
        if snapshot.gpu_pods_free[node, gpu] < 1:
            return False
        whole = pod.kind is RequestKind.WHOLE
        if whole and snapshot.gpu_free[node, gpu] != snapshot.gpu_milli_capacity[node, gpu]:
            return False
        if whole and snapshot.gpu_memory_free[node, gpu] != snapshot.gpu_memory_capacity[node, gpu]:
            return False
    return True


def schedule_stream(
    snapshot: ClusterSnapshot, stream: list[PodSpec], policy_name: str, seed: int
) -> None:
    """Schedule and bind ``stream`` with one policy, without any checks."""
    context = PolicyContext(np.random.default_rng(seed), stream)
    scheduler = Scheduler(build_policy(policy_name, context))
    for pod in stream:
        decision = scheduler.schedule(snapshot, pod)
        if isinstance(decision, Bind):
            snapshot.bind(decision.pod, decision.node, decision.gpus)


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    nodes=clusters(),
    stream=pod_streams(),
    policy_name=st.sampled_from(list(PUBLISHED)),
    seed=st.integers(0, 2**32 - 1),
    ranked=st.booleans(),
)
def test_every_policy_keeps_the_snapshot_consistent(
    nodes: list[NodeSpec],
    stream: list[PodSpec],
    policy_name: str,
    seed: int,
    ranked: bool,
    feasible_nodes: FeasibleNodes,
    extras_fit: ExtrasFit,
) -> None:
    rng = np.random.default_rng(seed)
    snapshot = ClusterSnapshot(nodes)
    policy = build_policy(policy_name, PolicyContext(rng, stream))
    tie_rank = rng.permutation(len(nodes)).astype(np.int64) if ranked else None
    scheduler = Scheduler(policy, tie_rank)
    check_invariants(snapshot)
    for pod in stream:
        expected_nodes = feasible_nodes(snapshot, pod)
        generations = snapshot.node_gen.copy()
        decision = scheduler.schedule(snapshot, pod)
        np.testing.assert_array_equal(snapshot.node_gen, generations)  # scheduling is read-only
        event(
            f"{pod.kind.value}: {type(decision).__name__}, {min(len(expected_nodes), 3)} feasible"
        )
        if isinstance(decision, Reject):
            assert expected_nodes == []
            assert decision.message.startswith(f"0/{snapshot.size} nodes are available:")
            assert all(0 < count <= snapshot.size for _, count in decision.reasons)
            assert decision.reasons
            continue
        assert decision.node in expected_nodes
        assert decision.feasible_nodes == len(expected_nodes)
        assert decision.node_name == nodes[decision.node].name
        assert fits_exactly(snapshot, pod, decision.node, decision.gpus, extras_fit)
        snapshot.bind(decision.pod, decision.node, decision.gpus)
        changed = np.flatnonzero(snapshot.node_gen != generations)
        assert changed.tolist() == [decision.node]
        check_invariants(snapshot)


@settings(max_examples=100, deadline=None)
@given(
    nodes=clusters(),
    stream=pod_streams(max_size=12),
    policy_name=st.sampled_from(list(PUBLISHED)),
    extra=pods("extra"),
    node=st.integers(-1, 6),
    gpus=st.lists(st.integers(-1, 8), max_size=3),
)
def test_bind_refuses_exactly_what_does_not_fit(
    nodes: list[NodeSpec],
    stream: list[PodSpec],
    policy_name: str,
    extra: PodSpec,
    node: int,
    gpus: list[int],
    extras_fit: ExtrasFit,
) -> None:
    snapshot = ClusterSnapshot(nodes)
    schedule_stream(snapshot, stream, policy_name, seed=7)
    before = state_of(snapshot)
    request = tuple(gpus)
    if fits_exactly(snapshot, extra, node, request, extras_fit):
        allocation = snapshot.bind(extra, node, request)
        assert allocation == Allocation(pod=extra, node=node, gpus=request)
        check_invariants(snapshot, models=False)
        # Binding the same pod again is refused and changes nothing.
        after = state_of(snapshot)
        with pytest.raises(AllocationError, match="already bound"):
            snapshot.bind(extra, node, request)
        assert_same_state(snapshot, after)
        # Releasing restores the state before the bind exactly.
        assert snapshot.release(extra.name) == allocation
        assert_same_state(snapshot, before)
    else:
        with pytest.raises(AllocationError):
            snapshot.bind(extra, node, request)
        assert_same_state(snapshot, before)
    with pytest.raises(AllocationError, match="not bound"):
        snapshot.release(extra.name)
    check_invariants(snapshot, models=False)


@settings(max_examples=100, deadline=None)
@given(
    nodes=clusters(),
    stream=pod_streams(),
    policy_name=st.sampled_from(list(PUBLISHED)),
    data=st.data(),
)
def test_simulate_removal_restores_exactly(
    nodes: list[NodeSpec], stream: list[PodSpec], policy_name: str, data: st.DataObject
) -> None:
    snapshot = ClusterSnapshot(nodes)
    schedule_stream(snapshot, stream, policy_name, seed=3)
    bound = sorted(snapshot.allocations)
    removed = data.draw(st.lists(st.sampled_from(bound), unique=True) if bound else st.just([]))
    before = state_of(snapshot)
    generations = snapshot.node_gen.copy()

    restore = snapshot.simulate_removal(removed)
    for name in removed:
        assert name not in snapshot.allocations
    freed_cpu = np.zeros(snapshot.size, dtype=np.int64)
    freed_extra = np.zeros_like(snapshot.extra_free)
    freed_milli = 0
    for name in removed:
        allocation = before["allocations"][name]
        freed_cpu[allocation.node] += allocation.pod.cpu_milli
        freed_milli += allocation.pod.total_gpu_milli
        for resource, amount in allocation.pod.extra_resources:
            freed_extra[allocation.node, snapshot.extras.names.index(resource)] += amount
    np.testing.assert_array_equal(snapshot.cpu_free, before["cpu_free"] + freed_cpu)
    np.testing.assert_array_equal(snapshot.extra_free, before["extra_free"] + freed_extra)
    assert snapshot.used_gpu_milli == before["used_gpu_milli"] - freed_milli
    check_invariants(snapshot)

    restore()
    assert_same_state(snapshot, before)
    check_invariants(snapshot)
    # Every touched node has a new generation, so per-node caches refresh; the others do not.
    touched = {before["allocations"][name].node for name in removed}
    for node in range(snapshot.size):
        if node in touched:
            assert snapshot.node_gen[node] > generations[node]
        else:
            assert snapshot.node_gen[node] == generations[node]


@st.composite
def sharing(draw: st.DrawFn, size: int) -> list[tuple[int, int | None, float, float]]:
    """Per node, maybe a Shared pool's limits: pods per GPU and compute/memory overcommit."""
    chosen = draw(st.lists(st.integers(0, size - 1), unique=True, max_size=size))
    return [
        (
            node,
            draw(st.one_of(st.none(), st.integers(1, 4))),
            draw(st.sampled_from([1.0, 1.5, 4.0])),
            draw(st.sampled_from([1.0, 2.0])),
        )
        for node in chosen
    ]


@settings(max_examples=100, deadline=None)
@given(
    nodes=clusters(),
    stream=pod_streams(),
    policy_name=st.sampled_from(list(PUBLISHED)),
    data=st.data(),
    extra=pods("extra"),
    gpus=st.lists(st.integers(0, 7), max_size=3),
)
def test_pods_per_gpu_and_overcommit_keep_every_invariant(
    nodes: list[NodeSpec],
    stream: list[PodSpec],
    policy_name: str,
    data: st.DataObject,
    extra: PodSpec,
    gpus: list[int],
    extras_fit: ExtrasFit,
) -> None:
    snapshot = ClusterSnapshot(nodes)
    for node, per_gpu, compute, memory in data.draw(sharing(len(nodes))):
        snapshot.configure_gpu_sharing(node, per_gpu, compute, memory)
    check_invariants(snapshot)
    schedule_stream(snapshot, stream, policy_name, seed=5)
    check_invariants(snapshot)
    node = data.draw(st.integers(0, len(nodes) - 1))
    before = state_of(snapshot)
    if fits_exactly(snapshot, extra, node, tuple(gpus), extras_fit):
        snapshot.bind(extra, node, tuple(gpus))
        check_invariants(snapshot, models=False)
    else:
        with pytest.raises(AllocationError):
            snapshot.bind(extra, node, tuple(gpus))
        assert_same_state(snapshot, before)


# ------------------------------------------------------------------------------------------------
# Deterministic edge cases of bind and release
# ------------------------------------------------------------------------------------------------


def small_cluster() -> ClusterSnapshot:
    return ClusterSnapshot(
        [
            NodeSpec("g", 8000, 8192, 2, "T4", gpu_memory_mib=16_384, max_pods=3),
            NodeSpec("m", 8000, 8192, mig_slices=(("1g.10gb", 1),)),
        ]
    )


@pytest.mark.parametrize(
    ("pod", "node", "gpus", "message"),
    [
        pytest.param(PodSpec("x", 9000, 1), 0, (), "insufficient cpu", id="cpu"),
        pytest.param(PodSpec("x", 1, 9000), 0, (), "insufficient memory", id="memory"),
        pytest.param(PodSpec("x", 1, 1, 1, 500), 0, (), "needs 1 distinct GPUs", id="too-few-gpus"),
        pytest.param(PodSpec("x", 1, 1, 1, 500), 0, (0, 1), "needs 1 distinct GPUs", id="too-many"),
        pytest.param(
            PodSpec("x", 1, 1, 2, 500), 0, (1, 1), "needs 2 distinct GPUs", id="duplicate"
        ),
        pytest.param(PodSpec("x", 1, 1), 0, (0,), "needs 0 distinct GPUs", id="cpu-pod-with-gpu"),
        pytest.param(PodSpec("x", 1, 1, 1, 500), 0, (2,), "no GPU 2", id="gpu-out-of-range"),
        pytest.param(PodSpec("x", 1, 1, 1, 500), 1, (0,), "no GPU 0", id="gpu-on-cpu-node"),
        pytest.param(PodSpec("x", 1, 1, 1, 500), 2, (0,), "no node at index 2", id="node-range"),
        pytest.param(PodSpec("x", 1, 1, 1, 500), -1, (0,), "no node at index -1", id="negative"),
        pytest.param(
            PodSpec("x", 1, 1, 1, 100, gpu_memory_mib=20_000),
            0,
            (0,),
            "too little memory",
            id="gmem",
        ),
        pytest.param(PodSpec("x", 1, 1, mig_profile="3g"), 1, (), "no free MIG slice 3g", id="mig"),
        pytest.param(
            PodSpec("x", 1, 1, mig_profile="1g.10gb"), 0, (), "no free MIG", id="mig-node"
        ),
    ],
)
def test_bind_errors(pod: PodSpec, node: int, gpus: tuple[int, ...], message: str) -> None:
    snapshot = small_cluster()
    before = state_of(snapshot)
    with pytest.raises(AllocationError, match=message):
        snapshot.bind(pod, node, gpus)
    assert_same_state(snapshot, before)
    np.testing.assert_array_equal(snapshot.node_gen, [0, 0])


def test_bind_refuses_a_share_on_a_full_gpu_and_a_pod_over_max_pods() -> None:
    snapshot = small_cluster()
    snapshot.bind(PodSpec("a", 1, 1, 1, 700), 0, (0,))
    with pytest.raises(AllocationError, match="too little compute share"):
        snapshot.bind(PodSpec("b", 1, 1, 1, 301), 0, (0,))
    snapshot.bind(PodSpec("b", 1, 1, 1, 300), 0, (0,))
    assert snapshot.gpu_free[0].tolist() == [0, 1000]
    with pytest.raises(AllocationError, match="too little compute share"):
        snapshot.bind(PodSpec("w", 1, 1, 1, 1000), 0, (0,))
    snapshot.bind(PodSpec("c", 1, 1), 0)
    with pytest.raises(AllocationError, match="too many pods"):
        snapshot.bind(PodSpec("d", 1, 1), 0)
    check_invariants(snapshot)


def test_release_restores_and_unknown_release_fails() -> None:
    snapshot = small_cluster()
    before = state_of(snapshot)
    pod = PodSpec("s", 1000, 512, 2, 400, gpu_memory_mib=2048)
    snapshot.bind(pod, 0, (1, 0))
    assert snapshot.gpu_memory_free[0].tolist() == [16_384 - 2048, 16_384 - 2048]
    assert snapshot.used_gpu_milli == 800
    snapshot.release("s")
    assert_same_state(snapshot, before)
    assert snapshot.node_gen.tolist() == [2, 0]
    with pytest.raises(AllocationError, match="not bound"):
        snapshot.release("s")


WHOLE_POD = PodSpec("whole", 1, 1, 1, 1000)
MEMORY_ONLY_POD = PodSpec("mem-only", 1, 1, 1, 0, gpu_memory_mib=1024)


@pytest.mark.parametrize(
    ("held", "arriving"),
    [
        pytest.param(WHOLE_POD, MEMORY_ONLY_POD, id="memory-only-share-onto-whole-gpu"),
        pytest.param(MEMORY_ONLY_POD, WHOLE_POD, id="whole-gpu-onto-memory-only-share"),
    ],
)
def test_whole_gpu_stays_exclusive_against_memory_only_shares(
    held: PodSpec, arriving: PodSpec
) -> None:
    """A whole-GPU pod is exclusive (RequestKind.WHOLE); no other pod may share its GPU."""
    assert MEMORY_ONLY_POD.kind is RequestKind.SHARE
    assert WHOLE_POD.kind is RequestKind.WHOLE
    snapshot = ClusterSnapshot([NodeSpec("g", 8000, 8192, 1, "A100", gpu_memory_mib=40_960)])
    snapshot.bind(held, 0, (0,))
    policy = build_policy("bestfit", PolicyContext(np.random.default_rng(0), []))
    decision = Scheduler(policy).schedule(snapshot, arriving)
    assert isinstance(decision, Reject)
    with pytest.raises(AllocationError):
        snapshot.bind(arriving, 0, (0,))
    check_invariants(snapshot)
