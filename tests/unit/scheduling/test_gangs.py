"""A gang starts with at least its minCount pods at once, or none of it does, and holds nothing.

The cases of the issue, on the engine: a gang of 4 one-GPU pods beside 3 free GPUs binds none
until a fourth frees; two gangs of 3 on 4 free GPUs: one starts whole, the other holds nothing
(and a single pod behind it takes the room it left); a gang larger than its queue's ceiling, or
its maxConcurrentPods counted per pod, waits with that reason.
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.policy.spec import PolicyConfig
from gpupool.policy.workload import Workload
from gpupool.scheduling.decisions import EASY, Admit, EngineOptions, GangSpec, Preempt, Wait
from gpupool.scheduling.preemption import Rule
from gpupool.scheduling.wait_cause import WaitKind

from ..policy.builders import Cluster, node, one_pool, queue, whole, work


def _cluster(gpus: int = 4, **quota: object) -> Cluster:
    config = PolicyConfig((one_pool(),), (queue("q", "p", **quota),))  # type: ignore[arg-type]
    return Cluster([node("n0", gpus=gpus)], config, EASY)


def _gang(name: str, size: int, start: int = 0) -> list[Workload]:
    return [
        replace(work(whole(f"{name}-{i}"), "q", created_at=start + i), gang=f"q/{name}")
        for i in range(size)
    ]


def _admitted(decisions: tuple[object, ...]) -> list[str]:
    return [d.workload.name for d in decisions if isinstance(d, Admit)]


def test_a_gang_of_four_beside_three_free_gpus_binds_none_until_a_fourth_frees() -> None:
    cluster = _cluster()
    holder = cluster.run([work(whole("holder"), "q")]).decisions[0]
    assert isinstance(holder, Admit)
    gang = _gang("train", 4, start=10)
    cluster.gangs["q/train"] = GangSpec(4)
    waiting = cluster.run(gang, 20.0).decisions
    assert _admitted(waiting) == []
    for decision in waiting:
        assert isinstance(decision, Wait)
        assert decision.cause.kind is WaitKind.GANG
        assert decision.reason.startswith("gang q/train: 3 of the 4 pods it needs at once fit")
    assert int(cluster.ledger.used.sum()) == 1000  # nothing charged for the gang
    cluster.evict("holder")
    assert _admitted(cluster.run(gang, 30.0).decisions) == [w.name for w in gang]


def test_of_two_gangs_of_three_on_four_gpus_one_starts_whole_and_a_pod_takes_the_rest() -> None:
    cluster = _cluster()
    first, second = _gang("a", 3), _gang("b", 3, start=10)
    cluster.gangs |= {"q/a": GangSpec(3), "q/b": GangSpec(3)}
    single = work(whole("single"), "q", created_at=20)
    result = cluster.run([*first, *second, single], 30.0).decisions
    assert _admitted(result) == [*(w.name for w in first), "single"]
    assert all(isinstance(d, Wait) and d.cause.kind is WaitKind.GANG for d in result[3:6])


def test_a_gang_above_its_queues_ceiling_waits_with_the_quota_reason() -> None:
    cluster = _cluster(ceiling=2)
    cluster.gangs["q/big"] = GangSpec(3)
    decisions = cluster.run(_gang("big", 3)).decisions
    assert _admitted(decisions) == []
    reason = decisions[0].reason  # type: ignore[attr-defined]
    assert reason == "gang q/big of 3 pods: queue q: ceiling 2 GPU units reached in pool p"


def test_max_concurrent_pods_counts_every_pod_of_the_gang() -> None:
    cluster = _cluster(max_pods=2)
    cluster.gangs["q/trio"] = GangSpec(3)
    decisions = cluster.run(_gang("trio", 3)).decisions
    assert _admitted(decisions) == []
    assert "maxConcurrentPods 2 reached" in decisions[0].reason  # type: ignore[attr-defined]


def test_min_count_starts_the_gang_with_what_fits_and_the_rest_waits_alone() -> None:
    cluster = _cluster(gpus=2)
    cluster.gangs["q/elastic"] = GangSpec(2)
    decisions = cluster.run(_gang("elastic", 3)).decisions
    assert _admitted(decisions) == ["elastic-0", "elastic-1"]
    last = decisions[2]
    assert isinstance(last, Wait)
    assert last.cause.kind is WaitKind.RESOURCES


def test_running_pods_of_the_gang_count_toward_its_min_count() -> None:
    cluster = _cluster()
    gang = _gang("job", 4)
    cluster.gangs["q/job"] = GangSpec(4)
    assert len(_admitted(cluster.run(gang).decisions)) == 4
    cluster.evict("job-3")  # one worker is replaced: it may start alone, its peers run
    assert _admitted(cluster.run(gang[3:], 10.0).decisions) == ["job-3"]


def test_a_pod_whose_pod_group_is_unknown_waits_for_it() -> None:
    cluster = _cluster()
    (decision,) = cluster.run(_gang("early", 1)).decisions
    assert isinstance(decision, Wait)
    assert (decision.cause.kind, decision.reason) == (
        WaitKind.GANG,
        "waiting for PodGroup q/early",
    )


def test_a_gang_with_fewer_pods_than_its_min_count_waits_for_the_rest_and_holds_nothing() -> None:
    cluster = _cluster()
    cluster.gangs["q/partial"] = GangSpec(4)
    decisions = cluster.run(_gang("partial", 2)).decisions
    assert _admitted(decisions) == []
    assert decisions[0].reason == (  # type: ignore[attr-defined]
        "gang q/partial: 2 of the 4 pods it needs are pending"
    )


def test_preemption_that_takes_one_pod_of_a_gang_takes_the_whole_gang() -> None:
    """Two one-GPU nodes hold a gang of two; a higher-priority pod needs one GPU: the worker
    it evicts would leave its peer holding the other GPU for nothing, so both go."""
    config = PolicyConfig((one_pool(),), (queue("q", "p"),))
    cluster = Cluster([node("n0", gpus=1), node("n1", gpus=1)], config, EASY)
    cluster.gangs["q/pair"] = GangSpec(2)
    assert len(_admitted(cluster.run(_gang("pair", 2)).decisions)) == 2
    (urgent,) = cluster.run([work(whole("urgent"), "q", priority=10, created_at=5)], 10.0).decisions
    assert isinstance(urgent, Preempt), urgent
    assert sorted(urgent.victims) == ["pair-0", "pair-1"]


def test_a_gang_whose_pod_group_says_single_loses_only_the_pod_preemption_takes() -> None:
    config = PolicyConfig((one_pool(),), (queue("q", "p"),))
    cluster = Cluster([node("n0", gpus=1), node("n1", gpus=1)], config, EASY)
    cluster.gangs["q/pair"] = GangSpec(2, evict_alone=True)  # disruptionMode: single
    assert len(_admitted(cluster.run(_gang("pair", 2)).decisions)) == 2
    (urgent,) = cluster.run([work(whole("urgent"), "q", priority=10, created_at=5)], 10.0).decisions
    assert isinstance(urgent, Preempt), urgent
    assert len(urgent.victims) == 1


def _two_nodes_with_a_low_gang_on_one() -> tuple[Cluster, list[Workload]]:
    """n0's four GPUs run a gang of four at priority 0; n1 runs one bystander of three GPUs."""
    config = PolicyConfig((one_pool(),), (queue("q", "p"),))
    cluster = Cluster([node("n0", gpus=4), node("n1", gpus=4)], config, EASY)
    cluster.gangs |= {"q/low": GangSpec(4), "q/high": GangSpec(5)}
    low = _gang("low", 4)
    assert len(_admitted(cluster.run(low).decisions)) == 4
    bystander = work(whole("bystander", 3), "q", created_at=1)
    assert _admitted(cluster.run([bystander], 60.0).decisions) == ["bystander"]
    assert {cluster.running[w.name].node for w in low} == {0}
    return cluster, low


def test_a_high_priority_gang_preempts_a_whole_lower_gang_and_nothing_else() -> None:
    """Five one-GPU pods at priority 10 beside one free GPU: evicting the low gang frees four,
    enough with the free one; the bystander (three GPUs, started later, cheaper to lose by
    itself) is not touched, and no pod of the high gang binds before its victims are gone."""
    cluster, low = _two_nodes_with_a_low_gang_on_one()
    high = [replace(w, priority=10) for w in _gang("high", 5, start=100)]
    decisions = cluster.run(high, 200.0).decisions
    assert _admitted(decisions) == []
    preempts = [d for d in decisions if isinstance(d, Preempt)]
    assert sorted(v for d in preempts for v in d.victims) == sorted(w.name for w in low)
    waits = [d for d in decisions if isinstance(d, Wait)]
    assert len(preempts) + len(waits) == 5
    assert all(d.cause.kind is WaitKind.PREEMPTING for d in waits)
    for victim in low:
        cluster.evict(victim.name)
    assert _admitted(cluster.run(high, 210.0).decisions) == [w.name for w in high]
    assert "bystander" in cluster.running


def test_a_gang_that_victims_cannot_make_room_for_whole_evicts_nothing() -> None:
    """Six pods at priority 10 need six GPUs; the low gang frees four and the bystander may not
    be taken (same priority 10): nothing is evicted, the gang waits saying how many fit."""
    cluster, _ = _two_nodes_with_a_low_gang_on_one()
    cluster.running["bystander"] = replace(
        cluster.running["bystander"],
        workload=replace(cluster.running["bystander"].workload, priority=10),
    )
    cluster.gangs["q/high"] = GangSpec(6)
    high = [replace(w, priority=10) for w in _gang("high", 6, start=100)]
    decisions = cluster.run(high, 200.0).decisions
    assert not any(isinstance(d, Preempt) for d in decisions)
    assert all(isinstance(d, Wait) and d.cause.kind is WaitKind.GANG for d in decisions)
    assert decisions[0].reason.startswith(  # type: ignore[attr-defined]
        "gang q/high: 1 of the 6 pods it needs at once fit"
    )


def test_a_gang_waiting_for_its_victims_does_not_search_again() -> None:
    cluster, low = _two_nodes_with_a_low_gang_on_one()
    high = [replace(w, priority=10) for w in _gang("high", 5, start=100)]
    first = cluster.run(high, 200.0).decisions
    assert any(isinstance(d, Preempt) for d in first)
    again = cluster.run(high, 201.0).decisions  # the victims still run
    assert not any(isinstance(d, Preempt) for d in again)
    assert {d.cause.kind for d in again} == {WaitKind.PREEMPTING}  # type: ignore[union-attr]
    assert "n0" in again[0].reason  # type: ignore[union-attr]
    assert all(w.name in cluster.running for w in low)


def _a_gang_blocked_behind_a_holder(options: EngineOptions) -> tuple[Cluster, list[Workload]]:
    """One 4-GPU node; a holder of three GPUs ends at t=100; a gang of two 2-GPU pods waits."""
    config = PolicyConfig((one_pool(),), (queue("q", "p"),))
    cluster = Cluster([node("n0", gpus=4)], config, options)
    cluster.gangs["q/pair"] = GangSpec(2)
    assert _admitted(cluster.run([work(whole("holder", 3), "q", runtime=100)]).decisions)
    pair = [
        replace(work(whole(f"pair-{i}", 2), "q", created_at=1 + i, runtime=50), gang="q/pair")
        for i in range(2)
    ]
    return cluster, pair


def test_a_blocked_gang_holds_a_reservation_a_long_pod_behind_it_may_not_delay() -> None:
    cluster, pair = _a_gang_blocked_behind_a_holder(EngineOptions())
    long = work(whole("long"), "q", created_at=5, runtime=1000)
    short = work(whole("short"), "q", created_at=6, runtime=20)
    decisions = cluster.run([*pair, long, short], 10.0).decisions
    assert _admitted(decisions) == ["short"]  # it ends before the gang's reserved start
    (waiting,) = [d for d in decisions if d.workload.name == "long"]
    assert isinstance(waiting, Wait)
    assert waiting.cause.kind is WaitKind.RESERVATION
    assert waiting.cause.pods[0].startswith("pair-")
    cluster.evict("holder")
    cluster.evict("short")
    assert _admitted(cluster.run([*pair, long], 100.0).decisions) == ["pair-0", "pair-1"]


def test_without_gang_reservations_the_long_pod_takes_the_gpu_the_gang_waits_for() -> None:
    cluster, pair = _a_gang_blocked_behind_a_holder(EngineOptions(gang_reservations=False))
    long = work(whole("long"), "q", created_at=5, runtime=1000)
    assert _admitted(cluster.run([*pair, long], 10.0).decisions) == ["long"]


def _racks() -> Cluster:
    """Rack (label ``group``) a: one 2-GPU node; b: two 2-GPU nodes; a 4-GPU node of none."""
    config = PolicyConfig((one_pool(),), (queue("q", "p"),))
    nodes = [
        node("a0", gpus=2, group="a"),
        node("b0", gpus=2, group="b"),
        node("b1", gpus=2, group="b"),
        node("x0", gpus=4),
    ]
    return Cluster(nodes, config, EASY)


def test_a_gang_with_a_topology_key_starts_within_one_domain_of_it() -> None:
    cluster = _racks()
    cluster.gangs["q/ring"] = GangSpec(3, topology_key="group")
    decisions = cluster.run(_gang("ring", 3)).decisions
    assert len(_admitted(decisions)) == 3
    nodes = {cluster.snapshot.node_names[cluster.running[w.name].node] for w in _gang("ring", 3)}
    assert nodes <= {"b0", "b1"}, nodes


def test_a_gang_no_domain_holds_waits_though_the_cluster_could_hold_it() -> None:
    cluster = _racks()
    cluster.gangs["q/big"] = GangSpec(5, topology_key="group")  # 6 labelled GPUs, 4 per rack
    decisions = cluster.run(_gang("big", 5)).decisions
    assert _admitted(decisions) == []
    assert decisions[0].reason.startswith(  # type: ignore[attr-defined]
        "gang q/big: 4 of the 5 pods it needs at once fit"
    )


def test_a_gang_with_pods_running_adds_only_to_their_domain() -> None:
    cluster = _racks()
    cluster.gangs["q/job"] = GangSpec(2, topology_key="group")
    gang = _gang("job", 2)
    assert len(_admitted(cluster.run(gang).decisions)) == 2
    (first,) = {cluster.snapshot.node_names[cluster.running[w.name].node][0] for w in gang}
    cluster.evict("job-1")  # a replaced worker: its peer holds its rack
    assert _admitted(cluster.run(gang[1:], 10.0).decisions) == ["job-1"]
    assert cluster.snapshot.node_names[cluster.running["job-1"].node][0] == first


def test_reclaim_for_a_queue_under_its_guarantee_takes_the_borrowers_whole_gang() -> None:
    """Queue "owner" is guaranteed the node's four GPUs; "borrower" runs a gang of four on them;
    the owner's pod of one GPU reclaims one, and that pod brings its whole gang."""
    config = PolicyConfig(
        (one_pool(),), (queue("owner", "p", guaranteed=4), queue("borrower", "p"))
    )
    cluster = Cluster([node("n0", gpus=4)], config, EASY)
    cluster.gangs["borrower/job"] = GangSpec(4)
    gang = [
        replace(work(whole(f"job-{i}"), "borrower", created_at=i), gang="borrower/job")
        for i in range(4)
    ]
    assert len(_admitted(cluster.run(gang).decisions)) == 4
    (reclaim,) = cluster.run([work(whole("mine"), "owner", created_at=10)], 20.0).decisions
    assert isinstance(reclaim, Preempt), reclaim
    assert reclaim.rule is Rule.RECLAIM
    assert sorted(reclaim.victims) == [w.name for w in gang]
