"""PodDisruptionBudgets in the victim search: preferred around, chosen and counted when needed."""

from __future__ import annotations

import pytest

from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec, QueueSpec
from gpupool.policy.workload import Workload
from gpupool.scheduling.decisions import Admit, CycleRequest, Preempt
from gpupool.scheduling.disruption import DisruptionBudgets

from ..policy.builders import Cluster, node, queue, whole, work

POOL = PoolSpec("p", PoolMode.EXCLUSIVE)
RECLAIM = (queue("a", "p", guaranteed=2), queue("b", "p"))
PRIORITY = (queue("q", "p"),)


def started(
    queues: tuple[QueueSpec, ...], pods: list[tuple[Workload, float]], nodes: int, gpus: int
) -> Cluster:
    cluster = Cluster(
        [node(f"n{i}", gpus=gpus) for i in range(nodes)], PolicyConfig((POOL,), queues)
    )
    for workload, at in pods:
        (decision,) = cluster.cycle([workload], at).decisions
        assert isinstance(decision, Admit), decision
        cluster.start(decision, at)
    return cluster


def decide(cluster: Cluster, arriving: Workload, budgets: DisruptionBudgets) -> Preempt:
    request = CycleRequest(
        cluster.snapshot, [arriving], cluster.running, cluster.ledger, 100.0, disruption=budgets
    )
    (decision,) = cluster.engine.cycle(request).decisions
    assert isinstance(decision, Preempt), decision
    return decision


def keep(allowed: int, *pods: str) -> DisruptionBudgets:
    """One budget, ``b/keep``, allowing ``allowed`` disruptions, over ``pods``."""
    return DisruptionBudgets({"b/keep": allowed}, {pod: ("b/keep",) for pod in pods})


B_BORROWS = [(work(whole("b-old"), "b"), 0.0), (work(whole("b-young"), "b"), 50.0)]
Q_RUNS = [(work(whole("q-old"), "q"), 0.0), (work(whole("q-young"), "q"), 50.0)]


@pytest.mark.parametrize(
    ("queues", "pods", "nodes", "arriving", "budgets", "victims", "violating"),
    [
        pytest.param(
            RECLAIM, B_BORROWS, 1, work(whole("a1"), "a"), DisruptionBudgets(),
            ("b-young",), (), id="no-budget-the-cheapest-victim",
        ),
        pytest.param(
            RECLAIM, B_BORROWS, 1, work(whole("a1"), "a"), keep(0, "b-young"),
            ("b-old",), (), id="reclaim-takes-the-unprotected-victim-though-it-costs-more",
        ),
        pytest.param(
            RECLAIM, B_BORROWS, 1, work(whole("a1"), "a"), keep(0, "b-old", "b-young"),
            ("b-young",), ("b-young",), id="only-protected-victims-chosen-and-counted",
        ),
        pytest.param(
            RECLAIM, B_BORROWS, 1, work(whole("a1"), "a"), keep(1, "b-old", "b-young"),
            ("b-young",), (), id="a-budget-with-a-disruption-left-protects-nothing",
        ),
        pytest.param(
            RECLAIM, B_BORROWS, 1, work(whole("a1", 2), "a"), keep(1, "b-old", "b-young"),
            ("b-old", "b-young"), ("b-old",), id="two-victims-one-disruption-allowed-one-counted",
        ),
        pytest.param(
            PRIORITY, Q_RUNS, 2, work(whole("urgent"), "q", priority=5), keep(0, "q-young"),
            ("q-old",), (), id="priority-prefers-the-node-whose-victim-is-unprotected",
        ),
        pytest.param(
            PRIORITY, Q_RUNS, 2, work(whole("urgent"), "q", priority=5),
            DisruptionBudgets({"b/one": 0, "b/two": 0}, {"q-old": ("b/one", "b/two")}),
            ("q-young",), (), id="a-victim-under-two-budgets-is-protected",
        ),
    ],
)  # fmt: skip
def test_victims_a_budget_protects_are_avoided_when_others_make_room(
    queues: tuple[QueueSpec, ...],
    pods: list[tuple[Workload, float]],
    nodes: int,
    arriving: Workload,
    budgets: DisruptionBudgets,
    victims: tuple[str, ...],
    violating: tuple[str, ...],
) -> None:
    cluster = started(queues, pods, nodes, gpus=2 // nodes)
    decision = decide(cluster, arriving, budgets)
    assert (decision.victims, decision.violating) == (victims, violating)


@pytest.mark.parametrize(
    ("budgets", "victims", "violating"),
    [
        pytest.param(DisruptionBudgets(), ("x", "y"), (), id="none"),
        pytest.param(keep(0, "x"), ("x", "y"), ("x",), id="zero-allowed"),
        pytest.param(keep(1, "x", "y"), ("x", "y"), ("y",), id="the-second-breaks-it"),
        pytest.param(keep(2, "x", "y"), ("x", "y"), (), id="enough-allowed"),
        pytest.param(
            DisruptionBudgets({"b/k": 1}, {"x": ("b/k",), "y": ("b/gone",)}),
            ("x", "y"), ("y",), id="a-budget-with-no-status-allows-nothing",
        ),
    ],
)  # fmt: skip
def test_victims_that_break_a_budget_counted_in_order(
    budgets: DisruptionBudgets, victims: tuple[str, ...], violating: tuple[str, ...]
) -> None:
    assert budgets.violating(victims) == violating


def test_a_disruption_taken_by_one_victim_set_is_not_counted_on_again() -> None:
    budgets = keep(1, "x", "y")
    assert budgets.violating(["y"]) == ()
    assert budgets.after(["x"]).violating(["y"]) == ("y",)
    assert budgets.after(["unrelated"]) is budgets
