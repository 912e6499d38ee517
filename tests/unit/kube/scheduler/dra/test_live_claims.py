"""The live scheduler allocates DRA claims of gpupool's driver: one ledger with its pods.

Each test runs the real :class:`LiveScheduler` (informer handlers, cycle, engine, binder) against
the in-process API server of :mod:`.claim_server`, which keeps the claims it is sent with
resourceVersion preconditions. What is checked is what the API server ends up holding: the
claims' ``status.allocation`` and ``reservedFor``, the signed records, the Bindings.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec
import pytest
from benchlib.claim_check import claim_problems

from gpupool.kube.client.informer import ADDED
from gpupool.kube.objects import allocation
from gpupool.kube.objects.dra import claim_record
from gpupool.kube.objects.dra.records import DRIVER, DeviceClass
from gpupool.kube.objects.records import PolicyObjectRecord
from gpupool.kube.objects.signing import CLAIM_DOMAIN
from gpupool.kube.objects.vocabulary import ANNOTATION_ALLOCATION
from gpupool.kube.scheduler.dra.claims import claim_key

from ...builders import SIGNER, pod_dict
from ...claim_server import (
    MIG_INSTANCES,
    NODE_GPUS,
    ClaimServer,
    add_pods,
    claim_pod_json,
    delete_pod,
    live_scheduler,
    node_gpus,
    run_cycles,
)
from ...dra_builders import request_json, resource_slice

Json = dict[str, Any]


def _results(server: ClaimServer, name: str) -> list[Json]:
    status = server.claims[name].get("status", {})
    results: list[Json] = status.get("allocation", {}).get("devices", {}).get("results", [])
    return results


def _assert_no_capacity_twice(server: ClaimServer) -> None:
    """The independent checker finds nothing wrong in what the API server holds."""
    slices = [msgspec.to_builtins(resource_slice("n0", node_gpus("n0")))]
    assert claim_problems(server.claims.values(), slices) == []


async def test_a_share_a_mig_slice_and_two_whole_gpus_are_allocated_and_bound() -> None:
    server = ClaimServer()
    server.add_claim(
        "share",
        request_json("gpu-share.gpupool.io", capacity={"memory": "20Gi", "compute": "300m"}),
    )
    server.add_claim("mig", request_json("mig-1g.10gb.gpupool.io"))
    server.add_claim("two", request_json("gpu.gpupool.io", count=2))
    pods = {n: claim_pod_json(n, n) for n in ("share", "mig", "two")}
    scheduler = await live_scheduler(server)
    add_pods(scheduler, pods)
    await run_cycles(scheduler, server, pods)

    assert set(server.bindings) == {"share", "mig", "two"}
    (share,) = _results(server, "share")
    assert share["driver"] == DRIVER
    assert share["pool"] == "n0"
    assert share["consumedCapacity"] == {"memory": "20Gi", "compute": "300m"}
    assert share["shareID"]
    (mig,) = _results(server, "mig")
    assert mig["device"].startswith(f"mig-{NODE_GPUS}-")
    two = _results(server, "two")
    assert len({r["device"] for r in two}) == 2
    assert share["device"] not in {r["device"] for r in two}
    for name, pod in pods.items():
        claim = server.claims[name]
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}
        ]
        text = claim_record.record_text(server.record(name))
        assert text is not None
        record = claim_record.decode(text)
        (entry,) = claim["status"]["devices"]  # one status write: allocation, reservedFor, record
        assert (entry["driver"], entry["device"]) == (DRIVER, _results(server, name)[0]["device"])
        assert SIGNER.for_domain(CLAIM_DOMAIN).verify(record, claim["metadata"]["uid"])
        assert [msgspec.to_builtins(r) for r in record.results] == _results(server, name)
        pod_record = allocation.decode(
            server.bindings[name]["metadata"]["annotations"][ANNOTATION_ALLOCATION]
        )
        assert pod_record.gpus == ()  # the claim holds the GPUs; the pod its CPU and memory
        assert SIGNER.verify(pod_record, pod["metadata"]["uid"])
    snapshot = scheduler.state.snapshot
    assert snapshot is not None
    held = snapshot.allocations[claim_key("uid-claim-two")]
    assert held.pod.gpu_count == 2
    assert int(snapshot.gpu_free[0].sum()) == 3 * 1000 - 300 - 2 * 1000 + 1000  # 4 GPUs
    _assert_no_capacity_twice(server)
    # the checker would see a whole GPU given twice (a copy of "two"'s allocation on "share")
    server.claims["share"]["status"]["allocation"] = server.claims["two"]["status"]["allocation"]
    slices = [msgspec.to_builtins(resource_slice("n0", node_gpus("n0")))]
    assert any(
        "given whole and to others" in p for p in claim_problems(server.claims.values(), slices)
    )


def _random_requests(rng: random.Random, count: int) -> list[Json]:
    requests = []
    for _ in range(count):
        kind = rng.choice(["share", "share", "mig", "whole"])
        if kind == "share":
            capacity = {
                "memory": f"{rng.choice([4, 10, 20, 40])}Gi",
                "compute": f"{rng.choice([100, 250, 500])}m",
            }
            requests.append(request_json("gpu-share.gpupool.io", capacity=capacity))
        elif kind == "mig":
            requests.append(request_json("mig-1g.10gb.gpupool.io"))
        else:
            requests.append(request_json("gpu.gpupool.io", count=rng.choice([1, 2])))
    return requests


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_twenty_claim_pods_in_shuffled_order_never_consume_capacity_twice(seed: int) -> None:
    rng = random.Random(seed)
    server = ClaimServer()
    names = [f"p{i}" for i in range(20)]
    for name, request in zip(names, _random_requests(rng, 20), strict=True):
        server.add_claim(name, request)
    rng.shuffle(names)
    pods = {n: claim_pod_json(n, n) for n in names}
    scheduler = await live_scheduler(server)
    add_pods(scheduler, pods)
    await run_cycles(scheduler, server, pods)

    assert server.bindings, "some pods were placed"
    allocated = {n for n in server.claims if _results(server, n)}
    assert allocated == set(server.bindings)  # a pod is bound exactly when its claim is
    _assert_no_capacity_twice(server)
    migs = sum(1 for n in allocated if _results(server, n)[0]["device"].startswith("mig-"))
    assert migs <= MIG_INSTANCES


async def test_a_restart_in_the_middle_of_200_claim_pods_gives_no_capacity_twice() -> None:
    rng = random.Random(7)
    server = ClaimServer()
    nodes = tuple(f"n{i}" for i in range(6))
    names = [f"p{i:03d}" for i in range(200)]
    for name, request in zip(names, _random_requests(rng, len(names)), strict=True):
        server.add_claim(name, request)
    rng.shuffle(names)
    first_half = {n: claim_pod_json(n, n) for n in names[:100]}
    scheduler = await live_scheduler(server, nodes)
    add_pods(scheduler, first_half)
    await run_cycles(scheduler, server, first_half)
    placed = set(server.bindings)
    assert placed

    # a new leader: it knows only what the API server holds (claims, bound pods)
    restarted = await live_scheduler(server, nodes)
    pods = {**first_half, **{n: claim_pod_json(n, n) for n in names[100:]}}
    add_pods(restarted, pods)
    restarted.state.sync()
    snapshot = restarted.state.snapshot
    assert snapshot is not None
    assert {claim_key(f"uid-claim-{n}") for n in placed} <= set(snapshot.allocations)
    await run_cycles(restarted, server, pods)
    assert placed < set(server.bindings)  # the second half was placed too, around the first
    slices = [msgspec.to_builtins(resource_slice(n, node_gpus(n))) for n in nodes]
    assert claim_problems(server.claims.values(), slices) == []


async def test_a_claim_shared_by_two_pods_is_counted_once_and_released_after_both() -> None:
    server = ClaimServer()
    server.add_claim("shared", request_json("gpu.gpupool.io", count=1))
    pods = {n: claim_pod_json(n, "shared") for n in ("a", "b")}
    scheduler = await live_scheduler(server)
    add_pods(scheduler, pods)
    await run_cycles(scheduler, server, pods)

    assert set(server.bindings) == {"a", "b"}
    assert {b["target"]["name"] for b in server.bindings.values()} == {"n0"}
    reserved = {c["name"] for c in server.claims["shared"]["status"]["reservedFor"]}
    assert reserved == {"a", "b"}
    snapshot = scheduler.state.snapshot
    assert snapshot is not None
    assert int((snapshot.gpu_free[0] == 0).sum()) == 1  # one GPU held, once
    key = claim_key("uid-claim-shared")
    assert all(
        r.companions == () for r in scheduler.book.running.values()
    )  # evicting one frees none

    delete_pod(scheduler, pods["a"])
    await run_cycles(scheduler, server, pods)
    assert _results(server, "shared")  # b still reserves it
    assert scheduler.book.running["uid-b"].companions == (key,)  # b alone: its end frees the GPU
    delete_pod(scheduler, pods["b"])
    await run_cycles(scheduler, server, pods)
    assert not _results(server, "shared")
    assert "reservedFor" not in server.claims["shared"]["status"]
    assert "devices" not in server.claims["shared"]["status"]  # the record went with it
    assert key not in snapshot.allocations
    assert int((snapshot.gpu_free[0] == 1000).sum()) == NODE_GPUS


async def _pending_reason(
    server: ClaimServer, pod: Json, classes: tuple[DeviceClass, ...] = ()
) -> str:
    """Schedule one claim pod that must not be placed; its pending reason."""
    name = pod["metadata"]["name"]
    pods = {name: pod}
    scheduler = await live_scheduler(server)
    for device_class in classes:
        scheduler.state.claims.on_class(ADDED, device_class)
    add_pods(scheduler, pods)
    await run_cycles(scheduler, server, pods)
    assert not server.bindings
    reason: str = scheduler.queue.entries[f"uid-{name}"].reason
    return reason


BAD_CLAIMS = [
    ("unknown-class", request_json("nope.gpupool.io"), "exactly.deviceClassName"),
    (
        "bad-selector",
        request_json("gpu.gpupool.io", selectors=["device.attributes["]),
        "exactly.selectors[0].cel.expression",
    ),
    (
        "too-much-memory",
        request_json("gpu-share.gpupool.io", capacity={"memory": "200Gi"}),
        "exactly.capacity.requests[memory]",
    ),
    ("count-over-limit", request_json("gpu.gpupool.io", count=9), "exactly.count"),
]


@pytest.mark.parametrize(("name", "request_", "field"), BAD_CLAIMS, ids=[b[0] for b in BAD_CLAIMS])
async def test_a_bad_claim_pends_with_a_reason_naming_the_field(
    name: str, request_: Json, field: str
) -> None:
    server = ClaimServer()
    server.add_claim(name, request_)
    reason = await _pending_reason(server, claim_pod_json(name, name))
    assert not _results(server, name)
    assert f"ResourceClaim team/{name} spec.devices.requests[0].{field}" in reason


async def test_a_pod_mixing_a_claim_with_extended_resources_pends() -> None:
    server = ClaimServer()
    server.add_claim("mixed", request_json("gpu.gpupool.io"))
    pod = claim_pod_json("mixed", "mixed", limits={"gpupool.io/gpu": "1"})
    reason = await _pending_reason(server, pod)
    assert "spec.containers[].resources" in reason
    assert "use one or the other" in reason


def _queue_with_ceiling(scheduler: Any, ceiling: int) -> None:
    for kind, name, spec in (
        ("GPUPool", "x", {"mode": "Exclusive", "nodeSelector": {"kubernetes.io/hostname": "n0"}}),
        ("GPUQueue", "q", {"namespaces": ["team"], "quotas": [{"pool": "x", "ceiling": ceiling}]}),
    ):
        body = {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}
        record = msgspec.json.decode(msgspec.json.encode(body), type=PolicyObjectRecord)
        informer = scheduler.policies.pools if kind == "GPUPool" else scheduler.policies.queues
        informer.store[record.metadata.uid] = record
        informer.handler(ADDED, record)


async def test_a_queue_ceiling_holds_across_claim_pods_and_device_plugin_pods() -> None:
    server = ClaimServer()
    server.add_claim("two", request_json("gpu.gpupool.io", count=2))
    server.add_claim("one", request_json("gpu.gpupool.io", count=1))
    pods = {"two": claim_pod_json("two", "two")}
    scheduler = await live_scheduler(server)
    _queue_with_ceiling(scheduler, 2)
    add_pods(scheduler, pods)
    await run_cycles(scheduler, server, pods)
    assert set(server.bindings) == {"two"}

    pods["plugin"] = pod_dict("plugin", namespace="team", gpus=1, created="2026-01-01T00:00:01Z")
    pods["one"] = claim_pod_json("one", "one")
    add_pods(scheduler, {n: pods[n] for n in ("plugin", "one")})
    await run_cycles(scheduler, server, pods)
    assert set(server.bindings) == {"two"}  # the claim's two GPUs fill the ceiling
    for name in ("plugin", "one"):
        reason = scheduler.queue.entries[f"uid-{name}"].reason
        assert "queue q: ceiling 2 GPU units reached in pool x" in reason, reason


async def test_a_pod_with_a_claim_of_another_driver_pends() -> None:
    server = ClaimServer()
    server.add_claim("theirs", request_json("other.example.com"))
    other = {"metadata": {"name": "other.example.com"}, "spec": {"selectors": []}}
    device_class = msgspec.convert(other, DeviceClass)
    reason = await _pending_reason(server, claim_pod_json("theirs", "theirs"), (device_class,))
    assert "spec.devices.requests[0].exactly.deviceClassName" in reason
    assert "gpupool places only its own driver's claims" in reason


async def test_a_refused_binding_leaves_the_written_claim_holding_its_gpus() -> None:
    server = ClaimServer()
    server.add_claim("four", request_json("gpu.gpupool.io", count=4))
    server.add_claim("other", request_json("gpu.gpupool.io", count=1))
    server.refuse_binding.add("four")
    pods = {"four": claim_pod_json("four", "four")}
    scheduler = await live_scheduler(server)
    add_pods(scheduler, pods)
    await scheduler.cycle()
    await asyncio.gather(*scheduler.binder.tasks)  # the claim is written, the Binding refused
    assert len(_results(server, "four")) == 4
    assert not server.bindings

    pods["other"] = claim_pod_json("other", "other")
    add_pods(scheduler, {"other": pods["other"]})
    await scheduler.cycle()  # before the claim's watch event: the cache has it from the write
    await asyncio.gather(*scheduler.binder.tasks)
    assert not server.bindings
    assert not _results(server, "other")
    _assert_no_capacity_twice(server)
