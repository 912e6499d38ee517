"""Property: claims placed through the snapshot never consume a device's capacity twice.

Random nodes (models, memory sizes, a GPU in MIG mode, a broken GPU) publish their slices as
the agent does; random claim pods (whole GPUs, shares by capacity, MIG slices) with selectors
that match nothing, everything, one attribute or one GPU are translated, placed on the snapshot
with the claim's eligibility (first feasible node, the policy's best fit restricted to eligible
GPUs), bound, written as DRA allocation results, and some released again. The checks read only
the allocation results and the slices, not the snapshot that made them: per device the consumed
memory and compute stay within its capacity, a whole GPU or a MIG instance has one claim, every
allocated device matches its request's selectors and is healthy, share IDs are never reused.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from fractions import Fraction

import hypothesis.strategies as st
from hypothesis import event, given, settings

from gpupool.agent.nvml import GpuDevice, MigDevice
from gpupool.core.filtering import filter_nodes
from gpupool.core.model import NodeSpec, PodSpec, RequestKind
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.dra.cel import COMPILER, cel_device
from gpupool.kube.objects.dra.claim_devices import (
    allocation_result,
    device_of_column,
    gpu_columns,
    translate_pod_claims,
)
from gpupool.kube.objects.dra.device_cache import DeviceCache
from gpupool.kube.objects.dra.records import (
    DRIVER,
    Device,
    DeviceRequestAllocationResult,
    ResourceSlice,
)
from gpupool.kube.objects.quantity import parse_quantity
from gpupool.kube.objects.translate import InvalidObjectError
from gpupool.scheduling.claim_placement import (
    GpuEligibility,
    choose_mig_device,
    restrict_choice,
)
from gpupool.scheduling.gpu_choice import best_fit_gpus

from ...dra_builders import CLASSES, claim, claim_pod, request_json, resource_slice

MODELS = {"T4": 15360, "A100": 81920, "H100": 81559}
SELECTORS = [
    [],
    ["false"],
    [f'device.driver == "{DRIVER}"'],
    [f'device.attributes["{DRIVER}"].model == "H100"'],
    [f'device.attributes["{DRIVER}"].index == 1'],
    [f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("20Gi"))'],
]


@st.composite
def node_gpus(draw: st.DrawFn, name: str) -> tuple[GpuDevice, ...]:
    model = draw(st.sampled_from(sorted(MODELS)))
    count = draw(st.integers(1, 4))
    gpus = []
    for index in range(count):
        gpus.append(GpuDevice(index, f"GPU-{name}-{index}", model, MODELS[model], index))
    if draw(st.booleans()) and model != "T4":  # one more GPU, in MIG mode
        migs = tuple(
            MigDevice(f"MIG-{name}-{count}-{s}", "1g.10gb", 9856)
            for s in range(draw(st.integers(1, 7)))
        )
        gpus.append(
            GpuDevice(
                count,
                f"GPU-{name}-{count}",
                model,
                MODELS[model],
                count,
                True,
                migs,
                mig_capable=True,
            )
        )
    if draw(st.booleans()):
        broken = draw(st.integers(0, len(gpus) - 1))
        gpus[broken] = replace(gpus[broken], healthy=False)
    return tuple(gpus)


REQUEST = st.one_of(
    st.builds(
        lambda count, selectors: request_json("gpu.gpupool.io", count=count, selectors=selectors),
        st.integers(1, 2),
        st.sampled_from(SELECTORS),
    ),
    st.builds(
        lambda memory, compute, selectors: request_json(
            "gpu-share.gpupool.io",
            capacity={
                **({"memory": f"{memory}Mi"} if memory else {}),
                **({"compute": f"{compute}m"} if compute or not memory else {}),
            },
            selectors=selectors,
        ),
        st.sampled_from([0, 1024, 5000, 15000, 40000]),
        st.sampled_from([0, 100, 250, 500, 1000]),
        st.sampled_from(SELECTORS),
    ),
    st.builds(
        lambda selectors: request_json("mig-1g.10gb.gpupool.io", selectors=selectors),
        st.sampled_from(SELECTORS[:3]),
    ),
)


def node_spec(name: str, gpus: tuple[GpuDevice, ...]) -> NodeSpec:
    plain = [g for g in gpus if not g.mig_enabled]
    migs = sum(len(g.mig) for g in gpus)
    return NodeSpec(
        name,
        cpu_milli=64000,
        memory_mib=512 * 1024,
        gpu_count=len(plain),
        gpu_model=gpus[0].model,
        gpu_memory_mib=gpus[0].memory_mib,
        mig_slices=(("1g.10gb", migs),) if migs else (),
    )


def place(
    snapshot: ClusterSnapshot,
    spec: PodSpec,
    eligibility: GpuEligibility,
    taken: set[str],
) -> tuple[int, tuple[int, ...], str] | None:
    """First feasible node; the policy's best fit restricted to eligible GPUs; a MIG device."""
    check = eligibility.check(snapshot, spec, taken)
    feasible = filter_nodes(snapshot, spec, (check,)).mask
    for node in map(int, feasible.nonzero()[0]):
        if spec.kind is RequestKind.MIG:
            device = choose_mig_device(eligibility, node, taken)
            assert device is not None  # the check said there is one
            return node, (), device
        gpus = restrict_choice(
            snapshot, spec, node, eligibility, best_fit_gpus(snapshot, spec, node)
        )
        assert gpus is not None  # the check said enough eligible GPUs are free
        return node, gpus, ""
    return None


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    node_count=st.integers(1, 3),
    requests=st.lists(REQUEST, min_size=5, max_size=25),
)
def test_no_device_capacity_is_consumed_twice(
    data: st.DataObject, node_count: int, requests: list[dict[str, object]]
) -> None:
    names = [f"n{i}" for i in range(node_count)]
    inventory = {name: data.draw(node_gpus(name)) for name in names}
    slices = [resource_slice(name, gpus) for name, gpus in inventory.items()]
    devices = {(s.spec.node_name, d.name): d for s in slices for d in s.spec.devices}
    snapshot = ClusterSnapshot([node_spec(name, inventory[name]) for name in names])
    uuids = {n: [g.uuid for g in inventory[n] if not g.mig_enabled] for n in names}
    cache = DeviceCache()
    live: dict[str, list[DeviceRequestAllocationResult]] = {}
    requested: dict[str, dict[str, object]] = {}
    taken: set[str] = set()
    for i, request in enumerate(requests):
        pod_name = f"p{i}"
        c = claim(f"c{i}", request, uid=f"claim-{i}")
        try:
            translation = translate_pod_claims(
                claim_pod(pod_name, {"gpu": f"c{i}"}),
                lambda ns, n, c=c: c,
                lambda ns, n: None,
                CLASSES.get,
                slices,
                cache,
            )
        except InvalidObjectError:
            continue  # e.g. more memory than a T4-only cluster has
        assert translation is not None
        spec = translation.spec
        eligible = translation.eligible
        eligibility = GpuEligibility(
            {snapshot.node_index[n]: gpu_columns(eligible, n, uuids[n]) for n in names},
            {snapshot.node_index[n]: eligible.by_node.get(n, ()) for n in names},
        )
        placed = place(snapshot, spec, eligibility, taken)
        if placed is None:
            continue
        node, gpus, mig = placed
        snapshot.bind(spec, node, gpus)
        node_name = names[node]
        chosen = (
            [mig]
            if mig
            else [device_of_column(eligible, node_name, uuids[node_name][g]) for g in gpus]
        )
        taken.update(d for d in chosen if d.startswith("mig-"))
        node_devices = {n: d for (owner, n), d in devices.items() if owner == node_name}
        result = allocation_result(translation.request, node_name, chosen, node_devices)
        live[spec.name] = list(result.devices.results)
        requested[spec.name] = request
        if data.draw(st.integers(0, 3), label=f"release {pod_name} if 0") == 0:
            snapshot.release(spec.name)
            taken.difference_update(
                r.device for r in live.pop(spec.name) if r.device.startswith("mig-")
            )
            requested.pop(spec.name)
    event(f"claims held at the end: {'5 or more' if len(live) >= 5 else len(live)}")
    check_results(live, requested, devices, slices)


def check_results(
    live: dict[str, list[DeviceRequestAllocationResult]],
    requested: dict[str, dict[str, object]],
    devices: dict[tuple[str | None, str], Device],
    slices: list[ResourceSlice],
) -> None:
    memory: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    compute: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    exclusive: set[tuple[str, str]] = set()
    share_ids: list[str] = []
    for pod, results in live.items():
        request = requested[pod]
        exactly = request["exactly"]
        assert isinstance(exactly, dict)
        for result in results:
            key = (result.pool, result.device)
            device = devices[key]
            holders[key].append(pod)
            assert not device.taints, f"{pod} got the broken device {key}"
            assert_selectors_match(exactly, device)
            if result.share_id:
                share_ids.append(result.share_id)
            consumed = result.consumed_capacity
            memory[key] += parse_quantity(consumed.get("memory", "0"))
            compute[key] += parse_quantity(consumed.get("compute", "0"))
            if exactly["deviceClassName"] != "gpu-share.gpupool.io":
                exclusive.add(key)
    for key, pods in holders.items():
        capacity = devices[key].capacity
        assert memory[key] <= parse_quantity(capacity["memory"].value), (key, pods)
        if "compute" in capacity:
            assert compute[key] <= parse_quantity(capacity["compute"].value), (key, pods)
        if key in exclusive:
            assert len(pods) == 1, f"exclusive device {key} held by {pods}"
    assert len(share_ids) == len(set(share_ids))
    assert {s.spec.node_name for s in slices} >= {key[0] for key in holders}


def assert_selectors_match(exactly: dict[str, object], device: Device) -> None:
    candidate = cel_device(DRIVER, device, COMPILER.values)
    selectors = list(CLASSES[str(exactly["deviceClassName"])].spec.selectors)
    expressions = [s.cel.expression for s in selectors if s.cel]
    raw = exactly.get("selectors") or []
    assert isinstance(raw, list)
    expressions += [s["cel"]["expression"] for s in raw]
    for expression in expressions:
        assert COMPILER.compile(expression).evaluate(candidate).matches, (expression, device.name)


def test_twenty_claim_pods_of_different_sizes_in_shuffled_order_share_one_node() -> None:
    import random

    from gpupool.agent.fakenvml import preset_devices

    gpus = preset_devices("h100", "big")  # 8 x 81559 MiB
    slices = [resource_slice("big", gpus)]
    devices = {(s.spec.node_name, d.name): d for s in slices for d in s.spec.devices}
    snapshot = ClusterSnapshot([node_spec("big", gpus)])
    uuids = [g.uuid for g in gpus]
    shapes = [
        request_json("gpu-share.gpupool.io", capacity={"memory": f"{m}Mi", "compute": f"{c}m"})
        for m, c in [(10000, 100), (20000, 200), (30000, 300), (5000, 50)] * 4 + [(2000, 20)]
    ] + [request_json("gpu.gpupool.io", count=n) for n in (1, 1, 2)]
    random.Random(7).shuffle(shapes)
    live: dict[str, list[DeviceRequestAllocationResult]] = {}
    requested: dict[str, dict[str, object]] = {}
    cache = DeviceCache()
    for i, request in enumerate(shapes):
        c = claim(f"c{i}", request, uid=f"claim-{i}")
        translation = translate_pod_claims(
            claim_pod(f"p{i}", {"gpu": f"c{i}"}),
            lambda ns, n, c=c: c,
            lambda ns, n: None,
            CLASSES.get,
            slices,
            cache,
        )
        assert translation is not None
        eligibility = GpuEligibility({0: gpu_columns(translation.eligible, "big", uuids)})
        placed = place(snapshot, translation.spec, eligibility, set())
        assert placed is not None, f"request {i} did not fit"  # they fit on 8 GPUs
        node, chosen, _ = placed
        snapshot.bind(translation.spec, node, chosen)
        names = [device_of_column(translation.eligible, "big", uuids[g]) for g in chosen]
        node_devices = {n: d for (_, n), d in devices.items()}
        result = allocation_result(translation.request, "big", names, node_devices)
        live[translation.spec.name] = list(result.devices.results)
        requested[translation.spec.name] = request
    assert len(live) == 20
    check_results(live, requested, devices, slices)
    # the checker itself catches a device given twice
    first = next(iter(live))
    twice = {**live, "intruder": live[first]}
    try:
        check_results(twice, {**requested, "intruder": requested[first]}, devices, slices)
    except AssertionError:
        return
    raise AssertionError("a device given twice went unnoticed")
