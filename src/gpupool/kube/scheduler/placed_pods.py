"""Which pods the cache has placed, as the volume rules ask it.

Split from :mod:`gpupool.kube.scheduler.state` because it is the cache's answer to the volume
rules (:class:`~gpupool.kube.scheduler.volume_limits.PlacedPods`: a node's CSI attach limit and a
ReadWriteOncePod claim count the pods bound *or being bound*), not part of keeping the records
and the snapshot: it only reads them.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.volumes import uses_claim


class PlacedPodsOfState:
    """The placed-pods half of :class:`~gpupool.kube.scheduler.state.ClusterState`.

    The attributes are the state's own (declared here for the type checker).
    """

    pods: dict[str, PodRecord]
    snapshot: ClusterSnapshot | None
    assumed: set[str]

    def pods_on(self, node: str) -> Iterator[PodRecord]:
        """The pods bound, or being bound, to ``node`` (as the snapshot holds them)."""
        snapshot = self.snapshot
        row = snapshot.node_index.get(node) if snapshot is not None else None
        if snapshot is None or row is None:
            return
        for uid in snapshot.pods_on_node[row]:
            pod = self.pods.get(uid)
            if pod is not None:
                yield pod

    def in_use(self, namespace: str, claim: str, uid: str) -> bool:
        """Whether a pod other than ``uid`` that is bound or being bound uses the claim."""
        return any(
            other != uid
            and (pod.spec.node_name or other in self.assumed)
            and pod.metadata.namespace == namespace
            and uses_claim(pod, claim)
            for other, pod in self.pods.items()
        )
