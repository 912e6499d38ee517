"""Small builders for the policy and engine tests: nodes, pods, workloads, compiled policies."""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.core.framework import Scheduler
from gpupool.core.model import MILLI_PER_GPU, NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec, QueueSpec, QuotaSpec
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.decisions import Admit, CycleRequest, CycleResult, EngineOptions, GangSpec
from gpupool.scheduling.engine import PolicyEngine
from gpupool.scheduling.policies.bestfit import BestFitPolicy


def node(
    name: str,
    gpus: int = 4,
    group: str = "",
    model: str = "A100",
    memory: int = 40_960,
    mig: tuple[tuple[str, int], ...] = (),
) -> NodeSpec:
    labels = (("group", group),) if group else ()
    return NodeSpec(
        name=name,
        cpu_milli=64_000,
        memory_mib=256_000,
        gpu_count=gpus,
        gpu_model=model if gpus else "",
        gpu_memory_mib=memory if gpus else 0,
        mig_slices=mig,
        labels=labels,
    )


def whole(name: str, count: int = 1) -> PodSpec:
    return PodSpec(name, 1000, 1024, gpu_count=count, gpu_milli=MILLI_PER_GPU)


def share(name: str, milli: int = 250, memory: int = 0) -> PodSpec:
    return PodSpec(name, 1000, 1024, gpu_count=1, gpu_milli=milli, gpu_memory_mib=memory)


def mig(name: str, profile: str = "1g.10gb") -> PodSpec:
    return PodSpec(name, 1000, 1024, mig_profile=profile)


def work(
    pod: PodSpec,
    namespace: str = "default",
    priority: int = 0,
    created_at: float = 0.0,
    workload_class: str = "",
    pool: str = "",
    runtime: float | None = None,
) -> Workload:
    return Workload(
        pod=pod,
        namespace=namespace,
        priority=priority,
        workload_class=workload_class,
        pool=pool,
        created_at=created_at,
        expected_runtime=runtime,
    )


def queue(
    name: str,
    pool: str = "",
    guaranteed: float = 0,
    ceiling: float | None = None,
    priority: int = 0,
    weight: float = 1.0,
    max_pods: int | None = None,
    reclaimable: bool = True,
    min_runtime: float = 0.0,
) -> QueueSpec:
    quotas = ()
    if pool:
        quotas = (
            QuotaSpec(
                pool,
                round(guaranteed * 1000),
                None if ceiling is None else round(ceiling * 1000),
            ),
        )
    return QueueSpec(
        name=name,
        namespaces=frozenset({name}),
        priority=priority,
        weight=weight,
        quotas=quotas,
        max_concurrent_pods=max_pods,
        reclaimable=reclaimable,
        min_runtime_before_preemption=min_runtime,
    )


def one_pool(mode: PoolMode = PoolMode.EXCLUSIVE, name: str = "p", **kwargs: object) -> PoolSpec:
    return PoolSpec(name=name, mode=mode, **kwargs)  # type: ignore[arg-type]


class Cluster:
    """A snapshot, compiled policy, engine, ledger and running map that apply decisions."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        config: PolicyConfig,
        options: EngineOptions | None = None,
    ) -> None:
        self.snapshot = ClusterSnapshot(nodes)
        self.policy = ClusterPolicy.build(config, nodes)
        self.policy.prepare(self.snapshot)
        self.engine = PolicyEngine(Scheduler(BestFitPolicy()), self.policy, options)
        self.ledger = self.policy.new_ledger()
        self.running: dict[str, Running] = {}
        self.nominations: dict[str, int] = {}
        self.gangs: dict[str, GangSpec] = {}
        """What each gang asks, as the PodGroups say."""

    def cycle(self, pending: Sequence[Workload], now: float = 0.0) -> CycleResult:
        return self.engine.cycle(
            CycleRequest(
                self.snapshot,
                pending,
                self.running,
                self.ledger,
                now,
                self.nominations,
                gangs=self.gangs,
            )
        )

    def start(self, admit: Admit, now: float = 0.0) -> None:
        self.snapshot.bind(admit.workload.pod, admit.bind.node, admit.bind.gpus)
        record = admit.running(now)
        self.running[admit.workload.name] = record
        self.ledger.add(record)

    def evict(self, name: str) -> Running:
        record = self.running.pop(name)
        self.snapshot.release(name)
        self.ledger.remove(record)
        return record

    def run(self, pending: Sequence[Workload], now: float = 0.0) -> CycleResult:
        """One cycle with every Admit applied."""
        result = self.cycle(pending, now)
        for decision in result.decisions:
            if isinstance(decision, Admit):
                self.start(decision, now)
        self.nominations = result.nominations
        return result
