"""The resource model: what a node offers and what a pod asks for.

A GPU is described by two divisible quantities, its compute share in milli-GPU (1000 = the whole
device, the unit the openb trace and the FGD paper use) and its memory in MiB. A pod asks for one of
four shapes (:class:`RequestKind`): nothing GPU-related, whole GPUs, a fractional share of one or
more GPUs, or a MIG slice. MIG slices are modelled the way the NVIDIA device plugin's "mixed"
strategy exposes them to Kubernetes: a node carries a fixed count of pre-partitioned slices per
profile, and a request takes one slice of a named profile. Besides room, a pod may require things
of its node (allowed GPU models, a node selector, affinity, tolerated taints:
:mod:`gpupool.core.constraints`), and a node may be tainted, not ready or cordoned.

Everything here is an immutable value object; the mutable state of a cluster lives in
:class:`gpupool.core.snapshot.ClusterSnapshot`. Constructors validate their fields and raise
:class:`InvalidSpecError` naming the field, so bad input never reaches the scheduling arrays.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpupool.core.constraints import NodeConstraints, Taint
    from gpupool.core.pod_terms import PodTerms

MILLI_PER_GPU = 1000
"""Compute share of one whole GPU, in milli-GPU."""
MAX_AMOUNT = 2**62
"""Largest amount of an extra resource (bytes of ephemeral storage, a device count): the
snapshot keeps them in int64 arrays, where a sum of two must not overflow."""
WILDCARD_IP = "0.0.0.0"
"""The host IP of a port bound on every address (an empty ``hostIP`` means it)."""
PROTOCOLS = ("TCP", "UDP", "SCTP")

ExtraResources = tuple[tuple[str, int], ...]
"""Resources besides CPU, memory and gpupool's own, as sorted ``(name, amount)`` pairs:
other vendors' extended resources (``example.com/rdma``), ``hugepages-*`` and
``ephemeral-storage`` in bytes. Most pods and nodes have none, an empty tuple, so they compare,
hash and filter as fast as before."""


class InvalidSpecError(ValueError):
    """A node or pod description has a field that cannot be scheduled."""

    def __init__(self, owner: str, field_name: str, message: str) -> None:
        super().__init__(f"{owner}: field '{field_name}': {message}")
        self.owner = owner
        self.field_name = field_name


class RequestKind(enum.Enum):
    """The shape of a pod's GPU request; it decides which filter and GPU choice apply."""

    NONE = "none"
    """CPU and memory only."""
    WHOLE = "whole"
    """``gpu_count`` whole GPUs, exclusive."""
    SHARE = "share"
    """A fraction (``gpu_milli`` < 1000 and/or a memory cap) of each of ``gpu_count`` GPUs."""
    MIG = "mig"
    """One MIG slice of profile ``mig_profile``."""


def overcommitted(physical: int, ratio: float) -> int:
    """A GPU quantity's capacity under an overcommit ``ratio`` (rounded down).

    One rule for the scheduler's snapshot (what it packs) and the node agent's hand-off check
    (what it lets start): when each rounded on its own, a share the scheduler placed could be
    refused on the node by one MiB.
    """
    return int(physical * ratio)


def _require_non_negative(owner: str, name: str, value: int) -> None:
    if value < 0:
        raise InvalidSpecError(owner, name, f"must be >= 0, got {value}")


def _normalized_extras(owner: str, extras: ExtraResources) -> ExtraResources:
    """``extras`` sorted by name, zero amounts dropped (kube checks only what is asked, > 0)."""
    names = [name for name, _ in extras]
    if len(set(names)) != len(names):
        raise InvalidSpecError(owner, "extra_resources", "names a resource twice")
    for name, amount in extras:
        if not name:
            raise InvalidSpecError(owner, "extra_resources", "a resource needs a name")
        if not 0 <= amount <= MAX_AMOUNT:
            raise InvalidSpecError(
                owner, f"extra_resources[{name}]", f"must be in 0..{MAX_AMOUNT}, got {amount}"
            )
    return tuple(sorted((name, amount) for name, amount in extras if amount))


@dataclass(frozen=True, slots=True, order=True)
class HostPort:
    """A port a pod binds on its node's network (a container's ``hostPort``).

    An empty host IP means every address (:data:`WILDCARD_IP`) and an empty protocol TCP, as
    kube-scheduler's NodePorts reads them; the constructor stores the normalized values, so two
    spellings of one port compare equal.
    """

    port: int
    protocol: str = "TCP"
    host_ip: str = WILDCARD_IP

    def __post_init__(self) -> None:
        if not self.host_ip:
            object.__setattr__(self, "host_ip", WILDCARD_IP)
        if not self.protocol:
            object.__setattr__(self, "protocol", "TCP")
        if not 1 <= self.port <= 65535:
            raise InvalidSpecError("host port", "port", f"must be 1..65535, got {self.port}")
        if self.protocol not in PROTOCOLS:
            raise InvalidSpecError(
                "host port",
                "protocol",
                f"must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}",
            )


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A schedulable node as the inventory reports it.

    Attributes:
        name: Unique node name.
        cpu_milli: Allocatable CPU in milli-cores.
        memory_mib: Allocatable memory in MiB.
        gpu_count: Number of GPUs (0 for a CPU-only node).
        gpu_model: GPU model name (for example ``"A100"``); empty when there are no GPUs.
        gpu_memory_mib: Memory of each GPU in MiB; 0 when unknown, which disables memory checks.
        max_pods: Most pods the node accepts (the kubelet's ``pods`` capacity).
        mig_slices: Pre-partitioned MIG slices, profile name to count.
        labels: Node labels, for pools and selectors.
        taints: Node taints (:mod:`gpupool.core.constraints`).
        ready: Whether the node is ready (its kubelet reports Ready).
        unschedulable: Whether the node is cordoned (``spec.unschedulable``).
        unhealthy_gpus: Indexes of GPUs that must take no new pod (a critical XID): they keep
            their index, so the pods already on them stay held where their records say, but
            no filter, GPU choice or preemption gives them out again.
        gpu_links: The NVLink domain of each GPU by index (GPUs of one domain are joined by
            NVLink or an NVSwitch, others only by PCIe); empty when unknown or one domain.
        gpu_numa: The host NUMA node of each GPU by index; empty when unknown or one node.
        gpu_contention: The contention score (0..1) the node's agent last published for each
            GPU by index (:mod:`gpupool.core.contention`); empty when none is contended.
        extra_resources: Allocatable amounts of every other resource (:data:`ExtraResources`);
            stored sorted, zero amounts dropped.
        refused_kinds: Request kinds the node's agent refused to start lately for a reason of
            the node's own (:data:`gpupool.kube.objects.vocabulary.ANNOTATION_HANDOFF_REFUSED`):
            no new pod of such a kind is placed there, so a node that cannot honour what the
            scheduler grants stops attracting the pods it would refuse.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    max_pods: int = 110
    mig_slices: tuple[tuple[str, int], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    unhealthy_gpus: tuple[int, ...] = ()
    refused_kinds: tuple[RequestKind, ...] = ()
    extra_resources: ExtraResources = ()
    gpu_links: tuple[int, ...] = ()
    gpu_numa: tuple[int, ...] = ()
    gpu_contention: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        owner = f"node {self.name!r}"
        if not self.name:
            raise InvalidSpecError("node", "name", "must not be empty")
        if self.extra_resources:
            extras = _normalized_extras(owner, self.extra_resources)
            object.__setattr__(self, "extra_resources", extras)
        for name in ("cpu_milli", "memory_mib", "gpu_count", "gpu_memory_mib", "max_pods"):
            _require_non_negative(owner, name, getattr(self, name))
        if self.gpu_count > 0 and not self.gpu_model:
            raise InvalidSpecError(owner, "gpu_model", "a node with GPUs needs a model name")
        for profile, count in self.mig_slices:
            _require_non_negative(owner, f"mig_slices[{profile}]", count)
        for name in ("gpu_links", "gpu_numa"):
            listed = getattr(self, name)
            if listed and len(listed) != self.gpu_count:
                raise InvalidSpecError(
                    owner, name, f"one domain per GPU ({self.gpu_count}), got {len(listed)}"
                )
        if self.gpu_contention and (
            len(self.gpu_contention) != self.gpu_count
            or not all(0 <= score <= 1 for score in self.gpu_contention)
        ):
            raise InvalidSpecError(
                owner, "gpu_contention", f"one score in 0..1 per GPU ({self.gpu_count})"
            )
        for index in self.unhealthy_gpus:
            if not 0 <= index < self.gpu_count:
                raise InvalidSpecError(
                    owner, "unhealthy_gpus", f"no GPU {index} (the node has {self.gpu_count})"
                )


@dataclass(frozen=True, slots=True)
class PodSpec:
    """What one pod asks for.

    Attributes:
        name: Unique pod name (namespace/name in a live cluster).
        cpu_milli: CPU request in milli-cores.
        memory_mib: Memory request in MiB.
        gpu_count: Number of GPUs (whole or shared); 0 for CPU-only and MIG pods.
        gpu_milli: Compute share per GPU in milli-GPU; 1000 means whole GPUs.
        gpu_memory_mib: GPU memory per GPU in MiB; 0 means no memory cap is asked for.
        gpu_models: Allowed GPU models; empty means any model.
        mig_profile: MIG profile name (``"1g.10gb"``) for a MIG request, else empty.
        workload_class: Workload class label (training, inference, dev, ...), free text.
        constraints: Node selector, required affinity and tolerations; ``None`` when the pod
            names none (it is then kept off tainted nodes only). Empty constraints are stored
            as ``None``, so equal requests compare and cache as one.
        extra_resources: Amounts of every other resource (:data:`ExtraResources`), as
            kube-scheduler's NodeResourcesFit checks them: a node without one in allocatable
            has none of it. Stored sorted, zero amounts dropped.
        host_ports: Ports the pod binds on its node (NodePorts); stored sorted.
        namespace: The pod's namespace, which other pods' affinity terms and spread
            constraints match against (empty in the simulator).
        labels: The pod's labels as sorted ``(key, value)`` pairs, for the same matching.
            Neither takes part in equality: they say who the pod is (as its name does), not
            what it asks for, so equal requests still compare and hash as cheaply as before.
        terms: Inter-pod (anti-)affinity and topology spread (:mod:`gpupool.core.pod_terms`);
            ``None`` when the pod has none (stored so when empty, like ``constraints``).
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    gpu_models: frozenset[str] = field(default_factory=frozenset)
    mig_profile: str = ""
    workload_class: str = ""
    constraints: NodeConstraints | None = None
    extra_resources: ExtraResources = ()
    host_ports: tuple[HostPort, ...] = ()
    namespace: str = field(default="", compare=False)
    labels: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    terms: PodTerms | None = None
    _kind: RequestKind = field(default=RequestKind.NONE, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._validate()
        if self.constraints is not None and self.constraints.empty:
            object.__setattr__(self, "constraints", None)
        if self.extra_resources:
            extras = _normalized_extras(f"pod {self.name!r}", self.extra_resources)
            object.__setattr__(self, "extra_resources", extras)
        if self.host_ports:
            object.__setattr__(self, "host_ports", tuple(sorted(self.host_ports)))
        if self.terms is not None and self.terms.empty:
            object.__setattr__(self, "terms", None)
        # derived once: every filter, score and policy rule asks for it
        object.__setattr__(self, "_kind", self._derive_kind())

    def _validate(self) -> None:
        owner = f"pod {self.name!r}"
        if not self.name:
            raise InvalidSpecError("pod", "name", "must not be empty")
        for name in ("cpu_milli", "memory_mib", "gpu_count", "gpu_milli", "gpu_memory_mib"):
            _require_non_negative(owner, name, getattr(self, name))
        if self.gpu_milli > MILLI_PER_GPU:
            raise InvalidSpecError(owner, "gpu_milli", f"must be <= {MILLI_PER_GPU}")
        if self.labels and list(self.labels) != sorted(dict(self.labels).items()):
            raise InvalidSpecError(owner, "labels", "must be sorted pairs with distinct keys")
        if self.mig_profile:
            if self.gpu_count or self.gpu_milli or self.gpu_memory_mib:
                raise InvalidSpecError(
                    owner, "mig_profile", "a MIG request cannot also ask for GPUs or GPU shares"
                )
            return
        if self.gpu_count == 0 and (self.gpu_milli or self.gpu_memory_mib):
            raise InvalidSpecError(owner, "gpu_count", "a GPU share needs gpu_count >= 1")
        if self.gpu_count > 0 and self.gpu_milli == 0 and self.gpu_memory_mib == 0:
            raise InvalidSpecError(
                owner, "gpu_milli", "a GPU request needs gpu_milli > 0 or gpu_memory_mib > 0"
            )

    @property
    def kind(self) -> RequestKind:
        """The request shape, derived from the fields."""
        return self._kind

    def _derive_kind(self) -> RequestKind:
        if self.mig_profile:
            return RequestKind.MIG
        if self.gpu_count == 0:
            return RequestKind.NONE
        if self.gpu_milli == MILLI_PER_GPU and self.gpu_memory_mib == 0:
            return RequestKind.WHOLE
        return RequestKind.SHARE

    @property
    def total_gpu_milli(self) -> int:
        """Compute share asked for over all GPUs, in milli-GPU."""
        return self.gpu_count * self.gpu_milli
