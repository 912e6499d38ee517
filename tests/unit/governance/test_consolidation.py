"""Consolidation's rule: the fewest moves, landing elsewhere, only when they pay, within caps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from gpupool.core.model import MILLI_PER_GPU, NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.governance.consolidation import Inputs, Stuck, consolidate
from gpupool.governance.consolidation_plan import Declined, Move, MoveHistory, Outcome, Plan
from gpupool.policy.spec import ConsolidationMode, ConsolidationSpec
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.disruption import DisruptionBudgets

NOW = 1000.0
ON = ConsolidationSpec(mode=ConsolidationMode.ON, min_wait=300)
REPORT = ConsolidationMode.REPORT_ONLY


def node(name: str, gpus: int = 2) -> NodeSpec:
    return NodeSpec(name, 64_000, 256_000, gpu_count=gpus, gpu_model="A100", gpu_memory_mib=40_960)


def share(name: str, milli: int = 500) -> PodSpec:
    return PodSpec(name, 1000, 1024, gpu_count=1, gpu_milli=milli)


def whole(name: str, count: int = 1) -> PodSpec:
    return PodSpec(name, 1000, 1024, gpu_count=count, gpu_milli=MILLI_PER_GPU)


class Pool:
    """A snapshot with running shares, and the rule's inputs over it."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        self.snapshot = ClusterSnapshot(list(nodes))
        self.running: dict[str, Running] = {}
        self.owners: dict[str, str] = {}

    def run(
        self, pod: PodSpec, node: int, gpu: int, *, owner: str | None = "", gang: str = ""
    ) -> None:
        """Bind ``pod``; ``owner``: its workload key ("" = its own name, None = a bare pod)."""
        self.snapshot.bind(pod, node, (gpu,))
        workload = Workload(pod, gang=gang, workload_class="inference")
        self.running[pod.name] = Running(workload, 0, 0, pod.gpu_milli, node, started_at=0.0)
        if owner is not None:
            self.owners[pod.name] = owner or f"deploy/{pod.name}"

    def inputs(
        self,
        waiting: Sequence[PodSpec],
        settings: ConsolidationSpec = ON,
        ends_in: float = 7200.0,
        **changes: object,
    ) -> Inputs:
        everywhere = np.ones(self.snapshot.size, dtype=np.bool_)
        stuck = [Stuck(Workload(pod), 0, everywhere, since=0.0) for pod in waiting]
        inputs = Inputs(
            snapshot=self.snapshot,
            stuck=stuck,
            running=self.running,
            owners=self.owners,
            pool_nodes=[everywhere],
            settings=[settings],
            expected_ends=lambda: [(NOW + ends_in, name) for name in self.running],
            now=NOW,
        )
        return replace(inputs, **changes)  # type: ignore[arg-type]


def fragmented(nodes: int = 2) -> Pool:
    """Nodes of two GPUs, each GPU half held: a GPU free per node in all, none whole."""
    pool = Pool([node(f"n{row}") for row in range(nodes)])
    for row in range(nodes):
        for gpu in range(2):
            pool.run(share(f"s{row}{gpu}"), row, gpu)
    return pool


def only(outcomes: list[Outcome] | None) -> Outcome:
    assert outcomes is not None
    assert len(outcomes) == 1, outcomes
    return outcomes[0]


def test_one_move_frees_a_whole_gpu_and_the_moved_share_lands_on_the_other_node() -> None:
    pool = fragmented()
    plan = only(consolidate(pool.inputs([whole("w")]), MoveHistory()))
    assert isinstance(plan, Plan)
    assert plan.pays
    assert len(plan.moves) == 1
    move = plan.moves[0]
    assert move.source == plan.node
    assert move.target != plan.node
    # gain: one GPU two hours sooner; loss: half a GPU's ten-minute restart
    assert plan.gain_gpu_seconds == pytest.approx(7200.0)
    assert plan.loss_gpu_seconds == pytest.approx(300.0)


def test_the_snapshot_is_left_as_it_was() -> None:
    pool = fragmented()
    before = (pool.snapshot.gpu_free.copy(), dict(pool.snapshot.allocations))
    consolidate(pool.inputs([whole("w")]), MoveHistory())
    assert np.array_equal(pool.snapshot.gpu_free, before[0])
    assert pool.snapshot.allocations == before[1]


def test_fewest_moves_empty_the_gpu_with_one_holder_not_the_crowded_one() -> None:
    pool = Pool([node("n0"), node("n1", gpus=1)])
    pool.run(share("a", 250), 0, 0)
    pool.run(share("b", 250), 0, 0)
    pool.run(share("c", 500), 0, 1)
    pool.run(share("d", 250), 1, 0)
    pool.run(share("e", 250), 1, 0)
    plan = only(consolidate(pool.inputs([whole("w")]), MoveHistory()))
    assert isinstance(plan, Plan)
    assert [m.pod for m in plan.moves] == ["c"]


def test_no_move_is_made_when_the_waiting_pod_would_start_soon_anyway() -> None:
    pool = fragmented()
    outcome = only(consolidate(pool.inputs([whole("w")], ends_in=100.0), MoveHistory()))
    assert isinstance(outcome, Declined)
    assert outcome.plan is not None
    assert not outcome.plan.pays
    assert "cost more" in outcome.why


def test_a_costly_class_to_restart_is_not_moved_for_a_short_gain() -> None:
    pool = fragmented()
    costly = replace(ON, class_restart_cost=(("inference", 4 * 3600.0),))
    outcome = only(consolidate(pool.inputs([whole("w")], settings=costly), MoveHistory()))
    assert isinstance(outcome, Declined)
    assert outcome.plan is not None
    assert outcome.plan.loss_gpu_seconds == pytest.approx(0.5 * 4 * 3600.0)


def test_moved_pods_must_fit_elsewhere_or_nothing_moves() -> None:
    pool = Pool([node("n0"), node("n1", gpus=1)])
    pool.run(share("a"), 0, 0)
    pool.run(share("b"), 0, 1)
    pool.run(share("full", 1000), 1, 0)
    outcome = only(consolidate(pool.inputs([whole("w")]), MoveHistory()))
    assert isinstance(outcome, Declined)
    assert "nowhere" in outcome.why


def test_bare_pods_and_gang_pods_are_never_moved() -> None:
    pool = Pool([node("n0"), node("n1")])
    pool.run(share("bare"), 0, 0, owner=None)
    pool.run(share("gang-0"), 0, 1, gang="team/g")
    pool.run(share("bare2"), 1, 0, owner=None)
    pool.run(share("gang-1"), 1, 1, gang="team/g")
    outcome = only(consolidate(pool.inputs([whole("w")]), MoveHistory()))
    assert isinstance(outcome, Declined)
    assert "no node" in outcome.why


def test_a_pod_a_disruption_budget_protects_is_not_moved() -> None:
    pool = fragmented()
    covering = {name: ("team/pdb",) for name in pool.running}
    budgets = DisruptionBudgets(allowed={"team/pdb": 0}, covering=covering)
    outcome = only(consolidate(pool.inputs([whole("w")], disruption=budgets), MoveHistory()))
    assert isinstance(outcome, Declined)


def test_a_pod_younger_than_its_queues_min_runtime_is_not_moved() -> None:
    pool = fragmented()
    outcome = only(consolidate(pool.inputs([whole("w")], min_runtime=[NOW + 1]), MoveHistory()))
    assert isinstance(outcome, Declined)


def test_the_pools_hourly_move_limit_holds() -> None:
    pool = fragmented()
    history = MoveHistory()
    done = Plan("earlier", 0, 0, (), 0, 0, 0, 0)
    for i in range(2):
        history.record(replace(done, moves=(_move(f"x{i}"),)), NOW - 100)
    capped = replace(ON, max_moves_per_hour=2)
    outcome = only(consolidate(pool.inputs([whole("w")], settings=capped), history))
    assert isinstance(outcome, Declined)
    assert "limit of 2" in outcome.why
    history_old = MoveHistory()
    history_old.record(replace(done, moves=(_move("x0"), _move("x1"))), NOW - 3700)
    later = only(consolidate(pool.inputs([whole("w")], settings=capped), history_old))
    assert isinstance(later, Plan)


def test_a_workload_moved_within_the_hour_is_not_moved_again() -> None:
    pool = fragmented()
    history = MoveHistory()
    for name in pool.running:
        history.record(Plan("earlier", 0, 0, (_move(name),), 0, 0, 0, 0), NOW - 600)
    outcome = only(consolidate(pool.inputs([whole("w")]), history))
    assert isinstance(outcome, Declined)


def test_two_waiting_pods_never_count_on_the_same_room_or_move_the_same_pod() -> None:
    pool = fragmented(3)
    outcomes = consolidate(pool.inputs([whole("w1"), whole("w2")]), MoveHistory())
    plans = [o for o in outcomes or [] if isinstance(o, Plan)]
    assert len(plans) == 2
    assert plans[0].node != plans[1].node
    moved = [m.pod for p in plans for m in p.moves]
    assert len(moved) == len(set(moved))
    # every moved pod lands where the other plan's waiting pod does not
    assert all(m.target != p.node for p in plans for m in p.moves)


def test_no_plan_for_a_pod_that_has_not_waited_min_wait_or_when_the_pool_is_full() -> None:
    pool = fragmented()
    patient = replace(ON, min_wait=NOW + 1)
    assert consolidate(pool.inputs([whole("w")], settings=patient), MoveHistory()) == []
    assert consolidate(pool.inputs([whole("w", 3)]), MoveHistory()) == []  # 2 GPUs free in all


def test_disabled_pools_make_no_plan_and_report_only_plans_are_marked() -> None:
    pool = fragmented()
    off = ConsolidationSpec()
    assert consolidate(pool.inputs([whole("w")], settings=off), MoveHistory()) == []
    report = replace(ON, mode=ConsolidationMode.REPORT_ONLY)
    plan = only(consolidate(pool.inputs([whole("w")], settings=report), MoveHistory()))
    assert isinstance(plan, Plan)
    assert plan.mode is ConsolidationMode.REPORT_ONLY


def test_a_plans_values_name_the_nodes_and_the_gain() -> None:
    pool = fragmented()
    plan = only(consolidate(pool.inputs([whole("w")]), MoveHistory()))
    assert isinstance(plan, Plan)
    values = plan.values(pool.snapshot.node_names)
    assert values["node"] in ("n0", "n1")
    assert values["moves"] == 1
    assert "->" in str(values["moved"])
    assert values["gain_gpu_hours"] == 2.0


def _move(name: str) -> Move:
    return Move(name, f"deploy/{name}", 0, 1, 0.5, 300.0)


def test_a_second_waiting_pod_gets_no_plan_that_counts_on_the_first_plans_room() -> None:
    pool = fragmented(2)  # room for one whole GPU once a share moves, not for two
    first, second = consolidate(pool.inputs([whole("w1"), whole("w2")]), MoveHistory()) or []
    assert isinstance(first, Plan)
    assert isinstance(second, Declined)


def test_moves_are_searched_at_most_once_a_minute_and_not_at_all_without_fragments() -> None:
    pool = fragmented()
    history = MoveHistory()
    first = consolidate(pool.inputs([whole("w")], settings=replace(ON, mode=REPORT)), history)
    assert first is not None
    assert len(first) == 1
    again = replace(pool.inputs([whole("w")], settings=replace(ON, mode=REPORT)), now=NOW + 59)
    assert consolidate(again, history) is None  # the last search's outcomes stand
    later = replace(again, now=NOW + 60)
    assert consolidate(later, history) is not None
    nothing_waits = replace(later, stuck=[], now=NOW + 61)
    assert consolidate(nothing_waits, history) == []


def test_pods_no_move_can_help_rest_so_that_younger_ones_get_a_turn() -> None:
    pool = Pool([node("n0"), node("n1", gpus=1)])
    pool.run(share("a"), 0, 0)
    pool.run(share("b"), 0, 1)
    pool.run(share("full", 1000), 1, 0)  # the shares of n0 could land nowhere
    everywhere = np.ones(2, dtype=np.bool_)
    waiting = [Stuck(Workload(whole(f"w{i}")), 0, everywhere, since=float(i)) for i in range(3)]
    history = MoveHistory()
    first = consolidate(replace(pool.inputs([]), stuck=waiting), history)
    assert [o.pod for o in first or []] == ["w0", "w1"]  # two a pass, oldest first
    second = consolidate(replace(pool.inputs([]), stuck=waiting, now=NOW + 60), history)
    assert [o.pod for o in second or []] == ["w2"]
    rested = consolidate(replace(pool.inputs([]), stuck=waiting, now=NOW + 660), history)
    assert [o.pod for o in rested or []] == ["w0", "w1"]


def test_a_pod_may_be_planned_onto_the_node_reserved_for_it_and_no_other_pod_may() -> None:
    pool = fragmented(3)
    reserved = np.array([True, False, False])
    mine = consolidate(
        pool.inputs([whole("w")], kept_off=reserved, reserved={0: "w"}), MoveHistory()
    )
    assert isinstance(plan := only(mine), Plan)
    assert plan.node == 0  # n0 had the most room too; reserved for w, it stays open to w
    theirs = consolidate(
        pool.inputs([whole("w")], kept_off=reserved, reserved={0: "other"}), MoveHistory()
    )
    assert isinstance(other := only(theirs), Plan)
    assert other.node != 0
    assert all(move.target != 0 for move in other.moves)
