"""Why a pod waits is data: the kind and the pods, pools and node it names come from the cycle.

The live applier retries only ordering waits at once, ``/metrics`` counts pending pods by kind,
and the cluster's reason names pods by key: each reads these fields, so each kind is checked
on the cycle that produces it, with the sentence it renders.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core.constraints import NodeConstraints
from gpupool.core.decisions import Reject
from gpupool.policy.spec import PolicyConfig, QueueSpec
from gpupool.scheduling.decisions import EASY, Admit, Wait
from gpupool.scheduling.wait_cause import (
    PENDING_CATEGORIES,
    WaitKind,
    category,
    rejected,
)

from ..policy.builders import Cluster, node, one_pool, queue, whole, work
from .test_reservations import pending, two_busy_nodes


def test_strict_order_holds_the_pods_behind_the_blocked_head_naming_it_and_its_pool() -> None:
    cluster = two_busy_nodes(per_pool=1, backfill=False)
    big, one = cluster.cycle(
        [work(whole("big", 4), "q", created_at=1), work(whole("one"), "q", created_at=2)], 10.0
    ).decisions
    assert isinstance(big, Wait)
    assert big.cause.kind is WaitKind.RESOURCES
    assert isinstance(one, Wait)
    assert (one.cause.kind, one.cause.pods, one.cause.pools) == (WaitKind.BEHIND, ("big",), ("p",))
    assert one.reason == "waiting behind big in pool p"
    assert one.reject is None


def test_a_pod_that_would_delay_a_reservation_names_its_holder_node_and_start() -> None:
    *_, one = two_busy_nodes(per_pool=2).cycle(pending(runtime=9000.0), 10.0).decisions
    assert isinstance(one, Wait)
    cause = one.cause
    assert (cause.kind, cause.pods, cause.node, cause.at) == (
        WaitKind.RESERVATION,
        ("big1",),
        "n0",
        5000.0,
    )
    assert cause.text(instant=lambda at: f"{at / 1000:.0f} ks") == (
        "backfill: would delay big1, reserved on node n0 from 5 ks"
    )


def test_a_queue_at_its_ceiling_waits_for_quota_naming_no_pod() -> None:
    ceiling = queue("q", "p", ceiling=1)
    cluster = Cluster([node("n0", gpus=4)], PolicyConfig((one_pool(),), (ceiling,)), EASY)
    first, second = cluster.cycle(
        [work(whole("a"), "q", created_at=1), work(whole("b"), "q", created_at=2)], 10.0
    ).decisions
    assert isinstance(first, Admit)
    assert isinstance(second, Wait)
    assert (second.cause.kind, second.cause.pods) == (WaitKind.QUOTA, ())
    assert second.reason.startswith("queue q: ceiling 1 GPU units reached in pool p")


def test_a_pod_no_pool_admits_waits_for_a_pool() -> None:
    only_a = replace(one_pool(name="a"), allowed_queues=("other",))
    cluster = Cluster(
        [node("n0", gpus=4)],
        PolicyConfig((only_a,), (queue("q"), QueueSpec("other"))),
        EASY,
    )
    pod = replace(work(whole("x"), "q"), pool="a")
    (waits,) = cluster.cycle([pod], 10.0).decisions
    assert isinstance(waits, Wait)
    assert waits.cause.kind is WaitKind.POOL
    assert waits.reason == "pool a does not admit queue q"


@pytest.mark.parametrize(
    ("reasons", "kind"),
    [
        ((("Insufficient cpu", 1), ("node(s) had untolerated taint", 1)), WaitKind.RESOURCES),
        ((("node(s) had untolerated taint", 2),), WaitKind.NODE_CONSTRAINTS),
        ((), WaitKind.NODE_CONSTRAINTS),
    ],
)
def test_a_rejection_is_a_wait_for_resources_only_if_some_node_lacked_one(
    reasons: tuple[tuple[str, int], ...], kind: WaitKind
) -> None:
    reject = Reject(whole("p"), "0/2 nodes are available.", reasons)
    assert rejected(reject).kind is kind
    assert rejected(reject, never=True).kind is WaitKind.NEVER_FITS


def test_a_selector_no_node_matches_is_a_constraint_wait_that_never_fits() -> None:
    cluster = two_busy_nodes(per_pool=1)
    lost = replace(whole("lost"), constraints=NodeConstraints(node_selector=(("zone", "nowhere"),)))
    (waits,) = cluster.cycle([work(lost, "q")], 10.0).decisions
    assert isinstance(waits, Wait)
    assert waits.cause.kind is WaitKind.NEVER_FITS
    assert "didn't match Pod's node affinity/selector" in waits.reason


def test_every_kind_and_not_tried_is_a_category() -> None:
    assert category(None) == "not_tried"
    assert {category(kind) for kind in WaitKind} | {"not_tried"} == set(PENDING_CATEGORIES)
