"""Over random gangs, single pods, queues with ceilings and pod limits, and random departures:
no cycle starts a gang with fewer than its minCount pods running, and no quota is exceeded."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.policy.spec import PolicyConfig
from gpupool.policy.workload import Workload
from gpupool.scheduling.decisions import EASY, Admit, GangSpec

from .builders import Cluster, node, one_pool, queue, whole, work

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
