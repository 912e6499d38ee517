"""The scheduler's view of a live cluster: informer records in, a consistent snapshot out.

:class:`ClusterState` keeps the records the informers deliver and maintains from them the same
:class:`~gpupool.core.snapshot.ClusterSnapshot` the simulator uses:

* Nodes become snapshot rows. The snapshot is rebuilt only when something scheduling reads
  changes (allocatable, labels, taints, readiness), not on heartbeats.
* A pod holds resources while it is bound and neither finished nor deleted. gpupool's pods hold
  exactly the GPUs of their allocation annotation (the record of truth, so a restarted or newly
  elected scheduler recovers every allocation from the cluster). Pods bound by someone else
  hold their CPU, memory and a best-fit choice of GPUs.
* A pod this scheduler has just decided is *assumed*: it holds its GPUs from the moment of the
  decision until the watch shows it bound (or the bind failed), so no GPU share can be handed
  out twice while a Binding is in flight.

Everything here is synchronous and runs between awaits of the event loop, so the snapshot is
never seen half-updated. A pod whose resources cannot be held as recorded (which would mean an
allocation conflict) is counted in ``conflicts`` and logged; tests assert it stays zero.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from gpupool.core.decisions import Bind
from gpupool.core.filtering import NodeCheck
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import AllocationError, BoolArray, ClusterSnapshot
from gpupool.kube import allocation
from gpupool.kube.affinity import node_matches
from gpupool.kube.informer import DELETED
from gpupool.kube.records import NodeRecord, NodeSelector, PodRecord, Toleration
from gpupool.kube.translate import InvalidObjectError, gpu_uuids, node_spec, pod_spec
from gpupool.kube.vocabulary import ANNOTATION_ALLOCATION
from gpupool.scheduling.gpu_choice import best_fit_gpus

log = logging.getLogger(__name__)

REASON_NOT_READY = "node(s) were not ready"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_TAINTS = "node(s) had untolerated taint(s)"
REASON_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def _tolerates(tolerations: list[Toleration], key: str, value: str, effect: str) -> bool:
    for toleration in tolerations:
        if toleration.effect and toleration.effect != effect:
            continue
        if toleration.operator == "Exists":
            if not toleration.key or toleration.key == key:
                return True
        elif toleration.key == key and toleration.value == value:
            return True
    return False


def _signature(node: NodeRecord) -> tuple[object, ...]:
    """What scheduling reads of a node; a change in anything else (heartbeats) is ignored."""
    return (
        tuple(sorted(node.status.allocatable.items())),
        tuple(sorted(node.metadata.labels.items())),
        node.metadata.annotations.get("gpupool.io/gpu-uuids", ""),
        tuple((t.key, t.value, t.effect) for t in node.spec.taints),
        node.spec.unschedulable,
        node.ready,
    )


@dataclass
class StateStats:
    """Counters for metrics and tests."""

    rebuilds: int = 0
    conflicts: int = 0
    invalid_nodes: int = 0


@dataclass
class ClusterState:
    """Records, holdings and the snapshot for one scheduler.

    Args:
        scheduler_name: ``spec.schedulerName`` of the pods this scheduler places.
    """

    scheduler_name: str
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    snapshot: ClusterSnapshot | None = None
    uuids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    assumed: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)
    capacity_epoch: int = 0
    stats: StateStats = field(default_factory=StateStats)
    _signatures: dict[str, tuple[object, ...]] = field(default_factory=dict)
    _nodes_changed: bool = True
    _dirty: set[str] = field(default_factory=set)
    _specs: dict[str, tuple[str, PodSpec]] = field(default_factory=dict)
    _node_masks: dict[str, BoolArray] = field(default_factory=dict)
    _selector_masks: dict[tuple[frozenset[tuple[str, str]], NodeSelector | None], BoolArray] = (
        field(default_factory=dict)
    )
    _toleration_masks: dict[tuple[Toleration, ...], BoolArray] = field(default_factory=dict)

    # -- informer handlers -------------------------------------------------------------------

    def on_node(self, kind: str, node: NodeRecord) -> None:
        """Informer handler for nodes."""
        name = node.key
        if kind == DELETED:
            self.nodes.pop(name, None)
            self._signatures.pop(name, None)
            self._nodes_changed = True
            return
        self.nodes[name] = node
        signature = _signature(node)
        if self._signatures.get(name) != signature:
            self._signatures[name] = signature
            self._nodes_changed = True

    def on_pod(self, kind: str, pod: PodRecord) -> None:
        """Informer handler for pods."""
        uid = pod.metadata.uid
        if kind == DELETED:
            self.pods.pop(uid, None)
            self._specs.pop(uid, None)
        else:
            self.pods[uid] = pod
        self._dirty.add(uid)

    # -- bringing the snapshot up to date ----------------------------------------------------

    def sync(self) -> None:
        """Apply every change since the last call to the snapshot and the pending set."""
        if self._nodes_changed:
            self._rebuild()
            return
        dirty, self._dirty = self._dirty, set()
        for uid in dirty:
            self._reconcile(uid)

    def _rebuild(self) -> None:
        specs = []
        for name in sorted(self.nodes):
            try:
                specs.append(node_spec(self.nodes[name]))
            except (InvalidObjectError, ValueError) as error:
                self.stats.invalid_nodes += 1
                log.warning("node %s left out: %s", name, error)
        self._nodes_changed = False
        self._selector_masks.clear()
        self._toleration_masks.clear()
        self.stats.rebuilds += 1
        self.capacity_epoch += 1
        previous = self.snapshot
        self.snapshot = ClusterSnapshot(specs) if specs else None
        if self.snapshot is None:
            self.uuids = {}
            self._node_masks = {}
        else:
            records = [self.nodes[spec.name] for spec in specs]
            self.uuids = {
                spec.name: gpu_uuids(r, spec.gpu_count)
                for spec, r in zip(specs, records, strict=True)
            }
            self._node_masks = {
                REASON_NOT_READY: np.array([r.ready for r in records]),
                REASON_UNSCHEDULABLE: np.array([not r.spec.unschedulable for r in records]),
            }
        # Assumed pods keep their decision across a rebuild; everything else is re-derived.
        kept = {uid: previous.allocations[uid] for uid in self.assumed} if previous else {}
        self.assumed = set()
        for uid, held in kept.items():
            name = previous.node_names[held.node] if previous else ""
            if self.snapshot is not None and name in self.snapshot.node_index:
                try:
                    self.snapshot.bind(held.pod, self.snapshot.node_index[name], held.gpus)
                    self.assumed.add(uid)
                except AllocationError as error:
                    self._conflict(uid, str(error))
        self.pending.clear()
        self._dirty.clear()
        for uid in list(self.pods):
            self._reconcile(uid)

    def _reconcile(self, uid: str) -> None:
        pod = self.pods.get(uid)
        snapshot = self.snapshot
        held = snapshot.allocations.get(uid) if snapshot else None
        gone = pod is None or pod.finished or pod.metadata.deletion_timestamp is not None
        if uid in self.assumed:
            if pod is not None and not gone and not pod.spec.node_name:
                return  # the Binding is in flight
            self.assumed.discard(uid)
            confirmed = (
                pod is not None
                and not gone
                and held is not None
                and snapshot is not None
                and snapshot.node_names[held.node] == pod.spec.node_name
            )
            if confirmed:
                return  # the watch shows the bind we made
            self._release(uid)
            held = None
        if gone:
            self.pending.discard(uid)
            if held is not None:
                self._release(uid)
            return
        assert pod is not None
        if not pod.spec.node_name:
            if held is not None:  # cannot happen for a live pod; be safe
                self._release(uid)
            if pod.spec.scheduler_name == self.scheduler_name and not pod.spec.scheduling_gates:
                self.pending.add(uid)
            return
        self.pending.discard(uid)
        if held is None:
            self._hold_bound(pod)

    def _hold_bound(self, pod: PodRecord) -> None:
        snapshot = self.snapshot
        node = pod.spec.node_name
        if snapshot is None or node not in snapshot.node_index:
            return  # a pod on a node we do not schedule onto (or not yet seen)
        try:
            spec = pod_spec(pod)
        except InvalidObjectError as error:
            log.warning("bound pod %s not accounted: %s", pod.key, error)
            return
        row = snapshot.node_index[node]
        text = pod.metadata.annotations.get(ANNOTATION_ALLOCATION)
        try:
            if text is not None:
                record = allocation.decode(text)
                gpus = tuple(share.index for share in record.gpus)
            else:
                gpus = best_fit_gpus(snapshot, spec, row) if spec.gpu_count else ()
                if len(gpus) < spec.gpu_count:
                    raise AllocationError(f"no {spec.gpu_count} free GPUs for a foreign pod")
            snapshot.bind(spec, row, gpus)
        except (AllocationError, allocation.AllocationFormatError) as error:
            self._conflict(pod.metadata.uid, f"{pod.key}: {error}")

    def _release(self, uid: str) -> None:
        if self.snapshot is not None and uid in self.snapshot.allocations:
            self.snapshot.release(uid)
            self.capacity_epoch += 1

    def _conflict(self, uid: str, message: str) -> None:
        self.stats.conflicts += 1
        log.error("allocation conflict for %s: %s", uid, message)

    # -- decisions ---------------------------------------------------------------------------

    def restart(self) -> None:
        """Forget assumptions and rebuild everything from the records (a new term as leader)."""
        self.assumed.clear()
        self.snapshot = None
        self._nodes_changed = True

    def assume(self, decision: Bind) -> None:
        """Hold a decision's resources until the bind is confirmed or fails."""
        assert self.snapshot is not None
        self.snapshot.bind(decision.pod, decision.node, decision.gpus)
        self.assumed.add(decision.pod.name)
        self.pending.discard(decision.pod.name)

    def forget(self, uid: str) -> None:
        """Drop an assumption whose bind failed; the pod is re-derived from its record."""
        if uid in self.assumed:
            self.assumed.discard(uid)
            self._release(uid)
        self._dirty.add(uid)

    def pending_in_order(self) -> list[PodRecord]:
        """Pending pods, highest priority first, then oldest first."""
        pods = [self.pods[uid] for uid in self.pending if uid in self.pods]
        pods.sort(
            key=lambda p: (
                -p.spec.priority,
                p.metadata.creation_timestamp or "",
                p.metadata.namespace,
                p.metadata.name,
            )
        )
        return pods

    def node_checks(self, pod: PodRecord) -> tuple[NodeCheck, ...]:
        """Per-node masks for what the resource model does not hold.

        Readiness, cordons, taints (NoSchedule and NoExecute) and the node selector.
        """
        checks = list(self._node_masks.items())
        taints = self._toleration_mask(pod.spec.tolerations)
        if taints is not None:
            checks.append((REASON_TAINTS, taints))
        selector = self._selector_mask(pod)
        if selector is not None:
            checks.append((REASON_SELECTOR, selector))
        return tuple(checks)

    def _toleration_mask(self, tolerations: list[Toleration]) -> BoolArray | None:
        snapshot = self.snapshot
        assert snapshot is not None
        key = tuple(tolerations)
        mask = self._toleration_masks.get(key)
        if mask is None:
            mask = np.array(
                [
                    all(
                        _tolerates(tolerations, t.key, t.value, t.effect)
                        for t in self.nodes[name].spec.taints
                        if t.effect in _BLOCKING_EFFECTS
                    )
                    for name in snapshot.node_names
                ]
            )
            self._toleration_masks[key] = mask
        return None if mask.all() else mask

    def _selector_mask(self, pod: PodRecord) -> BoolArray | None:
        """Nodes matching the pod's node selector and required node affinity (None: all)."""
        selector = pod.spec.node_selector
        affinity = pod.spec.affinity.node_affinity
        required = (
            affinity.required_during_scheduling_ignored_during_execution if affinity else None
        )
        if not selector and required is None:
            return None
        snapshot = self.snapshot
        assert snapshot is not None
        key = (frozenset(selector.items()), required)
        mask = self._selector_masks.get(key)
        if mask is None:
            mask = np.array(
                [
                    all(self.nodes[name].metadata.labels.get(k) == v for k, v in selector.items())
                    and (
                        required is None
                        or node_matches(required, self.nodes[name].metadata.labels, name)
                    )
                    for name in snapshot.node_names
                ]
            )
            self._selector_masks[key] = mask
        return mask

    def spec_of(self, pod: PodRecord) -> PodSpec:
        """The core's view of a pending pod (raises :class:`InvalidObjectError`).

        Cached per pod and resourceVersion: a pending pod is looked at on every retry.
        """
        uid, version = pod.metadata.uid, pod.metadata.resource_version
        cached = self._specs.get(uid)
        if cached is not None and cached[0] == version:
            return cached[1]
        spec = pod_spec(pod)
        self._specs[uid] = (version, spec)
        return spec
