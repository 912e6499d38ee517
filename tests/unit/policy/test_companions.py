"""A pod whose GPUs another holding carries (a DRA claim only it reserves) frees them when it goes.

The live scheduler holds a claim's GPUs under ``claim:<uid>`` and the pod's CPU and memory under
the pod; :attr:`Running.companions` names the claim. The victim search and the backfill
reservation release the companions with the pod: without that, evicting a claim pod (or its
end) would free no GPU in their what-ifs, so no claim pod could ever be preempted or reclaimed,
and no large pod's reservation would count on a claim pod's end.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core.model import PodSpec
from gpupool.policy.spec import PolicyConfig
from gpupool.policy.workload import Running
from gpupool.scheduling.decisions import EASY, Preempt, Wait

from .builders import Cluster, node, one_pool, queue, whole, work

CLAIM = "claim:uid-c"


def _claim_pod_running(companions: tuple[str, ...], end: float = 5000.0) -> Cluster:
    """n0's four GPUs held by a claim; the low-priority pod that alone reserves it runs there."""
    cluster = Cluster(
        [node("n0", gpus=4)],
        PolicyConfig((one_pool(),), (queue("q", "p"),)),
        replace(EASY, reservations_per_pool=1),
    )
    cluster.snapshot.bind(whole(CLAIM, 4), 0, (0, 1, 2, 3))
    low = work(PodSpec("low", 1000, 1024), "q", priority=1)
    cluster.snapshot.bind(low.pod, 0)
    record = Running(low, 0, 0, 4000, 0, 0.0, end, companions)
    cluster.running["low"] = record
    cluster.ledger.add(record)
    return cluster


@pytest.mark.parametrize("companions", [(CLAIM,), ()], ids=["companion", "none"])
def test_a_claim_pod_is_preempted_only_when_its_claim_counts_as_freed(
    companions: tuple[str, ...],
) -> None:
    cluster = _claim_pod_running(companions)
    urgent = work(whole("urgent", 2), "q", priority=100, created_at=1)
    (decision,) = cluster.cycle([urgent], 10.0).decisions
    if companions:
        assert isinstance(decision, Preempt)
        assert decision.victims == ("low",)
    else:
        assert isinstance(decision, Wait)
    assert cluster.snapshot.allocations[CLAIM].gpus == (0, 1, 2, 3)  # the what-if restored
    assert "low" in cluster.snapshot.allocations


@pytest.mark.parametrize("companions", [(CLAIM,), ()], ids=["companion", "none"])
def test_a_reservation_counts_on_the_claim_pods_end(companions: tuple[str, ...]) -> None:
    """The big pod's reservation starts when the claim pod ends (none: nothing frees the GPUs).

    The long pod behind asks no GPU and leaves big its room at that start, so it starts either
    way.
    """
    cluster = _claim_pod_running(companions)
    big = work(whole("big", 4), "q", created_at=1)
    behind = work(PodSpec("behind", 1000, 1024), "q", created_at=2, runtime=9000.0)
    result = cluster.cycle([big, behind], 10.0)
    first, second = result.decisions
    assert isinstance(first, Wait)
    reservations = result.reservations.get(0, ())
    if companions:
        assert [(r.pod, r.start_at) for r in reservations] == [("big", 5000.0)]
    else:
        assert reservations == ()  # nothing it knows of ever frees the GPUs
    assert not isinstance(second, Wait)
