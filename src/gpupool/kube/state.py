"""The scheduler's cache of a live cluster: informer records in, a consistent snapshot out.

:class:`ClusterState` keeps the records the informers deliver and, while this replica leads,
maintains from them the same :class:`~gpupool.core.snapshot.ClusterSnapshot` the simulator uses
(the scheduling queue is :mod:`gpupool.kube.queue`):

* Nodes become snapshot rows. The snapshot is rebuilt only when something scheduling reads
  changes (allocatable, labels, taints, readiness), not on heartbeats.
* A pod holds resources while it is bound and has not finished, **including while it
  terminates**: its containers may run for the whole grace period (or as long as a finalizer
  keeps the pod), and the kubelet's device manager keeps its devices until then too.
* What a bound pod holds depends on what can be believed about it (trust nothing a tenant can
  write). A pod whose allocation record passes every check against the pod and carries the
  scheduler's signature (:mod:`gpupool.kube.record_check`, :mod:`gpupool.kube.signing`) holds
  exactly the GPUs of its record. Any other bound pod (a record that fails a check, a forged or
  copied one, no record, another scheduler's pod) is *foreign*: it holds its CPU, memory and a
  best-fit choice of GPUs, and when even that does not fit, as much of it as the node has left;
  never nothing. Gpupool's own pods held as foreign get a Warning and are counted.
* Which pod keeps a contested GPU never depends on the order events arrive in: trusted records
  are held first on a rebuild, and a trusted record that meets foreign holdings on its node
  displaces them (they are then re-held from what is left).
* A pod this scheduler has just decided is *assumed*: it holds its GPUs from the moment of the
  decision until the watch shows it bound (or the bind failed), so no GPU share can be handed
  out twice while a Binding is in flight.
* A standby replica keeps only the records: no snapshot, no change tracking, so its memory does
  not grow with the stream of pod updates it never schedules. Becoming leader rebuilds
  everything from the records.

Everything here is synchronous and runs between awaits of the event loop, so the snapshot is
never seen half-updated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.core.decisions import Bind
from gpupool.core.filtering import NodeCheck, eligible_gpus
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import AllocationError, ClusterSnapshot
from gpupool.kube import allocation
from gpupool.kube.informer import DELETED
from gpupool.kube.node_checks import NodeChecks
from gpupool.kube.record_check import problems
from gpupool.kube.records import NodeRecord, PodRecord
from gpupool.kube.signing import RecordSigner
from gpupool.kube.translate import InvalidObjectError, gpu_uuids, node_spec, pod_spec
from gpupool.kube.vocabulary import ANNOTATION_ALLOCATION
from gpupool.scheduling.gpu_choice import best_fit_gpus

log = logging.getLogger(__name__)

Warn = Callable[[PodRecord, str, str], None]
"""Called as ``warn(pod, reason, message)`` for a Warning Event about a pod."""
Prepare = Callable[[ClusterSnapshot], None]
"""Called with every fresh snapshot before anything is bound on it (pools' sharing limits)."""


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


def _no_warning(pod: PodRecord, reason: str, message: str) -> None:
    """The default :data:`Warn`: nothing to report to."""


def _no_preparation(snapshot: ClusterSnapshot) -> None:
    """The default :data:`Prepare`: nothing to configure."""


@dataclass
class StateStats:
    """Counters for metrics and tests.

    Attributes:
        rebuilds: Full snapshot rebuilds.
        conflicts: Pods that could not be held as recorded or requested (a foreign pod held
            only in part, two trusted records on one GPU).
        invalid_nodes: Nodes left out because a field could not be read.
        untrusted: Bound pods of this scheduler held as foreign (record invalid or missing).
    """

    rebuilds: int = 0
    conflicts: int = 0
    invalid_nodes: int = 0
    untrusted: int = 0


@dataclass
class ClusterState:
    """Records, holdings and the snapshot for one scheduler.

    Args:
        scheduler_name: ``spec.schedulerName`` of the pods this scheduler places.
        signer: Verifies that a record is the scheduler's own (None: trust no record).
        warn: Where Warning Events about pods go.
        prepare: Configures each fresh snapshot before pods are held on it.
    """

    scheduler_name: str
    signer: RecordSigner | None = None
    warn: Warn = _no_warning
    prepare: Prepare = _no_preparation
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    snapshot: ClusterSnapshot | None = None
    uuids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    assumed: set[str] = field(default_factory=set)
    foreign: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)
    pending_changes: set[str] = field(default_factory=set)
    held_changes: set[str] = field(default_factory=set)
    capacity_epoch: int = 0
    active: bool = False
    stats: StateStats = field(default_factory=StateStats)
    checks: NodeChecks = field(default_factory=NodeChecks)
    _signatures: dict[str, tuple[object, ...]] = field(default_factory=dict)
    _nodes_changed: bool = True
    _dirty: set[str] = field(default_factory=set)
    _specs: dict[str, tuple[str, PodSpec]] = field(default_factory=dict)
    _warned: dict[str, str] = field(default_factory=dict)

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
        """Informer handler for pods (a finished pod counts as gone)."""
        uid = pod.metadata.uid
        if kind == DELETED or pod.finished:
            self.pods.pop(uid, None)
            self._specs.pop(uid, None)
            self._warned.pop(uid, None)
        else:
            self.pods[uid] = pod
        if self.active:
            self._dirty.add(uid)

    # -- bringing the snapshot up to date ----------------------------------------------------

    def sync(self) -> None:
        """Apply every change since the last call to the snapshot and the pending set."""
        if not self.active:
            return
        if self._nodes_changed:
            self._rebuild()
            return
        dirty, self._dirty = self._dirty, set()
        for uid in dirty:
            self._reconcile(uid)

    def invalidate(self) -> None:
        """Rebuild the snapshot at the next sync (the pools or queues changed)."""
        self._nodes_changed = True

    def restart(self) -> None:
        """Forget assumptions and rebuild everything from the records (a new term as leader)."""
        self.active = True
        self.assumed.clear()
        self.snapshot = None
        self._nodes_changed = True

    def deactivate(self) -> None:
        """Back to standby: keep only the records."""
        self.active = False
        self.snapshot = None
        self.assumed.clear()
        self.foreign.clear()
        self.held_changes.clear()
        self.pending_changes |= self.pending
        self.pending.clear()
        self._dirty.clear()
        self._specs.clear()
        self._nodes_changed = True

    def _rebuild(self) -> None:
        specs = []
        for name in sorted(self.nodes):
            try:
                specs.append(node_spec(self.nodes[name]))
            except (InvalidObjectError, ValueError) as error:
                self.stats.invalid_nodes += 1
                log.warning("node %s left out: %s", name, error)
        self._nodes_changed = False
        self.stats.rebuilds += 1
        self.capacity_epoch += 1
        previous = self.snapshot
        self.snapshot = ClusterSnapshot(specs) if specs else None
        if self.snapshot is not None:
            self.prepare(self.snapshot)
        records = [self.nodes[spec.name] for spec in specs]
        self.uuids = {
            spec.name: gpu_uuids(r, spec.gpu_count) for spec, r in zip(specs, records, strict=True)
        }
        self.checks = NodeChecks.for_nodes(records)
        kept = {uid: previous.allocations[uid] for uid in self.assumed} if previous else {}
        self.assumed = set()
        self.foreign = set()
        self.pending_changes |= self.pending
        self.pending.clear()
        self._dirty.clear()
        # Trusted records first, then our own decisions in flight, then foreign pods: which
        # pod keeps a contested GPU must not depend on the order records happen to be in.
        foreign: list[PodRecord] = []
        for uid in sorted(self.pods):
            pod = self.pods[uid]
            if pod.spec.node_name and uid not in kept and not self._hold_trusted(pod):
                foreign.append(pod)
        for uid, held in kept.items():
            name = previous.node_names[held.node] if previous else ""
            if self.snapshot is not None and name in self.snapshot.node_index:
                try:
                    self.snapshot.bind(held.pod, self.snapshot.node_index[name], held.gpus)
                    self.assumed.add(uid)
                except AllocationError as error:
                    self._conflict(uid, str(error))
            self._dirty.add(uid)  # the watch may have moved on while we rebuilt
        for pod in foreign:
            self._hold_foreign(pod)
        for uid, pod in self.pods.items():
            if not pod.spec.node_name:
                self._reconcile(uid)
        dirty, self._dirty = self._dirty, set()
        for uid in dirty:
            self._reconcile(uid)
        self.held_changes = set(self.snapshot.allocations) if self.snapshot else set()

    def _reconcile(self, uid: str) -> None:
        self.held_changes.add(uid)
        pod = self.pods.get(uid)
        snapshot = self.snapshot
        held = snapshot.allocations.get(uid) if snapshot else None
        if uid in self.assumed:
            if pod is not None and not pod.spec.node_name:
                return  # the Binding is in flight
            self.assumed.discard(uid)
            confirmed = (
                pod is not None
                and held is not None
                and snapshot is not None
                and snapshot.node_names[held.node] == pod.spec.node_name
            )
            if confirmed:
                return  # the watch shows the bind we made
            self._release(uid)
            held = None
        if pod is None:
            self._set_pending(uid, False)
            self.pending_changes.add(uid)  # the queue must let go of it, pending or not
            if held is not None:
                self._release(uid)
            return
        if not pod.spec.node_name:
            if held is not None:  # cannot happen for a live pod; be safe
                self._release(uid)
            self._set_pending(
                uid,
                pod.spec.scheduler_name == self.scheduler_name
                and not pod.spec.scheduling_gates
                and pod.metadata.deletion_timestamp is None,
            )
            return
        self._set_pending(uid, False)
        if held is None and not self._hold_trusted(pod):
            self._hold_foreign(pod)

    def _set_pending(self, uid: str, pending: bool) -> None:
        if pending != (uid in self.pending):
            if pending:
                self.pending.add(uid)
            else:
                self.pending.discard(uid)
            self.pending_changes.add(uid)

    # -- holding bound pods ------------------------------------------------------------------

    def _bound_spec(self, pod: PodRecord) -> tuple[PodSpec, int] | None:
        """The pod's request and its node's row, or None when it is on no node we schedule."""
        snapshot = self.snapshot
        if snapshot is None or pod.spec.node_name not in snapshot.node_index:
            return None  # a pod on a node we do not schedule onto (or not yet seen)
        try:
            spec = pod_spec(pod)
        except InvalidObjectError as error:
            # a request we cannot read: hold what the core can, its CPU and memory at least
            log.warning("bound pod %s: %s", pod.key, error)
            spec = PodSpec(name=pod.metadata.uid, cpu_milli=0, memory_mib=0)
        return spec, snapshot.node_index[pod.spec.node_name]

    def _hold_trusted(self, pod: PodRecord) -> bool:
        """Hold ``pod`` as its record says if the record can be believed; False otherwise."""
        snapshot = self.snapshot
        found = self._bound_spec(pod)
        text = pod.metadata.annotations.get(ANNOTATION_ALLOCATION)
        if found is None or snapshot is None:
            return True  # nothing to hold here
        if pod.spec.scheduler_name != self.scheduler_name:
            return False
        spec, row = found
        if text is None:
            return self._distrust(pod, "bound without the gpupool scheduler (no allocation)")
        try:
            record = allocation.decode(text)
        except allocation.AllocationFormatError as error:
            return self._distrust(pod, str(error))
        node = snapshot.nodes[row]
        found_problems = problems(
            record, pod, spec, node, self.uuids[node.name], self.scheduler_name, self.signer
        )
        if found_problems:
            return self._distrust(pod, "; ".join(found_problems))
        gpus = tuple(share.index for share in record.gpus)
        try:
            snapshot.bind(spec, row, gpus)
        except AllocationError:
            displaced = sorted(uid for uid in snapshot.pods_on_node[row] if uid in self.foreign)
            for uid in displaced:
                self._release(uid)
                self.foreign.discard(uid)
            try:
                snapshot.bind(spec, row, gpus)
            except AllocationError as error:  # two trusted records on one GPU: should not be
                self._conflict(pod.metadata.uid, f"{pod.key}: {error}")
                return self._restore(displaced, result=False)
            self._restore(displaced, result=True)
        return True

    def _restore(self, displaced: list[str], *, result: bool) -> bool:
        for uid in displaced:
            if uid in self.pods:
                self._hold_foreign(self.pods[uid])
        return result

    def _distrust(self, pod: PodRecord, why: str) -> bool:
        message = f"allocation not trusted, held as a foreign pod: gpupool.io/allocation: {why}"
        uid = pod.metadata.uid
        if self._warned.get(uid) != message:
            self._warned[uid] = message
            self.stats.untrusted += 1
            log.warning("%s: %s", pod.key, message)
            self.warn(pod, "AllocationNotTrusted", message)
        return False

    def _hold_foreign(self, pod: PodRecord) -> None:
        """Hold what a pod bound without a trusted record most likely uses: never nothing."""
        snapshot = self.snapshot
        found = self._bound_spec(pod)
        if found is None or snapshot is None:
            return
        spec, row = found
        self.held_changes.add(spec.name)
        eligible = int(eligible_gpus(snapshot, spec, row).sum()) if spec.gpu_count else 0
        if eligible >= spec.gpu_count:
            try:
                snapshot.bind(spec, row, best_fit_gpus(snapshot, spec, row))
                self.foreign.add(spec.name)
                return
            except AllocationError:
                pass
        # The node cannot hold all of it: hold as much as is left, and say so.
        partial = _clamped(snapshot, spec, row, min(eligible, spec.gpu_count))
        try:
            snapshot.bind(partial, row, best_fit_gpus(snapshot, partial, row))
            self.foreign.add(spec.name)
        except AllocationError as error:
            self._conflict(spec.name, f"{pod.key}: {error}")
            return
        self._conflict(spec.name, f"{pod.key}: held only in part on {pod.spec.node_name}")

    def _release(self, uid: str) -> None:
        self.held_changes.add(uid)
        self.foreign.discard(uid)
        if self.snapshot is not None and uid in self.snapshot.allocations:
            self.snapshot.release(uid)
            self.capacity_epoch += 1

    def _conflict(self, uid: str, message: str) -> None:
        self.stats.conflicts += 1
        log.error("allocation conflict for %s: %s", uid, message)

    # -- decisions ---------------------------------------------------------------------------

    def assume(self, decision: Bind) -> None:
        """Hold a decision's resources until the bind is confirmed or fails."""
        assert self.snapshot is not None
        self.snapshot.bind(decision.pod, decision.node, decision.gpus)
        self.held_changes.add(decision.pod.name)
        self.assumed.add(decision.pod.name)
        self._set_pending(decision.pod.name, False)

    def forget(self, uid: str) -> None:
        """Drop an assumption whose bind failed; the pod is re-derived from its record."""
        if uid in self.assumed:
            self.assumed.discard(uid)
            self._release(uid)
        self._dirty.add(uid)

    def node_checks(self, pod: PodRecord) -> tuple[NodeCheck, ...]:
        """Per-node masks for what the resource model does not hold (see NodeChecks)."""
        return self.checks.for_pod(pod)

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


def _clamped(snapshot: ClusterSnapshot, spec: PodSpec, row: int, gpus: int) -> PodSpec:
    """``spec`` cut down to what ``row`` has left: CPU, memory, ``gpus`` GPUs, a MIG slice."""
    mig = spec.mig_profile
    if mig and not (
        mig in snapshot.mig_profiles
        and snapshot.mig_free[row, snapshot.mig_profiles.index(mig)] >= 1
    ):
        mig = ""
    return PodSpec(
        name=spec.name,
        cpu_milli=min(spec.cpu_milli, int(snapshot.cpu_free[row])),
        memory_mib=min(spec.memory_mib, int(snapshot.memory_free[row])),
        gpu_count=gpus,
        gpu_milli=spec.gpu_milli if gpus else 0,
        gpu_memory_mib=spec.gpu_memory_mib if gpus else 0,
        mig_profile=mig,
    )
