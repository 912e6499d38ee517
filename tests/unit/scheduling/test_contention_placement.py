"""A pool's ``spec.contention.avoidAbove``: new pods stay off GPUs the agents report contended."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core.contention_rules import avoid_contention
from gpupool.core.filtering import REASON_CONTENDED, REASON_GPU, REASON_UNHEALTHY, filter_nodes
from gpupool.core.model import InvalidSpecError
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.config import PolicyConfigError, parse_policy
from gpupool.policy.spec import ContentionSpec, PolicyConfig, PoolMode, PoolSpec
from gpupool.scheduling.decisions import Admit, Wait
from gpupool.scheduling.gpu_choice import best_fit_gpus

from ..policy.builders import Cluster, node, share, work

AVOIDING = PoolSpec("s", PoolMode.SHARED, max_pods_per_gpu=8, contention=ContentionSpec(0.5))


def _contended(*scores: float, unhealthy: tuple[int, ...] = ()) -> ClusterSnapshot:
    spec = replace(node("n", gpus=len(scores)), gpu_contention=scores, unhealthy_gpus=unhealthy)
    return ClusterSnapshot([spec])


def test_best_fit_skips_a_contended_gpu_it_would_otherwise_fill() -> None:
    snapshot = _contended(0.8, 0.0)
    snapshot.bind(share("busy", 500), 0, (0,))  # best fit prefers the fuller GPU 0
    assert best_fit_gpus(snapshot, share("new", 250), 0) == (0,)
    avoid_contention(snapshot, [0], 0.5)
    assert best_fit_gpus(snapshot, share("new", 250), 0) == (1,)
    avoid_contention(snapshot, [0], 0.9)  # a pool that tolerates more
    assert best_fit_gpus(snapshot, share("new", 250), 0) == (0,)


def test_a_pod_kept_off_only_by_contention_is_told_so() -> None:
    snapshot = _contended(0.6, 0.5)
    avoid_contention(snapshot, [0], 0.5)  # at the threshold counts
    result = filter_nodes(snapshot, share("new", 250))
    assert result.feasible_count == 0
    assert dict(result.reasons()) == {REASON_CONTENDED: 1}
    assert REASON_GPU not in result.message()


def test_health_and_contention_are_told_apart() -> None:
    snapshot = _contended(0.9, 0.0, unhealthy=(1,))
    avoid_contention(snapshot, [0], 0.5)
    # GPU 1 is calm but broken, GPU 0 healthy but contended: the contention keeps the pod out
    assert dict(filter_nodes(snapshot, share("new", 250)).reasons()) == {REASON_CONTENDED: 1}
    full = _contended(0.0, 0.0, unhealthy=(1,))
    full.bind(share("big", 1000), 0, (0,))
    avoid_contention(full, [0], 0.5)
    assert dict(filter_nodes(full, share("new", 250)).reasons()) == {REASON_UNHEALTHY: 1}


def test_the_pool_setting_steers_the_engine_and_the_wait_names_the_contention() -> None:
    nodes = [replace(node("n", gpus=2), gpu_contention=(0.7, 0.0))]
    cluster = Cluster(nodes, PolicyConfig((AVOIDING,)))
    first, second = (work(share(f"s{i}", 600), created_at=i) for i in range(2))
    decisions = cluster.run([first, second]).decisions
    admit, wait = decisions
    assert isinstance(admit, Admit)
    assert admit.bind.gpus == (1,)  # GPU 0 has room but is contended
    assert isinstance(wait, Wait)
    assert REASON_CONTENDED in wait.cause.text()
    tolerant = replace(AVOIDING, contention=ContentionSpec())
    cluster = Cluster(nodes, PolicyConfig((tolerant,)))
    assert all(isinstance(d, Admit) for d in cluster.run([first, second]).decisions)


def _pool(contention: object) -> list[dict[str, object]]:
    spec = {"mode": "Shared", "contention": contention}
    return [{"kind": "GPUPool", "metadata": {"name": "s"}, "spec": spec}]


def test_the_setting_is_read_from_the_pool_spec() -> None:
    (pool,) = parse_policy(_pool({"avoidAbove": 0.8})).pools
    assert pool.contention == ContentionSpec(0.8)
    (pool,) = parse_policy(_pool(None)).pools
    assert pool.contention.avoid_above is None


@pytest.mark.parametrize(
    ("contention", "message"),
    [
        ({"avoidAbove": 0}, "spec.contention.avoidAbove: must be > 0 and <= 1, got 0"),
        ({"avoidAbove": 1.5}, "spec.contention.avoidAbove: must be > 0 and <= 1"),
        ({"avoidAbove": "high"}, "spec.contention.avoidAbove: must be a number"),
        ({"avoid": 0.5}, "spec.contention: unknown field(s) avoid"),
        ([0.5], "spec.contention: must be a mapping"),
    ],
)
def test_a_bad_setting_names_its_field(contention: object, message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_policy(_pool(contention))


def test_a_node_with_a_score_per_gpu_in_range_only() -> None:
    with pytest.raises(InvalidSpecError, match="gpu_contention"):
        replace(node("n", gpus=2), gpu_contention=(0.5,))
    with pytest.raises(InvalidSpecError, match="gpu_contention"):
        replace(node("n", gpus=2), gpu_contention=(0.5, 1.5))
