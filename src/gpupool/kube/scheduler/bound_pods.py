"""How the cache holds a bound pod: as its trusted record says, or as a foreign pod.

Split from :mod:`gpupool.kube.scheduler.state` (the records and the snapshot's life) because this
is the one place that decides what a bound pod holds, and it reads only the snapshot, the
signer and the counters: :mod:`gpupool.kube.scheduler.holding` decides *what* to hold, this
binds it, displacing foreign holdings when a trusted record needs their GPUs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gpupool.core.model import PodSpec
from gpupool.core.snapshot import AllocationError, ClusterSnapshot
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.signing import RecordSigner
from gpupool.kube.scheduler.holding import bound_request, foreign_holdings, record_gpus

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpupool.kube.scheduler.state import StateStats

log = logging.getLogger("gpupool.kube.scheduler.state")


class BoundPods:
    """The holding half of :class:`~gpupool.kube.scheduler.state.ClusterState`.

    The attributes are the state's own (declared here for the type checker).
    """

    scheduler_name: str
    signer: RecordSigner | None
    warn: Callable[[PodRecord, str, str], None]
    pods: dict[str, PodRecord]
    snapshot: ClusterSnapshot | None
    uuids: dict[str, tuple[str, ...]]
    foreign: set[str]
    held_changes: set[str]
    capacity_epoch: int
    stats: StateStats
    _warned: dict[str, str]

    def _hold_trusted(self, pod: PodRecord) -> bool:
        """Hold ``pod`` as its record says if the record can be believed; False otherwise."""
        snapshot = self.snapshot
        found = bound_request(snapshot, pod) if snapshot is not None else None
        if found is None or snapshot is None:
            return True  # nothing to hold here
        if pod.spec.scheduler_name != self.scheduler_name:
            return False
        spec, row = found
        uuids = self.uuids[snapshot.node_names[row]]
        gpus = record_gpus(snapshot, pod, spec, row, uuids, self.scheduler_name, self.signer)
        if isinstance(gpus, str):
            return self._distrust(pod, gpus)
        return self._bind_displacing(spec, row, gpus, pod.key)

    def _bind_displacing(self, spec: PodSpec, row: int, gpus: tuple[int, ...], what: str) -> bool:
        """Hold a trusted allocation, moving foreign holdings on its node out of its way."""
        assert self.snapshot is not None
        snapshot = self.snapshot
        self.held_changes.add(spec.name)
        try:
            snapshot.bind(spec, row, gpus, running=True)
        except AllocationError:
            displaced = sorted(uid for uid in snapshot.pods_on_node[row] if uid in self.foreign)
            for uid in displaced:
                self._release(uid)
                self.foreign.discard(uid)
            try:
                snapshot.bind(spec, row, gpus, running=True)
            except AllocationError as error:  # two trusted records on one GPU: should not be
                self._conflict(spec.name, f"{what}: {error}")
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
        found = bound_request(snapshot, pod) if snapshot is not None else None
        if found is None or snapshot is None:
            return
        spec, row = found
        self.held_changes.add(spec.name)
        error: AllocationError | None = None
        for held, gpus in foreign_holdings(snapshot, spec, row):
            try:
                snapshot.bind(held, row, gpus, running=True)
            except AllocationError as refused:
                error = refused
                continue
            self.foreign.add(spec.name)
            if held is not spec:
                self._conflict(spec.name, f"{pod.key}: held only in part on {pod.spec.node_name}")
            return
        self._conflict(spec.name, f"{pod.key}: {error}")

    def _release(self, uid: str) -> None:
        self.held_changes.add(uid)
        self.foreign.discard(uid)
        if self.snapshot is not None and uid in self.snapshot.allocations:
            self.snapshot.release(uid)
            self.capacity_epoch += 1

    def _conflict(self, uid: str, message: str) -> None:
        self.stats.conflicts += 1
        log.error("allocation conflict for %s: %s", uid, message)
