"""A claim pod that finds no room speaks for its shape only when its selectors exclude nothing.

One 4-GPU node runs a 3-GPU pod; a 2-GPU pod cannot start. When the first 2-GPU pod asks by a
claim without selectors, its failure is one of size, so the next 2-GPU pod is skipped this
cycle exactly as behind a pod by extended resource (the dynamic simulation with claims matched
the one without only then). When its selectors admit a single GPU, it failed for them, and the
next pod is tried on its own.
"""

from __future__ import annotations

import pytest

from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec
from gpupool.policy.workload import Running
from gpupool.scheduling.claim_placement import GpuEligibility
from gpupool.scheduling.decisions import Admit, CycleRequest, Wait

from ..policy.builders import Cluster, node, queue, whole, work

SKIPPED = "(found for claim, which asks no more)."


def _cluster() -> Cluster:
    cluster = Cluster(
        [node("n0", gpus=4)], PolicyConfig((PoolSpec("p", PoolMode.EXCLUSIVE),), (queue("q", "p"),))
    )
    busy = work(whole("busy", 3), "q")
    cluster.snapshot.bind(busy.pod, 0, (0, 1, 2))
    record = Running(busy, 0, 0, 3000, 0, 0.0, 9000.0)
    cluster.running["busy"] = record
    cluster.ledger.add(record)
    return cluster


@pytest.mark.parametrize(
    ("columns", "second_skipped"), [(frozenset({0, 1, 2, 3}), True), (frozenset({3}), False)]
)
def test_the_next_pod_of_the_shape_is_skipped_only_behind_a_size_failure(
    columns: frozenset[int], second_skipped: bool
) -> None:
    cluster = _cluster()
    pending = [
        work(whole("claim", 2), "q", created_at=1),
        work(whole("plain", 2), "q", created_at=2),
    ]
    request = CycleRequest(
        cluster.snapshot,
        pending,
        cluster.running,
        cluster.ledger,
        10.0,
        eligibility={"claim": GpuEligibility({0: columns})},
    )
    claim, plain = cluster.engine.cycle(request).decisions
    assert not isinstance(claim, Admit)
    if second_skipped:
        assert isinstance(plain, Wait)
        assert plain.reason.endswith(SKIPPED)
        assert plain.reject is not None  # parked until capacity changes, with that reason
    else:
        assert not (isinstance(plain, Wait) and plain.reason.endswith(SKIPPED))
