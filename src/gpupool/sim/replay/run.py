"""Replay a list of arrivals through the scheduler on a simulated cluster.

Arrivals only, as in the published protocol: each pod is scheduled once; it is bound or it fails
for good (no retry, no preemption, no departures). The protocol knows no per-GPU pod limit
(shares are bounded by compute and memory only), so the replay sets none
(:data:`PROTOCOL_POLICY`), where a cluster, the demo and ``sim dynamic`` limit every GPU to its
pool's pods per GPU; the placements stay those of the published results. After every event the
replay records the allocated and arrived GPU milli and the cluster's fragmentation against the
metric workload, so that the curves of :mod:`gpupool.sim.replay.metrics` can be drawn.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpupool.core.decisions import Bind, Decision, Reject
from gpupool.core.framework import PlacementPolicy, Scheduler
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot, IntArray
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.spec import PolicyConfig
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.cycle_request import cycle_request
from gpupool.scheduling.decisions import Admit, Wait
from gpupool.scheduling.engine import PolicyEngine
from gpupool.scheduling.fragmentation import FragmentationIndex
from gpupool.scheduling.workload import TargetWorkload

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` every few hundred pods."""

PROGRESS_EVERY = 500
PROTOCOL_POLICY = PolicyConfig(default_pool_max_pods_per_gpu=None)
"""The FGD trace protocol as a policy: no GPUPool, no GPUQueue, no per-GPU pod limit."""


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What one replay measured.

    Attributes:
        total_gpus: GPUs in the cluster.
        used_milli: Allocated GPU milli after each event.
        arrived_milli: Cumulative arrived GPU milli after each event (failed pods included).
        frag_milli: Cluster fragmentation in milli-GPU after each event.
        placed: Pods bound.
        failed: Pods that found no node.
        failure_reasons: For failed pods, the most frequent rejection reason and its count.
        snapshot: The final cluster state.
        wall_seconds: Wall time of the replay loop.
        cpu_seconds: CPU time of this process during the replay loop (steadier than wall time
            on a shared machine).
    """

    total_gpus: int
    used_milli: npt.NDArray[np.int64]
    arrived_milli: npt.NDArray[np.int64]
    frag_milli: npt.NDArray[np.float64]
    placed: int
    failed: int
    failure_reasons: Counter[str]
    snapshot: ClusterSnapshot
    wall_seconds: float
    cpu_seconds: float = 0.0


def _engine_step(
    snapshot: ClusterSnapshot, scheduler: Scheduler, nodes: Sequence[NodeSpec]
) -> Callable[[PodSpec, float], Decision]:
    """One arrival through the policy engine, as a core decision (the replay binds it)."""
    policy = ClusterPolicy.build(PROTOCOL_POLICY, nodes)
    policy.prepare(snapshot)
    engine = PolicyEngine(scheduler, policy)
    ledger = policy.new_ledger()
    running: dict[str, Running] = {}

    def decide(pod: PodSpec, now: float) -> Decision:
        workload = Workload(pod=pod, created_at=now)
        engine.observe(workload)
        outcome = engine.cycle(cycle_request(snapshot, (workload,), running, ledger, now))
        decision = outcome.decisions[0]
        if isinstance(decision, Admit):
            record = decision.running(now)
            running[pod.name] = record
            ledger.add(record)
            return decision.bind
        if isinstance(decision, Wait) and decision.reject is not None:
            return decision.reject
        return Reject(pod=pod, message=str(decision), reasons=())

    return decide


def replay(
    nodes: Sequence[NodeSpec],
    arrivals: Sequence[PodSpec],
    policy: PlacementPolicy,
    metric_workload: TargetWorkload,
    tie_rank: IntArray | None = None,
    progress: ProgressCallback | None = None,
    *,
    policy_engine: bool = False,
) -> ReplayResult:
    """Schedule ``arrivals`` one by one on a fresh cluster of ``nodes``.

    With ``policy_engine`` every pod goes through
    :class:`~gpupool.scheduling.engine.PolicyEngine` with :data:`PROTOCOL_POLICY` (the implicit
    default pool and queue, no limits), as the live scheduler runs it; the placements are the
    same, and ``bench/engine_overhead.py`` measures what the policy layer costs.
    """
    started = time.perf_counter()
    started_cpu = time.process_time()
    snapshot = ClusterSnapshot(nodes)  # no per-GPU pod limit: the protocol's (PROTOCOL_POLICY)
    scheduler = Scheduler(policy, tie_rank)
    decide = _engine_step(snapshot, scheduler, nodes) if policy_engine else None
    fragmentation = FragmentationIndex(snapshot, metric_workload)
    count = len(arrivals)
    used = np.zeros(count, dtype=np.int64)
    arrived = np.zeros(count, dtype=np.int64)
    frag = np.zeros(count, dtype=np.float64)
    reasons: Counter[str] = Counter()
    placed = 0
    arrived_total = 0
    for i, pod in enumerate(arrivals):
        if decide is not None:
            decision = decide(pod, float(i))
        else:
            scheduler.observe(pod)
            decision = scheduler.schedule(snapshot, pod)
        if isinstance(decision, Bind):
            snapshot.bind(pod, decision.node, decision.gpus)
            placed += 1
        else:
            reasons[decision.reasons[0][0] if decision.reasons else decision.message] += 1
        arrived_total += pod.total_gpu_milli
        used[i] = snapshot.used_gpu_milli
        arrived[i] = arrived_total
        frag[i] = fragmentation.refresh(snapshot).sum()
        if progress is not None and (i + 1) % PROGRESS_EVERY == 0:
            progress(i + 1, count)
    if progress is not None:
        progress(count, count)
    return ReplayResult(
        total_gpus=snapshot.total_gpus,
        used_milli=used,
        arrived_milli=arrived,
        frag_milli=frag / fragmentation.total_weight,
        placed=placed,
        failed=count - placed,
        failure_reasons=reasons,
        snapshot=snapshot,
        wall_seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - started_cpu,
    )
