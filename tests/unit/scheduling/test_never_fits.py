"""A pod no node could ever hold says so, holds no reservation and keeps no pod waiting.

On the cluster of :func:`two_busy_nodes` (two 4-GPU nodes of 64 CPUs, three GPUs busy on
each), a pod asking more than any node has, or what no node offers, is served first. Blocking
the pool for it gave it a reservation nothing could fill (or, with reservations that follow
their pods, a sweep in every cycle) and kept the pods behind it waiting; in the live scheduler,
for ever and without a word. A pod skipped for the size of one that failed is told that pod's
rejection instead of nothing.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core.constraints import NodeConstraints
from gpupool.core.model import PodSpec
from gpupool.policy.spec import PolicyConfig, PoolMode
from gpupool.policy.workload import Workload
from gpupool.scheduling.decisions import EASY, Admit, Wait
from gpupool.scheduling.never_fits import NEVER_FITS
from gpupool.scheduling.wait_cause import WaitKind

from ..policy.builders import Cluster, node, one_pool, queue, whole, work
from .test_reservations import two_busy_nodes

NEVER = {
    "cpu": PodSpec("never", 100_000, 1024, gpu_count=3, gpu_milli=1000),
    "memory": PodSpec("never", 1000, 300_000, gpu_count=1, gpu_milli=1000),
    "gpus": whole("never", 16),
    "model": replace(whole("never", 1), gpu_models=frozenset({"B200"})),
    "selector": replace(
        whole("never", 1), constraints=NodeConstraints(node_selector=(("zone", "nowhere"),))
    ),
}


def _queue(never: PodSpec) -> list[Workload]:
    """The never-fitting pod first, a 4-GPU pod that fits an empty node, a long 1-GPU pod."""
    return [
        work(never, "q", priority=100),
        work(whole("big", 4), "q", created_at=1),
        work(whole("one"), "q", created_at=2, runtime=9000.0),
    ]


@pytest.mark.parametrize("shape", NEVER)
def test_a_pod_no_node_could_ever_hold_says_so_and_holds_no_reservation(shape: str) -> None:
    cluster = two_busy_nodes(per_pool=16, follow=True, above=1000)
    result = cluster.cycle(_queue(NEVER[shape]), 10.0)
    never, big, one = result.decisions
    assert isinstance(never, Wait)
    assert never.reject is not None  # it waits for the cluster to change, not for others
    assert never.cause.kind is WaitKind.NEVER_FITS
    assert never.reason.startswith("0/2 nodes are available: ")
    assert never.reason.endswith(f" ({NEVER_FITS}).")
    assert [r.pod for held in result.reservations.values() for r in held] == ["big"]
    assert "never" not in result.awaiting
    assert isinstance(big, Wait)
    assert NEVER_FITS not in big.reason
    assert isinstance(one, Admit)  # beside big's reservation, as if the never pod were not there
    assert one.bind.node_name == "n1"


@pytest.mark.parametrize("backfill", [True, False], ids=["backfill", "strict"])
def test_no_pod_waits_behind_a_pod_that_can_never_fit(backfill: bool) -> None:
    cluster = two_busy_nodes(per_pool=1, backfill=backfill)
    never, one = cluster.cycle([_queue(NEVER["cpu"])[0], _queue(NEVER["cpu"])[2]], 10.0).decisions
    assert isinstance(never, Wait)
    assert isinstance(one, Admit)
    assert not one.backfilled  # nothing blocked the pool before it


def test_a_pod_that_fits_only_once_others_end_is_not_told_it_never_fits() -> None:
    cluster = two_busy_nodes(per_pool=1)
    (big,) = cluster.cycle([work(whole("big", 4), "q")], 10.0).decisions
    assert isinstance(big, Wait)
    assert NEVER_FITS not in big.reason


def test_a_pod_skipped_for_the_size_of_one_that_failed_carries_its_rejection() -> None:
    cluster = two_busy_nodes(per_pool=1)
    first, second = cluster.cycle(
        [work(whole("big1", 4), "q", created_at=1), work(whole("big2", 4), "q", created_at=2)],
        10.0,
    ).decisions
    assert isinstance(first, Wait)
    assert isinstance(second, Wait)
    assert second.reject is not None
    assert (second.cause.kind, second.cause.pods) == (WaitKind.RESOURCES, ("big1",))
    assert second.reason == (
        "0/2 nodes are available: 2 Insufficient gpupool.io/gpu "
        "(found for big1, which asks no more)."
    )


def test_a_shape_that_never_fits_for_another_resource_does_not_condemn_the_same_shape_without() -> (
    None
):
    """The verdict is remembered by request shape across cycles; the shape is the whole request.

    It was not: a pod asking a NIC no node of its zone has (never fits) made every later pod of
    the same CPU, memory and selector wait "never" too, though nodes were free (found by the
    differential test against kube-scheduler).
    """
    cluster = two_busy_nodes(per_pool=1)
    nic = PodSpec("nic", 1000, 1024, extra_resources=(("example.com/rdma", 1),))
    plain = replace(nic, name="plain", extra_resources=())
    (waits,) = cluster.cycle([work(nic, "q")], 10.0).decisions
    assert isinstance(waits, Wait)
    assert waits.reason.endswith(f" ({NEVER_FITS}).")
    (admitted,) = cluster.cycle([work(plain, "q")], 20.0).decisions
    assert isinstance(admitted, Admit), admitted


def test_a_pod_its_first_pool_never_holds_waits_behind_its_next_pool_and_is_not_parked() -> None:
    """Routed to a Shared pool that can never hold it, then to the default pool, where the
    cycle's backfill depth is used up: it waits behind the default pool's head (tried again
    next cycle), not "never" with the first pool's rejection (parked until capacity changes).

    Found in the live fuzz corpus: small CPU pods that fit the default pool's nodes waited
    "(no node could ever hold it)" in a pool another test had left, for the whole minute.
    """
    tiny = replace(node("tiny", gpus=0, group="s"), cpu_milli=100)
    nodes = [tiny, node("d0", gpus=4)]
    shared = one_pool(PoolMode.SHARED, name="s", node_selector=(("group", "s"),))
    cluster = Cluster(
        nodes,
        PolicyConfig((shared,), (queue("q"),)),
        replace(EASY, backfill_depth=1),
    )
    pending = [
        work(whole("one"), "q", created_at=0),  # takes a GPU of d0
        work(whole("big", 4), "q", created_at=1),  # then cannot fit: blocks the default pool
        work(whole("filler"), "q", created_at=2),  # tried behind it: uses up the depth of 1
        work(PodSpec("cpu", 500, 128), "q", created_at=3),
    ]
    _, big, _, cpu = cluster.cycle(pending, 10.0).decisions
    assert isinstance(big, Wait)
    assert isinstance(cpu, Wait)
    assert cpu.reject is None, cpu.reason
    assert (cpu.cause.kind, cpu.cause.pods, cpu.cause.pools) == (
        WaitKind.BEHIND,
        ("big",),
        ("default",),
    ), cpu.reason
    assert NEVER_FITS not in cpu.reason


def test_a_pod_one_pool_never_holds_is_told_why_the_pool_that_could_hold_it_is_full() -> None:
    """Routed to a Shared pool that can never hold it, then to the default pool, which could
    but is full now: its reason is the default pool's (insufficient CPU, room may come), not the
    first pool's "never" (the pod would read as if it had to be changed to ever run)."""
    tiny = replace(node("tiny", gpus=0, group="s"), cpu_milli=100)
    shared = one_pool(PoolMode.SHARED, name="s", node_selector=(("group", "s"),))
    cluster = Cluster([tiny, node("d0", gpus=4)], PolicyConfig((shared,), (queue("q"),)), EASY)
    pending = [
        work(PodSpec("hog", 64_000, 128), "q", created_at=0),  # every CPU of d0
        work(PodSpec("cpu", 500, 128), "q", created_at=1),
    ]
    hog, cpu = cluster.cycle(pending, 10.0).decisions
    assert isinstance(hog, Admit)
    assert isinstance(cpu, Wait)
    assert cpu.cause.kind is WaitKind.RESOURCES, cpu.reason
    assert NEVER_FITS not in cpu.reason
    assert "Insufficient cpu" in cpu.reason
