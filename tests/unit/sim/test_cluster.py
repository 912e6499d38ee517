"""The simulated cluster both simulations drive: starts, ends, evictions and stale ends."""

from __future__ import annotations

import numpy as np

from gpupool.core.framework import Scheduler
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.policy.spec import PolicyConfig, QueueSpec
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.decisions import Admit, Preempt
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.sim.cluster import SimulatedCluster


class Recorded(SimulatedCluster):
    """Writes down what the hooks hear, in order."""

    def __init__(self, config: PolicyConfig) -> None:
        nodes = [NodeSpec("n0", 64_000, 512_000, gpu_count=4, gpu_model="H100")]
        policy = build_policy("default", PolicyContext(np.random.default_rng(0), ()))
        super().__init__(nodes, config, Scheduler(policy, np.arange(1, dtype=np.int64)))
        self.heard: list[tuple[str, str, float]] = []

    def on_start(self, decision: Admit, record: Running) -> None:
        self.heard.append(("start", record.workload.name, self.now))

    def on_release(self, record: Running) -> None:
        self.heard.append(("release", record.workload.name, self.now))

    def on_evict(self, record: Running, decision: Preempt) -> None:
        self.heard.append(("evict", record.workload.name, self.now))

    def on_finish(self, record: Running) -> None:
        self.heard.append(("finish", record.workload.name, self.now))


def whole(name: str, gpus: int, priority: int = 0) -> Workload:
    pod = PodSpec(name, 1000, 1024, gpu_count=gpus, gpu_milli=1000)
    return Workload(pod=pod, namespace="a", priority=priority, workload_class="training")


def test_a_pod_runs_its_duration_and_gives_its_gpus_back() -> None:
    cluster = Recorded(PolicyConfig())
    cluster.arrive(whole("p", 4), duration=100.0)
    assert cluster.run_cycles()
    assert not cluster.run_cycles()  # nothing changed since
    assert int(cluster.snapshot.gpu_free.sum()) == 0
    assert cluster.next_end() == 100.0
    finished = cluster.end_next()
    assert finished is not None
    assert finished.workload.name == "p"
    assert cluster.now == 100.0
    assert int(cluster.snapshot.gpu_free.sum()) == 4000
    assert int(cluster.ledger.used.sum()) == 0
    assert cluster.heard == [("start", "p", 0.0), ("release", "p", 100.0), ("finish", "p", 100.0)]


def test_an_evicted_pods_old_end_is_stale_and_its_rerun_keeps_its_whole_duration() -> None:
    cluster = Recorded(PolicyConfig(queues=(QueueSpec("a", frozenset({"a"})),)))
    cluster.arrive(whole("low", 4), duration=100.0)
    cluster.run_cycles()
    cluster.now = 10.0
    cluster.arrive(whole("high", 4, priority=100), duration=50.0)
    cluster.run_cycles()  # preempts low, then starts high in the next round
    assert set(cluster.running) == {"high"}
    assert set(cluster.pending) == {"low"}
    assert cluster.end_next() is not None  # high ends at 60
    assert cluster.now == 60.0
    cluster.run_cycles()
    assert set(cluster.running) == {"low"}
    assert cluster.end_next() is None  # low's first end, at 100: stale
    assert set(cluster.running) == {"low"}
    assert cluster.next_end() == 160.0  # its whole duration again
    assert cluster.heard == [
        ("start", "low", 0.0),
        ("release", "low", 10.0),
        ("evict", "low", 10.0),
        ("start", "high", 10.0),
        ("release", "high", 60.0),
        ("finish", "high", 60.0),
        ("start", "low", 60.0),
    ]


def test_a_withdrawn_pod_is_gone_and_its_end_is_stale() -> None:
    cluster = Recorded(PolicyConfig())
    cluster.arrive(whole("p", 2), duration=100.0)
    cluster.arrive(whole("q", 4), duration=100.0)
    cluster.run_cycles()
    cluster.withdraw("p")
    cluster.withdraw("q")  # pending: simply gone
    assert not cluster.running
    assert not cluster.pending
    assert cluster.end_next() is None
    assert int(cluster.snapshot.gpu_free.sum()) == 4000
    assert not cluster.run_cycles()  # changed, but nobody waits
