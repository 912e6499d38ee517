"""gpupool's own policy: online learning, tie-breaks, and its explanations."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NoReturn, overload

import numpy as np
import pytest

from gpupool.core.decisions import Bind
from gpupool.core.framework import Scheduler
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.online_workload import OnlineWorkload
from gpupool.scheduling.policies.fgd import FGDPolicy
from gpupool.scheduling.policies.gpupool_default import TIE_BREAK_WEIGHT, GpupoolPolicy
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.scheduling.workload import TargetWorkload, shape_key
from gpupool.sim.replay.run import replay

SHARE = PodSpec("share", 2000, 1024, gpu_count=1, gpu_milli=500)
WHOLE = PodSpec("whole", 4000, 1024, gpu_count=1, gpu_milli=1000)
CPU_ONLY = PodSpec("cpu", 4000, 1024)


class Untouchable(Sequence[PodSpec]):
    """A trace that fails the test if anyone looks at it."""

    def _fail(self) -> NoReturn:
        raise AssertionError("the default policy looked at the whole trace")

    def __len__(self) -> int:
        self._fail()

    @overload
    def __getitem__(self, index: int) -> PodSpec: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[PodSpec]: ...
    def __getitem__(self, index: int | slice) -> PodSpec | Sequence[PodSpec]:
        self._fail()

    def __iter__(self) -> Iterator[PodSpec]:
        self._fail()


def nodes(count: int, gpus: int = 4, cpu: int = 32_000) -> list[NodeSpec]:
    return [NodeSpec(f"n{i}", cpu, 131_072, gpus, "A100") for i in range(count)]


def test_default_policy_is_never_handed_the_trace() -> None:
    policy = build_policy("default", PolicyContext(np.random.default_rng(0), Untouchable()))
    assert isinstance(policy, GpupoolPolicy)
    arrivals = [
        PodSpec(f"p{i}", 1000, 512, gpu_count=1, gpu_milli=[250, 500, 1000][i % 3])
        for i in range(30)
    ]
    seen: list[str] = []
    original = policy.learner.observe

    def spy(pod: PodSpec) -> None:
        seen.append(pod.name)
        original(pod)

    policy.learner.observe = spy  # type: ignore[method-assign]
    workload = TargetWorkload.from_pods(arrivals)
    result = replay(nodes(5), arrivals, policy, workload)
    assert seen == [pod.name for pod in arrivals]  # one at a time, in arrival order
    assert result.placed == 30


def test_learned_mix_follows_the_arrivals() -> None:
    learner = OnlineWorkload(half_life=1e9, rebuild_every=5)
    assert learner.current() is None
    for _ in range(30):
        learner.observe(SHARE)
    for _ in range(10):
        learner.observe(WHOLE)
    shares = learner.shares()
    assert shares[shape_key(SHARE)] == pytest.approx(0.75)
    assert shares[shape_key(WHOLE)] == pytest.approx(0.25)
    built = learner.current()
    assert built is not None
    assert sorted(built.gpu_milli.tolist()) == [500, 1000]
    assert built.weight.tolist() == [1000.0, 333.0]  # integer weights, heaviest = 1000


def test_decay_forgets_old_shapes() -> None:
    learner = OnlineWorkload(half_life=10, rebuild_every=1)
    for _ in range(10):
        learner.observe(SHARE)
    for _ in range(50):
        learner.observe(WHOLE)
    assert learner.shares()[shape_key(SHARE)] < 0.05
    built = learner.current()
    assert built is not None
    assert built.gpu_milli.tolist() == [1000]  # the share fell out of the 95% coverage


def test_workload_is_rebuilt_every_pod_while_warming_up_then_every_n() -> None:
    learner = OnlineWorkload(rebuild_every=3)
    builds = []
    for i in range(9):
        learner.observe(SHARE if i % 2 else WHOLE)
        builds.append(learner.current())
    distinct = [id(b) for b in builds]
    assert len(set(distinct[:3])) == 3  # warm-up: each of the first 3 arrivals rebuilds
    assert distinct[2] == distinct[3] == distinct[4]  # then every 3rd arrival
    assert distinct[5] == distinct[6] == distinct[7] != distinct[4]
    assert distinct[8] != distinct[7]


@pytest.mark.parametrize(("argument", "value"), [("half_life", 0.0), ("rebuild_every", 0)])
def test_learner_rejects_bad_settings(argument: str, value: float) -> None:
    with pytest.raises(ValueError, match=argument):
        OnlineWorkload(**{argument: value})  # type: ignore[arg-type]


def test_cpu_only_pod_goes_where_gpus_are_already_taken() -> None:
    snapshot = ClusterSnapshot(nodes(3))
    snapshot.bind(PodSpec("a", 1000, 1, gpu_count=1, gpu_milli=1000), 1, (0,))
    snapshot.bind(PodSpec("b", 1000, 1, gpu_count=2, gpu_milli=1000), 2, (0, 1))
    policy = GpupoolPolicy()
    decision = Scheduler(policy).schedule(snapshot, CPU_ONLY)
    assert isinstance(decision, Bind)
    assert decision.node == 2  # least free GPU; equal FGD score on every node
    bonus, _ = policy.tie_break(snapshot, CPU_ONLY)
    assert bonus.tolist() == pytest.approx(
        [TIE_BREAK_WEIGHT * (1 - 4000 / 8000), TIE_BREAK_WEIGHT * (1 - 3000 / 8000),
         TIE_BREAK_WEIGHT * (1 - 2000 / 8000)]
    )  # fmt: skip


def test_whole_gpu_pod_prefers_a_node_in_use_over_the_fixed_order() -> None:
    snapshot = ClusterSnapshot(nodes(3))
    snapshot.bind(PodSpec("cpu-hog", 1000, 1), 2, ())
    policy = GpupoolPolicy()
    for _ in range(20):
        policy.observe(WHOLE)
    # Every node scores the same for a whole GPU; the fixed order alone would pick node 0.
    scores = FGDPolicy.score(policy, snapshot, WHOLE, np.ones(3, dtype=np.bool_))
    assert len(set(scores.tolist())) == 1
    decision = Scheduler(policy, tie_rank=np.array([0, 1, 2])).schedule(snapshot, WHOLE)
    assert isinstance(decision, Bind)
    assert (decision.node, decision.gpus) == (2, (0,))


def test_fragmentation_still_decides_before_any_tie_break() -> None:
    # The learned mix is 600-milli shares. Node 0's GPU has a 500-milli gap that is useless to
    # them, and a 500 share fills it; node 1's GPU is whole, and the share would leave a useless
    # gap there. Both nodes run a pod, so the tie-break bonus is the same.
    snapshot = ClusterSnapshot(nodes(2, gpus=1))
    snapshot.bind(PodSpec("half", 1000, 1, gpu_count=1, gpu_milli=500), 0, (0,))
    snapshot.bind(PodSpec("cpu-pod", 1000, 1), 1, ())
    policy = GpupoolPolicy()
    for i in range(10):
        policy.observe(PodSpec(f"s{i}", 2000, 1024, gpu_count=1, gpu_milli=600))
    scheduler = Scheduler(policy, tie_rank=np.array([1, 0]))
    scheduler.observe(SHARE)  # the caller shows the arrival once; schedule() learns nothing
    decision = scheduler.schedule(snapshot, SHARE)
    assert isinstance(decision, Bind)
    assert decision.node == 0
    chosen, other = policy.explain(snapshot, SHARE, 0), policy.explain(snapshot, SHARE, 1)
    # The arriving 500 share was observed too: the mix is 10 x 600 and 1 x 500, so the
    # 500-milli gap is a fragment for 10/11 of the expected pods.
    assert chosen.fragmentation_before == pytest.approx(0.5 * 10 / 11)
    assert chosen.fragmentation_after == 0.0
    assert other.fragmentation_before == 0.0
    assert other.fragmentation_after == pytest.approx(0.5 * 10 / 11)
    # The hole term: on node 1 the free GPU is expected to keep 400 milli for good with 10/11
    # (a 600 share fills it, nothing fits the rest), and a 500 leaves a hole the next 500
    # closes: E drops by 4000/11 milli, twice that counts, and lifts the score from 38 to 56;
    # the gap on node 0 is closed for good either way (E(500) = E(0) = 0), so 61 stays.
    assert (chosen.leftover_change, other.leftover_change) == pytest.approx((0.0, -0.8 / 1.1))
    assert (chosen.fgd_score, other.fgd_score) == (61.0, 56.0)
    assert chosen.tie_break == other.tie_break


def test_explain_matches_the_score_it_explains() -> None:
    snapshot = ClusterSnapshot(nodes(3, gpus=2))
    snapshot.bind(PodSpec("x", 8000, 1, gpu_count=1, gpu_milli=700), 1, (1,))
    policy = GpupoolPolicy()
    for pod in (SHARE, WHOLE, CPU_ONLY, SHARE):
        policy.observe(pod)
    mask = np.ones(3, dtype=np.bool_)
    scores = policy.score(snapshot, SHARE, mask)
    for node in range(3):
        why = policy.explain(snapshot, SHARE, node)
        assert why.total == pytest.approx(scores[node])
        assert why.total == pytest.approx(why.fgd_score + why.tie_break[0])
        assert why.node == f"n{node}"
        delta = why.fragmentation_before - why.fragmentation_after - why.leftover_change
        expected = np.trunc(100 / (1 + np.exp(-delta)))
        assert why.fgd_score == expected
        assert f"n{node}: fragmentation" in str(why)
    assert policy.explain(snapshot, SHARE, 1).gpus == (0,)  # GPU 1 has only 300 milli left


def test_online_workload_forgets_shapes_beyond_its_bound() -> None:
    from gpupool.scheduling.online_workload import MAX_SHAPES

    workload = OnlineWorkload(half_life=100.0)
    for i in range(3 * MAX_SHAPES):  # every arrival a new shape
        workload.observe(
            PodSpec(f"p{i}", cpu_milli=1000 + i, memory_mib=1024, gpu_count=1, gpu_milli=500)
        )
    assert len(workload.shares()) <= MAX_SHAPES
    newest = max(workload.shares().items(), key=lambda item: item[1])[0]
    assert newest[0] == 1000 + 3 * MAX_SHAPES - 1  # the latest arrivals are the ones kept
