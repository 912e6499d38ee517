"""The REST API's read model: plain pydantic models, the OpenAPI schema clients rely on.

Kept apart from how they are computed (:mod:`gpupool.api.view`) so the schema cannot change by
accident when a backend does; every field that a backend may not know yet (pools and queues
before GPUPool/GPUQueue exist, governance without a store) is a list that may be empty or a value
that may be ``None``, never a made-up number.

Quantities named ``*_units`` are GPU units (a whole GPU is 1; a share the larger of its compute
and memory fractions; a MIG slice its compute slices over seven), the count quotas and the bill
use (:mod:`gpupool.policy.units`); ``*_milli`` fields are compute shares in milli-GPU.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Share(BaseModel):
    """One pod's share of one GPU."""

    pod: str = Field(description="namespace/name of the pod")
    team: str = Field(description="The queue the pod is charged to")
    milli: int = Field(description="Compute share in milli-GPU (1000 = the whole GPU)")
    memory_mib: int = Field(description="GPU memory held, MiB (0: no cap asked for)")
    kind: str = Field(description="whole, share or mig")
    since: str | None = Field(None, description="When the pod was created (RFC 3339), if known")
    claim: str | None = Field(
        None,
        description="namespace/name of the DRA ResourceClaim whose GPUs these are (the pod is "
        "the one charged for it); None: the pod's own extended-resource request",
    )


class Gpu(BaseModel):
    """One GPU of a node and who holds it."""

    index: int
    uuid: str = Field(description="The device's UUID, or '' when the node does not report it")
    model: str
    memory_mib: int = Field(description="Memory of the GPU in MiB (0: not reported)")
    used_milli: int
    used_memory_mib: int
    shares: list[Share]


class MigSlice(BaseModel):
    """One MIG slice of a node and who holds it."""

    profile: str = Field(description="The MIG profile, e.g. 1g.10gb")
    units: float = Field(description="GPU units the slice counts as")
    pod: str | None = Field(None, description="namespace/name of the pod holding it; None: free")
    team: str | None = Field(None, description="The holder's queue")
    claim: str | None = Field(
        None, description="namespace/name of the DRA ResourceClaim holding it, if a claim does"
    )


class Node(BaseModel):
    """A node the scheduler places pods onto."""

    name: str
    gpu_model: str
    gpus: list[Gpu]
    mig: list[MigSlice] = Field(description="MIG slices, by profile, held ones first")
    cpu_milli: int
    cpu_free_milli: int
    memory_mib: int
    memory_free_mib: int
    pods: int = Field(description="Pods holding resources on the node")


class PendingPod(BaseModel):
    """A pod waiting to be placed, and why."""

    pod: str = Field(description="namespace/name")
    team: str
    gpu_count: int
    gpu_milli: int = Field(description="Compute share asked for per GPU, milli-GPU")
    gpu_memory_mib: int = Field(description="GPU memory asked for per GPU, MiB")
    mig_profile: str = Field(description="The MIG profile asked for ('' unless kind is mig)")
    kind: str = Field(description="none, whole, share or mig")
    reason: str = Field(description="The scheduler's last message ('' when not tried yet)")
    category: str = Field(description="The reason's category, as in the pending_pods metric")
    position: int = Field(description="1-based place in the scheduling order")
    attempts: int = Field(description="Scheduling attempts so far")


class Pool(BaseModel):
    """A GPUPool (or the implicit default pool): a set of GPUs shared in one mode."""

    name: str
    mode: str = Field(description="Exclusive, MIG, Shared, or Any for the default pool")
    nodes: int
    capacity_units: float = Field(description="GPU units of its GPUs and MIG slices")
    allocated_units: float = Field(description="GPU units charged to pods in it")
    pods: int


class Queue(BaseModel):
    """A GPUQueue: a team's quota and what it uses, over all pools."""

    name: str
    guaranteed_units: float | None
    ceiling_units: float | None
    used_units: float
    running: int
    pending: int


class Team(BaseModel):
    """What one team (its queue) holds and waits for, observed in the cluster."""

    name: str
    used_units: float = Field(description="GPU units its pods hold")
    used_memory_mib: int = Field(description="GPU memory its pods hold, MiB")
    pods: int
    pending: int


class Cluster(BaseModel):
    """One-screen summary."""

    source: str = Field(description="What the view reads: live, snapshot or simulator")
    nodes: int
    gpus: int
    gpu_milli_total: int
    gpu_milli_used: int
    capacity_units: float = Field(description="GPU units of every GPU and MIG slice")
    allocated_units: float = Field(description="GPU units held by pods")
    idle_gpus: int = Field(description="GPUs that hold no share at all")
    allocated_pods: int
    pending_pods: int
    pending_by_reason: dict[str, int] = Field(description="Pending pods per reason category")


class Record(BaseModel):
    """A governance action, an audit entry or a cost line, as the store keeps it."""

    at: str
    kind: str
    subject: str
    detail: str


class Records(BaseModel):
    """A list of records, or why there are none."""

    configured: bool = Field(description="Whether a store backs this list")
    note: str
    items: list[Record]


class CostLine(BaseModel):
    """GPU-hours of one team."""

    team: str
    gpu_hours: float


class CostBucket(BaseModel):
    """GPU-hours per team in one stretch of time (a bar of the dashboard's chart)."""

    start: str = Field(description="The bucket's start, RFC 3339")
    end: str = Field(description="The bucket's end, RFC 3339")
    gpu_hours: dict[str, float] = Field(description="GPU-hours per team in the bucket")


class Cost(BaseModel):
    """GPU-hours per team, in total and over time."""

    configured: bool
    note: str
    teams: list[CostLine]
    buckets: list[CostBucket] = Field(
        default_factory=list, description="The same hours cut into buckets, oldest first"
    )


class FreeUp(BaseModel):
    """What would have to be released on one node for a pending pod to fit there."""

    node: str
    gpus: list[int] = Field(description="The GPUs the pod would take")
    milli_short: int = Field(description="Compute share still to free on those GPUs, milli-GPU")
    memory_short_mib: int = Field(description="GPU memory still to free on those GPUs, MiB")
    cpu_short_milli: int
    memory_short_node_mib: int = Field(description="Node memory still to free, MiB")
    holders: list[str] = Field(description="Pods holding shares of those GPUs")


class Explanation(BaseModel):
    """Why one pod is pending and what would let it run."""

    pending: PendingPod
    pending_total: int = Field(description="Pods waiting in all")
    nodes_total: int
    nodes_could_fit: int = Field(
        description="Nodes the scheduler could place the pod on (its pools, GPU model, node "
        "selector, affinity, tolerations, ready and not cordoned) that could hold it if empty"
    )
    closest: list[FreeUp] = Field(description="The nodes that need the least freed, best first")
    consolidation: str = Field(
        default="",
        description="What the last consolidation pass said of the pod: the pods it moves (or "
        "would move, in ReportOnly) so that the pod fits, with the GPU-hours gained and lost, or "
        "why it moves none; empty when its pool does not consolidate or the pod waits briefly",
    )
