"""Telling a running pod that a GPU it holds broke under it.

Split from :mod:`gpupool.kube.scheduler.state` because it is a report to the pod's owner, not
part of keeping the records and the snapshot: the node agent marks a GPU unhealthy, the snapshot
keeps new pods off it, and this warns each pod already holding it, once, what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.records import PodRecord

log = logging.getLogger("gpupool.kube.scheduler.state")

REASON_GPU_UNHEALTHY = "GPUUnhealthy"
"""The Event reason for a pod on a GPU that broke under it."""


class UnhealthyGpuWarnings:
    """The unhealthy-GPU warnings of :class:`~gpupool.kube.scheduler.state.ClusterState`.

    The attributes are the state's own (declared here for the type checker).
    """

    warn: Callable[[PodRecord, str, str], None]
    pods: dict[str, PodRecord]
    snapshot: ClusterSnapshot | None
    uuids: dict[str, tuple[str, ...]]
    _told_unhealthy: set[str]

    def _tell_unhealthy(self, uid: str) -> None:
        """A Warning, once per pod, when a GPU it holds is unhealthy (new pods avoid it)."""
        pod = self.pods.get(uid)
        broken = self.snapshot.unhealthy_held(uid) if self.snapshot is not None else ()
        if pod is None or not broken or uid in self._told_unhealthy:
            return
        self._told_unhealthy.add(uid)
        node = pod.spec.node_name
        names = ", ".join(self.uuids.get(node, ())[gpu] or f"GPU {gpu}" for gpu in broken)
        message = (
            f"{node}: the node agent reports {names} unhealthy; this pod keeps running there but "
            "its GPU work may fail, and no new pod is placed on it. Delete the pod (or let its "
            "controller replace it) to run on a healthy GPU."
        )
        log.warning("%s: %s", pod.key, message)
        self.warn(pod, REASON_GPU_UNHEALTHY, message)
