"""Feasibility: which nodes could take a pod right now, and why the others cannot.

One vectorised pass computes a boolean mask per check; the feasible set is their conjunction.
The per-check masks are kept so that a pending pod's reason can be reported the way
kube-scheduler does ("0/1213 nodes are available: 800 node(s) had no GPU of an allowed model,
413 Insufficient cpu"), counting every reason a node fails, not just the first.

The checks mirror the FGD simulator's filter (NodeResourcesFit plus Open-Gpu-Share):

* CPU, memory and pod slots fit;
* a GPU pod needs a node whose GPU model is allowed (any GPU node when unconstrained);
* ``gpu_count`` GPUs each with at least ``gpu_milli`` compute share and ``gpu_memory_mib``
  memory free (so a whole-GPU pod needs fully free GPUs);
* a MIG pod needs a free slice of its profile;
* every extra resource the pod asks for (another vendor's device, hugepages, ephemeral
  storage) is free on the node, and none of its host ports is taken there
  (:mod:`gpupool.core.resources`, kube's NodeResourcesFit and NodePorts).

Checks that do not depend on what runs on a node (:func:`node_checks`: readiness, cordon,
untolerated taints, the node selector, required affinity and what the pod's volumes require
of the node) are the same for every pod with
the same constraints; they are compiled into masks once per distinct constraint set and node
inventory (cached on the snapshot, bounded) and shared by the filter, :func:`fits_on_node` and
:func:`admissible` (which adds the GPU model), so the filter, preemption's victim search and
backfill's reservation cannot disagree about where a pod may go.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpupool.core.constraints import NO_CONSTRAINTS, NodeConstraints
from gpupool.core.model import PodSpec, RequestKind
from gpupool.core.pod_relative import fits_neighbours, pod_checks, static_mask
from gpupool.core.resources import REASON_PORTS
from gpupool.core.snapshot import BoolArray, ClusterSnapshot, IntArray

REASON_MODEL = "node(s) had no GPU of an allowed model"
REASON_GPU = "Insufficient gpupool.io/gpu"
REASON_GPU_MEMORY = "Insufficient gpupool.io/gpu-memory"
REASON_CPU = "Insufficient cpu"
REASON_MEMORY = "Insufficient memory"
REASON_PODS = "Too many pods"
REASON_MIG = "Insufficient MIG slices"
REASON_NOT_READY = "node(s) were not ready"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_TAINTS = "node(s) had untolerated taint(s)"
REASON_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
REASON_UNHEALTHY = "node(s) had room only on unhealthy GPUs"
REASON_CONTENDED = "node(s) had room only on GPUs under contention (the pool's avoidAbove)"
"""A pod its pool keeps off contended GPUs (:mod:`gpupool.core.contention_rules`)."""
REASON_REFUSED = "node(s) refused a recent hand-off of this kind of request"
MAX_CACHED_CONSTRAINTS = 1024
"""Distinct constraint sets whose masks a snapshot keeps (a stream of pods with unique selectors
cannot grow the cache without limit)."""

_ALL = slice(None)


@dataclass(frozen=True, slots=True)
class FilterResult:
    """The outcome of filtering every node for one pod.

    Attributes:
        mask: True where the node can take the pod.
        checks: Each check's name and its pass mask, in evaluation order.
    """

    mask: BoolArray
    checks: tuple[tuple[str, BoolArray], ...]

    @property
    def feasible_count(self) -> int:
        """Number of feasible nodes."""
        return int(np.count_nonzero(self.mask))

    def reasons(self) -> tuple[tuple[str, int], ...]:
        """Rejected-node counts per reason, most frequent first, zero counts omitted."""
        counts = [(name, int(np.count_nonzero(~passed))) for name, passed in self.checks]
        counts = [(name, count) for name, count in counts if count]
        return tuple(sorted(counts, key=lambda item: (-item[1], item[0])))

    def message(self) -> str:
        """The pending reason as kube-scheduler words it."""
        total = len(self.mask)
        parts = ", ".join(f"{count} {name}" for name, count in self.reasons())
        return f"{self.feasible_count}/{total} nodes are available: {parts}."


def eligible_gpus(
    snapshot: ClusterSnapshot,
    pod: PodSpec,
    rows: IntArray | int | slice = _ALL,
    *,
    healthy_only: bool = True,
    calm_only: bool = True,
) -> BoolArray:
    """Per node (of ``rows``) and GPU slot: can this GPU hold one of the pod's per-GPU shares?

    An unhealthy GPU never can (``snapshot.gpu_usable``; ``healthy_only=False`` asks about room
    alone, for the pending reason), nor one a pool avoids for its contention (``gpu_calm``;
    ``calm_only=False`` ignores that). A whole GPU is exclusive: it needs the GPU's compute and
    memory entirely free, so a memory-only share and a whole-GPU pod can never meet on one
    device. Once any node has a
    per-GPU pod limit or overcommit (``snapshot.sharing_limited``), a GPU also needs a free pod
    slot and a whole GPU its full (possibly overcommitted) compute; a snapshot without either
    skips those two comparisons, which keeps the common path as fast as before.
    """
    exists = snapshot.gpu_usable if healthy_only else snapshot.gpu_exists
    ok: BoolArray = exists[rows] & (snapshot.gpu_free[rows] >= pod.gpu_milli)
    if calm_only and snapshot.contention_limited:
        ok &= snapshot.gpu_calm[rows]
    if pod.kind is RequestKind.WHOLE:
        ok &= snapshot.gpu_memory_free[rows] == snapshot.gpu_memory_capacity[rows]
        if snapshot.sharing_limited:
            ok &= snapshot.gpu_free[rows] == snapshot.gpu_milli_capacity[rows]
    elif pod.gpu_memory_mib:
        ok &= snapshot.gpu_memory_free[rows] >= pod.gpu_memory_mib
    if snapshot.sharing_limited:
        ok &= snapshot.gpu_pods_free[rows] >= 1
    return ok


NodeCheck = tuple[str, BoolArray]
"""A named per-node pass mask: a constraint of the pod or the node, or a rule of the caller."""


def mask_of(size: int, checks: tuple[NodeCheck, ...]) -> BoolArray:
    """The nodes (of ``size``) that every check passes."""
    mask = np.ones(size, dtype=np.bool_)
    for _, passed in checks:
        mask &= passed
    return mask


def node_checks(
    snapshot: ClusterSnapshot, constraints: NodeConstraints | None
) -> tuple[NodeCheck, ...]:
    """The checks no resource decides, for a pod with ``constraints``: only those some node fails.

    Readiness and cordon (every pod), untolerated ``NoSchedule``/``NoExecute`` taints (a pod
    without tolerations too), the node selector and required affinity. Computed once per
    distinct constraint set on this node inventory, so a thousand pending pods that share a
    selector cost one pass over the nodes.
    """
    cache = snapshot.constraint_checks
    checks = cache.get(constraints)  # None (most pods) hashes without a call into Python
    if checks is None:
        checks = _compile(snapshot, constraints or NO_CONSTRAINTS)
        if len(cache) >= MAX_CACHED_CONSTRAINTS:
            cache.pop(next(iter(cache)))  # the oldest entry: dicts keep insertion order
        cache[constraints] = checks
    return checks


def _compile(snapshot: ClusterSnapshot, constraints: NodeConstraints) -> tuple[NodeCheck, ...]:
    nodes = snapshot.nodes
    masks = (
        (REASON_NOT_READY, [node.ready for node in nodes]),
        (REASON_UNSCHEDULABLE, [not node.unschedulable for node in nodes]),
        (REASON_TAINTS, [constraints.tolerates(node.taints) for node in nodes]),
        (
            REASON_SELECTOR,
            [constraints.selects(dict(node.labels), node.name) for node in nodes]
            if constraints.node_selector or constraints.affinity is not None
            else [],
        ),
    )
    labels = [dict(node.labels) for node in nodes] if constraints.required else []
    volumes = tuple(  # the pod's volumes' groups: one check per reason (kube's VolumeBinding)
        (
            reason,
            [
                constraints.meets_required(reason, lab, n.name)
                for lab, n in zip(labels, nodes, strict=True)
            ],
        )
        for reason in constraints.required_reasons()
    )
    checks = []
    for reason, values in (*masks, *volumes):
        if values and not all(values):
            mask = np.array(values, dtype=np.bool_)
            mask.setflags(write=False)
            checks.append((reason, mask))
    return tuple(checks)


def admissible(snapshot: ClusterSnapshot, pod: PodSpec) -> BoolArray:
    """Nodes ``pod`` may use whatever runs on them: :func:`node_checks` and, for GPUs, the model.

    What preemption and backfill restrict their what-ifs to: a node outside it can never take
    the pod, however much is freed there.
    """
    mask = mask_of(snapshot.size, node_checks(snapshot, pod.constraints))
    if pod.kind is RequestKind.WHOLE or pod.kind is RequestKind.SHARE:
        mask &= snapshot.model_mask(pod.gpu_models)
    keys = static_mask(snapshot, pod)  # pod-relative rules: only a missing topology key
    return mask if keys is None else mask & keys


def fits_on_node(snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> bool:
    """Whether ``pod`` fits on one node now (every check of :func:`filter_nodes` but one row).

    Preemption and backfill ask this many times per decision about single nodes; it costs a
    few scalar comparisons, the pod's cached :func:`node_checks` and one row of
    :func:`eligible_gpus` instead of a whole-cluster pass.
    """
    if (
        snapshot.cpu_free[node] < pod.cpu_milli
        or snapshot.memory_free[node] < pod.memory_mib
        or snapshot.pods_free[node] < 1
    ):
        return False
    if not all(passed[node] for _, passed in node_checks(snapshot, pod.constraints)):
        return False
    if (pod.extra_resources or pod.host_ports) and not _extras_fit(snapshot, pod, node):
        return False
    if not fits_neighbours(snapshot, pod, node):  # after a what-if's removals too
        return False
    kind = pod.kind
    if kind in snapshot.refused and not snapshot.refused[kind][node]:
        return False
    if kind is RequestKind.MIG:
        profiles = snapshot.mig_profiles
        return pod.mig_profile in profiles and bool(
            snapshot.mig_free[node, profiles.index(pod.mig_profile)] >= 1
        )
    if kind is RequestKind.NONE:
        return True
    if not snapshot.model_mask(pod.gpu_models)[node]:
        return False
    return int(eligible_gpus(snapshot, pod, node).sum()) >= pod.gpu_count


def _extras_fit(snapshot: ClusterSnapshot, pod: PodSpec, node: int) -> bool:
    """Whether ``node`` has the pod's extra resources free and none of its host ports taken."""
    return (
        snapshot.extras.short_of(snapshot.extra_free, node, pod.extra_resources) is None
        and snapshot.ports.conflict(node, pod.host_ports) is None
    )


def resource_checks(snapshot: ClusterSnapshot, pod: PodSpec) -> list[NodeCheck]:
    """The pod's extra-resource and host-port checks on every node (none for most pods)."""
    checks: list[NodeCheck] = []
    if pod.extra_resources:
        checks = snapshot.extras.checks(snapshot.extra_free, pod.extra_resources, snapshot.size)
    if pod.host_ports:
        checks.append((REASON_PORTS, snapshot.ports.free_mask(pod.host_ports, snapshot.size)))
    return checks


def _health_checks(snapshot: ClusterSnapshot, pod: PodSpec, fits: BoolArray) -> list[NodeCheck]:
    """Room (as if every GPU were healthy and calm), then health, then contention.

    A pod kept off unhealthy GPUs, or off GPUs its pool avoids for their contention, is told
    so: without the split, a node whose only free GPU broke would read "Insufficient
    gpupool.io/gpu" while the map shows a free GPU there.
    """

    def enough(**which: bool) -> BoolArray:
        found: BoolArray = eligible_gpus(snapshot, pod, **which).sum(axis=1) >= pod.gpu_count
        return found

    room = enough(healthy_only=False, calm_only=False)
    checks: list[NodeCheck] = [(REASON_GPU, room)]
    healthy = room
    if snapshot.unhealthy_gpus:
        healthy = enough(calm_only=False) if snapshot.contention_limited else fits
        checks.append((REASON_UNHEALTHY, healthy | ~room))
    if snapshot.contention_limited:
        checks.append((REASON_CONTENDED, fits | ~healthy))
    return checks


def filter_nodes(
    snapshot: ClusterSnapshot, pod: PodSpec, extra_checks: tuple[NodeCheck, ...] = ()
) -> FilterResult:
    """Evaluate every check for ``pod`` on every node of ``snapshot``.

    ``extra_checks`` are masks of the caller's rules (a pool's nodes, nodes nominated to other
    pods); they count in the reasons like any other check.
    """
    checks: list[NodeCheck] = [*extra_checks, *node_checks(snapshot, pod.constraints)]
    kind = pod.kind
    if kind in snapshot.refused:
        checks.append((REASON_REFUSED, snapshot.refused[kind]))
    if kind is RequestKind.WHOLE or kind is RequestKind.SHARE:
        model_ok = snapshot.model_mask(pod.gpu_models)
        checks.append((REASON_MODEL, model_ok))
        if pod.gpu_memory_mib:
            mem_ok = snapshot.gpu_memory_free >= pod.gpu_memory_mib
            checks.append(
                (REASON_GPU_MEMORY, (mem_ok & snapshot.gpu_exists).sum(axis=1) >= pod.gpu_count)
            )
        fits = eligible_gpus(snapshot, pod).sum(axis=1) >= pod.gpu_count
        if snapshot.unhealthy_gpus or snapshot.contention_limited:
            checks.extend(_health_checks(snapshot, pod, fits))
        else:
            checks.append((REASON_GPU, fits))
    elif kind is RequestKind.MIG:
        if pod.mig_profile in snapshot.mig_profiles:
            column = snapshot.mig_profiles.index(pod.mig_profile)
            mig_ok = snapshot.mig_free[:, column] >= 1
        else:
            mig_ok = np.zeros(snapshot.size, dtype=np.bool_)
        checks.append((f"{REASON_MIG} {pod.mig_profile}", mig_ok))
    checks.append((REASON_CPU, snapshot.cpu_free >= pod.cpu_milli))
    checks.append((REASON_MEMORY, snapshot.memory_free >= pod.memory_mib))
    checks.append((REASON_PODS, snapshot.pods_free >= 1))
    if pod.extra_resources or pod.host_ports:
        checks.extend(resource_checks(snapshot, pod))
    checks.extend(pod_checks(snapshot, pod))  # affinity, anti-affinity, topology spread
    mask = checks[0][1].copy()
    for _, passed in checks[1:]:
        mask &= passed
    return FilterResult(mask=mask, checks=tuple(checks))
