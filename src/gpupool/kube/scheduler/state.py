"""The scheduler's cache of a live cluster: informer records in, a consistent snapshot out.

:class:`ClusterState` keeps the records the informers deliver and, while this replica leads,
maintains from them the same :class:`~gpupool.core.snapshot.ClusterSnapshot` the simulator uses
(the scheduling queue is :mod:`gpupool.kube.scheduler.queue`):

* Nodes become snapshot rows. The snapshot is rebuilt only when something scheduling reads
  changes (allocatable, labels, taints, readiness), not on heartbeats.
* A pod holds resources while it is bound and has not finished, **including while it
  terminates**: its containers may run for the whole grace period (or as long as a finalizer
  keeps the pod), and the kubelet's device manager keeps its devices until then too.
* What a bound pod holds depends on what can be believed about it (trust nothing a tenant can
  write). A pod whose allocation record passes every check against the pod and carries the
  scheduler's signature (:mod:`gpupool.kube.objects.record_check`,
  :mod:`gpupool.kube.objects.signing`) holds exactly the GPUs of its record. Any other bound pod (a
  record that fails a check, a forged or copied one, no record, another scheduler's pod) is
  *foreign*: it holds its CPU, memory and a best-fit choice of GPUs, and when even that does not
  fit, as much of it as the node has left; never nothing (:mod:`gpupool.kube.scheduler.holding`
  decides what; this module binds it). Gpupool's own pods held as foreign get a Warning and are
  counted.
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
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gpupool.core.decisions import Bind
from gpupool.core.model import PodSpec
from gpupool.core.pod_relative import relabel
from gpupool.core.snapshot import AllocationError, ClusterSnapshot
from gpupool.kube.client.informer import DELETED
from gpupool.kube.objects.dra.records import ResourceClaim
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.signing import RecordSigner
from gpupool.kube.objects.translate import InvalidObjectError, gpu_uuids, node_spec, pod_spec
from gpupool.kube.scheduler.bound_pods import BoundPods
from gpupool.kube.scheduler.contention_expiry import ContentionExpiry
from gpupool.kube.scheduler.dra.claim_state import ClaimHolder
from gpupool.kube.scheduler.dra.claims import (
    CLAIM_KEY,
    ClaimBind,
    ClaimBook,
    ClaimPlacement,
    claim_key,
)
from gpupool.kube.scheduler.node_signature import node_signature
from gpupool.kube.scheduler.placed_pods import PlacedPodsOfState
from gpupool.kube.scheduler.unhealthy_gpus import UnhealthyGpuWarnings
from gpupool.kube.scheduler.volume_binding import VolumeBook, has_claims, with_volumes
from gpupool.kube.scheduler.volume_limits import volume_conflict

log = logging.getLogger(__name__)

Warn = Callable[[PodRecord, str, str], None]
"""Called as ``warn(pod, reason, message)`` for a Warning Event about a pod."""
Prepare = Callable[[ClusterSnapshot], None]
"""Called with every fresh snapshot before anything is bound on it (pools' sharing limits)."""


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
class ClusterState(BoundPods, PlacedPodsOfState, UnhealthyGpuWarnings, ContentionExpiry):
    """Records, holdings and the snapshot for one scheduler.

    Args:
        scheduler_name: ``spec.schedulerName`` of the pods this scheduler places.
        signer: Verifies that a record is the scheduler's own (None: trust no record).
        warn: Where Warning Events about pods go.
        prepare: Configures each fresh snapshot before pods are held on it.
        clock: Seconds since the epoch (when agents' signals go stale).
    """

    scheduler_name: str
    signer: RecordSigner | None = None
    warn: Warn = _no_warning
    prepare: Prepare = _no_preparation
    clock: Callable[[], float] = time.time
    _contention_until: dict[str, float] = field(default_factory=dict)
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
    claims: ClaimBook = field(default_factory=ClaimBook)
    placements: dict[str, ClaimPlacement] = field(default_factory=dict)
    claim_binds: dict[str, ClaimBind] = field(default_factory=dict)
    claim_holder: ClaimHolder = field(init=False)
    volumes: VolumeBook = field(default_factory=VolumeBook)
    _signatures: dict[str, tuple[object, ...]] = field(default_factory=dict)
    _nodes_changed: bool = True
    _dirty: set[str] = field(default_factory=set)
    _specs: dict[str, tuple[str, PodSpec]] = field(default_factory=dict)
    _warned: dict[str, str] = field(default_factory=dict)
    _told_unhealthy: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.claim_holder = ClaimHolder(self)

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
        self.renew_contention(node)
        signature = node_signature(node)
        if self._signatures.get(name) != signature:
            self._signatures[name] = signature
            self._nodes_changed = True

    def on_pod(self, kind: str, pod: PodRecord) -> None:
        """Informer handler for pods (a finished pod counts as gone)."""
        uid = pod.metadata.uid
        if kind == DELETED or pod.finished:
            self.pods.pop(uid, None)
            self.placements.pop(uid, None)
            self._specs.pop(uid, None)
            self._warned.pop(uid, None)
            self._told_unhealthy.discard(uid)
        else:
            self.pods[uid] = pod
        if self.active:
            self._dirty.add(uid)

    def on_claim(self, kind: str, claim: ResourceClaim) -> None:
        """Informer handler for ResourceClaims: what a claim holds follows its allocation."""
        self.claims.on_claim(kind, claim)
        if self.active:
            self._dirty.add(claim_key(claim.metadata.uid))

    # -- bringing the snapshot up to date ----------------------------------------------------

    def sync(self) -> None:
        """Apply every change since the last call to the snapshot and the pending set."""
        if not self.active:
            return
        if self._nodes_changed or self.contention_went_stale():
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
        self.claims.assumed.clear()
        self.claim_binds.clear()
        self.snapshot = None
        self._nodes_changed = True

    def deactivate(self) -> None:
        """Back to standby: keep only the records."""
        self.active = False
        self.snapshot = None
        self.assumed.clear()
        self.claims.assumed.clear()
        self.claim_binds.clear()
        self.placements.clear()
        self.foreign.clear()
        self.held_changes.clear()
        self.pending_changes |= self.pending
        self.pending.clear()
        self._dirty.clear()
        self._specs.clear()
        self._nodes_changed = True

    def _rebuild(self) -> None:
        read = []
        for name in sorted(self.nodes):
            try:
                read.append((node_spec(self.nodes[name]), self.nodes[name]))
            except (InvalidObjectError, ValueError) as error:
                self.stats.invalid_nodes += 1
                log.warning("node %s left out: %s", name, error)
        specs = self.fresh_specs(read)
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
        kept = {uid: previous.allocations[uid] for uid in self.assumed} if previous else {}
        self.assumed = set()
        self.foreign = set()
        self.pending_changes |= self.pending
        self.pending.clear()
        self._dirty.clear()
        # Trusted records first, then our own decisions in flight, then foreign pods: which
        # pod keeps a contested GPU must not depend on the order records happen to be in.
        for uid in sorted(self.claims.by_uid):  # what claims hold: as trusted as pod records
            if claim_key(uid) not in kept:
                self.claim_holder.hold(self.claims.by_uid[uid])
        foreign: list[PodRecord] = []
        for uid in sorted(self.pods):
            pod = self.pods[uid]
            if pod.spec.node_name and uid not in kept and not self._hold_trusted(pod):
                foreign.append(pod)
        for uid, held in kept.items():
            name = previous.node_names[held.node] if previous else ""
            if self.snapshot is not None and name in self.snapshot.node_index:
                try:
                    self.snapshot.bind(
                        held.pod, self.snapshot.node_index[name], held.gpus, running=True
                    )
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
        if self.snapshot is not None and self.snapshot.unhealthy_gpus:
            for uid in self.snapshot.allocations:
                self._tell_unhealthy(uid)

    def _reconcile(self, uid: str) -> None:
        if uid.startswith(CLAIM_KEY):
            self.claim_holder.reconcile(uid)
            return
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
        elif held is not None and snapshot is not None:  # other pods' terms see its labels now
            relabel(snapshot, uid, tuple(sorted(pod.metadata.labels.items())))
        self._tell_unhealthy(uid)

    def _set_pending(self, uid: str, pending: bool) -> None:
        if pending != (uid in self.pending):
            if pending:
                self.pending.add(uid)
            else:
                self.pending.discard(uid)
            self.pending_changes.add(uid)

    # -- decisions ---------------------------------------------------------------------------

    def assume(self, decision: Bind) -> None:
        """Hold a decision's resources until the bind is confirmed or fails.

        A claim pod's GPUs are held by its claim and its CPU and memory by the pod, as they
        will be once bound; a new allocation is kept in the claim book until its claim shows it.
        A pod whose ReadWriteOncePod claim, or the node's last CSI attach slot, a pod decided
        before it has taken is refused here (kube-scheduler decides one pod at a time).

        Raises:
            AllocationError: The decision does not fit (or its claim's devices changed).
        """
        assert self.snapshot is not None
        uid = decision.pod.name
        pod = self.pods.get(uid)
        if pod is not None and has_claims(pod):  # what pods decided before it in this cycle took
            conflict = volume_conflict(pod, decision.node_name, self.volumes, self)
            if conflict is not None:
                raise AllocationError(f"{decision.node_name}: {conflict}")
        placement = self.placements.get(uid)
        if placement is None:
            self._assume(uid, decision.pod, decision.node, decision.gpus)
            return
        self.claim_holder.assume(decision, placement)

    def _assume(self, name: str, spec: PodSpec, node: int, gpus: tuple[int, ...]) -> None:
        assert self.snapshot is not None
        self.snapshot.bind(spec, node, gpus)
        self.held_changes.add(name)
        self.assumed.add(name)
        self._set_pending(name, False)

    def forget(self, uid: str) -> None:
        """Drop an assumption whose bind failed; the pod is re-derived from its record."""
        if uid in self.assumed:
            self.assumed.discard(uid)
            self._release(uid)
        self._dirty.add(uid)
        self.claim_holder.forget(uid)

    def spec_of(self, pod: PodRecord) -> PodSpec:
        """The core's view of a pending pod (raises :class:`InvalidObjectError`).

        Cached per pod and resourceVersion: a pending pod is looked at on every retry.
        """
        uid, version = pod.metadata.uid, pod.metadata.resource_version
        self.placements.pop(uid, None)
        if pod.spec.resource_claims and self.snapshot is not None:
            placement = self.claims.placement(pod, self.snapshot, self.uuids)
            if placement is not None:  # not cached: claims and slices change under it
                placement = replace(
                    placement, spec=with_volumes(placement.spec, pod, self.volumes, self)
                )
                self.placements[uid] = placement
                return placement.spec
        cached = self._specs.get(uid)
        if cached is not None and cached[0] == version:
            spec = cached[1]
        else:
            spec = pod_spec(pod)
            self._specs[uid] = (version, spec)
        return with_volumes(spec, pod, self.volumes, self)  # volumes change under it
