"""Over random gangs, single pods, queues with ceilings and pod limits, and random departures:
no cycle starts a gang with fewer than its minCount pods running, and no quota is exceeded; with
priorities and guarantees, preemption and reclaim take whole gangs, a preempting gang binds
nothing until its victims are gone, and reclaim takes only from queues above their guarantee."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.policy.spec import PolicyConfig
from gpupool.policy.workload import Workload
from gpupool.scheduling.decisions import EASY, Admit, GangSpec, Preempt
from gpupool.scheduling.preemption import Rule

from ..policy.builders import Cluster, node, one_pool, queue, whole, work

GANG = st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 2))
"""(pods, minCount, GPUs per pod) of one gang."""


def _cluster() -> Cluster:
    queues = (queue("a", "p", ceiling=8, max_pods=7), queue("b", "p", ceiling=10))
    nodes = [node(f"n{i}", gpus=4) for i in range(3)]
    return Cluster(nodes, PolicyConfig((one_pool(),), queues), EASY)


@settings(max_examples=150, deadline=None)
@given(
    gangs=st.lists(GANG, min_size=1, max_size=6),
    singles=st.lists(st.integers(1, 4), max_size=6),
    leave=st.lists(st.integers(0, 1000), min_size=4, max_size=4),
)
def test_no_gang_starts_below_its_min_count_and_no_quota_is_exceeded(
    gangs: list[tuple[int, int, int]],
    singles: list[int],
    leave: list[int],
) -> None:
    cluster = _cluster()
    pending: list[Workload] = []
    for g, (size, min_count, gpus) in enumerate(gangs):
        team = "a" if g % 2 else "b"
        cluster.gangs[f"{team}/g{g}"] = GangSpec(min(min_count, size))
        pending += [
            replace(work(whole(f"g{g}-{i}", gpus), team, created_at=g), gang=f"{team}/g{g}")
            for i in range(size)
        ]
    pending += [
        work(whole(f"s{i}", gpus), "ab"[i % 2], created_at=10 + i) for i, gpus in enumerate(singles)
    ]
    for step, departure in enumerate(leave):
        result = cluster.run(pending, float(step))
        started = Counter(d.workload.gang for d in result.decisions if isinstance(d, Admit))
        running = Counter(r.workload.gang for r in cluster.running.values())
        for gang, count in started.items():
            if gang:
                assert running[gang] >= cluster.gangs[gang].min_count, (gang, count, running[gang])
        tables = cluster.policy.tables
        assert (cluster.ledger.used <= tables.ceiling).all()
        assert (cluster.ledger.pods <= tables.max_pods).all()
        admitted = {d.workload.name for d in result.decisions if isinstance(d, Admit)}
        pending = [w for w in pending if w.name not in admitted]
        if cluster.running:  # one pod ends (a gang may lose a worker; its peers keep running)
            names = sorted(cluster.running)
            cluster.evict(names[departure % len(names)])


@settings(max_examples=150, deadline=None)
@given(
    gangs=st.lists(st.tuples(GANG, st.sampled_from([0, 10])), min_size=1, max_size=6),
    singles=st.lists(st.tuples(st.integers(1, 4), st.sampled_from([0, 10])), max_size=6),
    leave=st.lists(st.integers(0, 1000), min_size=5, max_size=5),
)
def test_preemption_takes_whole_gangs_and_a_preempting_gang_starts_whole(
    gangs: list[tuple[tuple[int, int, int], int]],
    singles: list[tuple[int, int]],
    leave: list[int],
) -> None:
    """With priorities and guarantees: every victim's gang goes whole; no gang has a pod bound in
    the cycle it preempts; reclaim takes only from a queue above its guarantee; quota holds."""
    queues = (queue("a", "p", guaranteed=6, ceiling=12), queue("b", "p", guaranteed=6))
    nodes = [node(f"n{i}", gpus=4) for i in range(3)]
    cluster = Cluster(nodes, PolicyConfig((one_pool(),), queues))
    pending: list[Workload] = []
    for g, ((size, min_count, gpus), priority) in enumerate(gangs):
        team = "ab"[g % 2]
        cluster.gangs[f"{team}/g{g}"] = GangSpec(min(min_count, size))
        pending += [
            replace(
                work(whole(f"g{g}-{i}", gpus), team, priority=priority, created_at=g),
                gang=f"{team}/g{g}",
            )
            for i in range(size)
        ]
    pending += [
        work(whole(f"s{i}", gpus), "ab"[i % 2], priority=priority, created_at=10 + i)
        for i, (gpus, priority) in enumerate(singles)
    ]
    tables = cluster.policy.tables
    for step, departure in enumerate(leave):
        before = dict(cluster.running)
        result = cluster.run(pending, float(step))
        used = cluster.ledger.used.copy()  # with the cycle's starts: a lender may borrow in it
        preempting = {d.workload.gang for d in result.decisions if isinstance(d, Preempt)}
        started = {d.workload.gang for d in result.decisions if isinstance(d, Admit)}
        assert not (preempting & started) - {""}, "a gang bound pods in the cycle it preempted"
        victims = {v for d in result.decisions if isinstance(d, Preempt) for v in d.victims}
        for name in victims:
            gang = before[name].workload.gang
            if gang:
                assert {n for n, r in before.items() if r.workload.gang == gang} <= victims
        for decision in result.decisions:
            if isinstance(decision, Preempt) and decision.rule is Rule.RECLAIM:
                for name in decision.victims:
                    lender = before[name].queue
                    assert used[lender, 0] > tables.guaranteed[lender, 0], (name, lender)
        assert (cluster.ledger.used <= tables.ceiling).all()
        for name in victims:
            record = cluster.evict(name)
            pending.append(record.workload)
        admitted = {d.workload.name for d in result.decisions if isinstance(d, Admit)}
        pending = [w for w in pending if w.name not in admitted]
        if cluster.running:
            names = sorted(cluster.running)
            cluster.evict(names[departure % len(names)])
