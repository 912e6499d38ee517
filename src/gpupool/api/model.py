"""The REST API's read model: plain pydantic models, the OpenAPI schema clients rely on.

Kept apart from how they are computed (:mod:`gpupool.api.view`) so the schema cannot change by
accident when a backend does; every field that a backend may not know yet (pools and queues
before GPUPool/GPUQueue exist, governance without a store) is a list that may be empty or a value
that may be ``None``, never a made-up number.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Share(BaseModel):
    """One pod's share of one GPU."""

    pod: str = Field(description="namespace/name of the pod")
    team: str = Field(description="The pod's queue (gpupool.io/queue label) or its namespace")
    milli: int = Field(description="Compute share in milli-GPU (1000 = the whole GPU)")
    memory_mib: int = Field(description="GPU memory held, MiB (0: no cap asked for)")
    kind: str = Field(description="whole, share or mig")
    since: str | None = Field(None, description="When the pod was created (RFC 3339), if known")


class Gpu(BaseModel):
    """One GPU of a node and who holds it."""

    index: int
    uuid: str = Field(description="The device's UUID, or '' when the node does not report it")
    model: str
    memory_mib: int = Field(description="Memory of the GPU in MiB (0: not reported)")
    used_milli: int
    used_memory_mib: int
    shares: list[Share]


class Node(BaseModel):
    """A node the scheduler places pods onto."""

    name: str
    gpu_model: str
    gpus: list[Gpu]
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
    kind: str = Field(description="none, whole, share or mig")
    reason: str = Field(description="The scheduler's last message ('' when not tried yet)")
    category: str = Field(description="The reason's category, as in the pending_pods metric")
    position: int = Field(description="1-based place in the scheduling order")
    attempts: int = Field(description="Scheduling attempts so far")


class Pool(BaseModel):
    """A GPUPool: a set of GPUs shared in one mode."""

    name: str
    mode: str
    capacity_units: int
    allocated_units: int


class Queue(BaseModel):
    """A GPUQueue: a team's quota and what it uses."""

    name: str
    guaranteed_milli: int | None
    ceiling_milli: int | None
    used_milli: int
    pending: int


class Team(BaseModel):
    """What one team (queue label or namespace) holds and waits for, observed in the cluster."""

    name: str
    used_milli: int
    used_memory_mib: int
    pods: int
    pending: int


class Cluster(BaseModel):
    """One-screen summary."""

    source: str = Field(description="What the view reads: live, snapshot or simulator")
    nodes: int
    gpus: int
    gpu_milli_total: int
    gpu_milli_used: int
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


class Cost(BaseModel):
    """GPU-hours per team."""

    configured: bool
    note: str
    teams: list[CostLine]


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
        description="Nodes that could hold the pod if they were empty (GPU model, count, size)"
    )
    closest: list[FreeUp] = Field(description="The nodes that need the least freed, best first")
