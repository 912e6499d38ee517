"""Work gpupool evicted keeps its place: the pod its controller makes again queues from the start.

Preemption, reclaim and governance evict pods; a Job, JobSet, Deployment or StatefulSet then
makes a new pod for the same work. Ordered by its own creation time, that pod would go to the
back of its queue, behind everything that arrived while the first one waited and ran, so the
work gpupool took away would also lose its turn. So when a pod leaves by gpupool's hand
(:mod:`gpupool.kube.scheduler.departures`), :class:`Requeue` remembers when the evicted pod
was created under its work's key, and the first pending pod of the same key takes that time as
its place in the queue (never a later one than its own).

The key is the pod's namespace and controller (``ownerReferences`` with ``controller: true``)
and, where the controller keeps an identity per pod, that identity: a StatefulSet's pod name, an
indexed Job's ``batch.kubernetes.io/job-completion-index``. Only gpupool's own evictions are
remembered, never a time a tenant wrote; a tenant who names another controller of its own
namespace as its pod's owner can only reorder that namespace's own work. The memory is the
leader's: a new leader orders the recreated pods by their creation (kept for :data:`KEEP_S`).

A pod with no controller is not recreated by anyone: its Event and the audit say that its work
ends with the eviction (:func:`runs_again`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpupool.kube.objects.records import OwnerReference, PodRecord

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""The label an indexed Job's pods carry: the index a recreated pod takes over."""

KEEP_S = 24 * 3600.0
"""How long an evicted pod's place is kept for a pod its controller has not made yet."""

WorkKey = tuple[str, str, str]
"""(namespace, controller uid, identity within the controller: "" when it keeps none)."""


def controller_of(pod: PodRecord) -> OwnerReference | None:
    """The pod's managing owner, if any."""
    return next((o for o in pod.metadata.owner_references if o.controller), None)


def work_key(pod: PodRecord) -> WorkKey | None:
    """The key of the work a pod does (``None``: a bare pod, which nothing recreates)."""
    owner = controller_of(pod)
    if owner is None or not owner.uid:
        return None
    meta = pod.metadata
    if owner.kind == "StatefulSet":
        identity = meta.name
    else:
        identity = meta.labels.get(COMPLETION_INDEX, "") if owner.kind == "Job" else ""
    return (meta.namespace, owner.uid, identity)


def runs_again(pod: PodRecord) -> str:
    """What becomes of an evicted pod's work, for its Event and the audit."""
    owner = controller_of(pod)
    if owner is None:
        return "no controller recreates it: its work ends here"
    return f"its {owner.kind} {owner.name} recreates it, queued at this pod's place"


class Requeue:
    """The places of evicted pods, kept for the pods their controllers make again.

    Args:
        clock: Seconds (for how long a place is kept).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.places: dict[WorkKey, list[tuple[float, float]]] = {}
        """Per work key, (creation time of an evicted pod, when it left), oldest first."""
        self.taken: dict[str, float] = {}
        """Pending pods (by uid) that took an evicted pod's place, and that place."""

    def left(self, pod: PodRecord, created_at: float) -> None:
        """Gpupool evicted (or deleted) ``pod``, created at ``created_at``: keep its place."""
        created_at = self.taken.pop(pod.metadata.uid, created_at)  # it held an older place
        key = work_key(pod)
        if key is None:
            return
        now = self.clock()
        self.places = {
            k: kept for k, places in self.places.items() if (kept := _fresh(places, now))
        }
        self.places.setdefault(key, []).append((created_at, now))
        self.places[key].sort()

    def place(self, pod: PodRecord, created_at: float) -> float:
        """The queue place of pending ``pod`` created at ``created_at``.

        An evicted pod's, if it takes one over; the same answer for as long as the pod lives.
        """
        uid = pod.metadata.uid
        if uid in self.taken:
            return self.taken[uid]
        key = work_key(pod)
        places = self.places.get(key) if key is not None else None
        if not places or places[0][0] >= created_at:
            return created_at
        kept, _ = places.pop(0)
        if not places:
            del self.places[key]  # type: ignore[arg-type]
        self.taken[uid] = kept
        return kept

    def forget(self, uid: str) -> None:
        """A pod left the cluster: its taken place goes with it."""
        self.taken.pop(uid, None)


def _fresh(places: list[tuple[float, float]], now: float) -> list[tuple[float, float]]:
    return [(created, left) for created, left in places if now - left < KEEP_S]
