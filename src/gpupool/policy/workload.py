"""What the policy knows about a pod beyond its resource request.

:class:`~gpupool.core.model.PodSpec` is what the pod asks of a node (resources, allowed models,
node selector, affinity and tolerations: every filter reads it there, so none can miss a check);
who the pod is to the policy (tenant, priority, class, pool wish, timing) lives here, in a record
the live scheduler builds from a pod object and the simulator from its arrival process.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.core.model import PodSpec


@dataclass(frozen=True, slots=True)
class Workload:
    """A pod as policy sees it.

    Attributes:
        pod: The resource request (its ``name`` is the workload's identity).
        namespace: Namespace; with ``queue``, decides the queue
            (:func:`gpupool.policy.membership.pod_queue`).
        priority: Pod priority inside its queue (``spec.priority``); higher preempts lower.
        workload_class: ``gpupool.io/class`` (training, serving, inference, dev, ...).
        pool: Pool the pod asks for; empty lets routing choose.
        created_at: Arrival time in seconds; older goes first among equals.
        expected_runtime: Declared runtime in seconds (``gpupool.io/expected-runtime``), or
            ``None`` to use a learned estimate.
        queue: The queue the pod names (its ``gpupool.io/queue`` label), as written: it counts
            only if that queue serves ``namespace``; empty to go by namespace alone.
        gang: The gang it belongs to (``namespace/name`` of its PodGroup), admitted whole or
            not at all; empty for a pod scheduled alone.
    """

    pod: PodSpec
    namespace: str = "default"
    priority: int = 0
    workload_class: str = ""
    pool: str = ""
    created_at: float = 0.0
    expected_runtime: float | None = None
    queue: str = ""
    gang: str = ""

    @property
    def name(self) -> str:
        """The pod's name."""
        return self.pod.name


@dataclass(frozen=True, slots=True)
class Running:
    """A workload that holds resources, with what policy charged it.

    Attributes:
        workload: The workload.
        queue: Queue index in the compiled policy.
        pool: Pool index in the compiled policy.
        units: Milli-units charged to the queue in that pool.
        node: Node row in the snapshot.
        started_at: When it started, in seconds.
        expected_end: When it is expected to end (start plus the runtime estimated at start),
            for backfill reservations.
        companions: Other snapshot holdings that go when this pod goes: the DRA claims it
            alone reserves (their GPUs are held under the claim's name, the pod holds only its
            CPU and memory). Without them a victim search or a reservation would see a claim
            pod's eviction or end free no GPU at all.
    """

    workload: Workload
    queue: int
    pool: int
    units: int
    node: int
    started_at: float
    expected_end: float = float("inf")
    companions: tuple[str, ...] = ()

    @property
    def holdings(self) -> tuple[str, ...]:
        """Every snapshot name freed when the pod goes: its own, then its companions."""
        return (self.workload.name, *self.companions)
