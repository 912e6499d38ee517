"""The pods one live cycle decides for, as the policy engine takes them.

The scheduling queue names the pods ready to be tried; pods that hold a nomination are decided
in every cycle as well (so a nomination is not lost while its pod backs off). Each becomes a
:class:`~gpupool.policy.workload.Workload` whose request carries its node selector, required
affinity and tolerations (:func:`~gpupool.kube.objects.translate.pod_spec`), so the engine, its
victim search and its reservations see every check kube-scheduler would apply. A pod whose
request cannot be read, or whose translation raises, gets that as its pending reason and backs
off; the others are decided as usual. A pod whose claims keep it off every node (missing,
unbound and Immediate: :class:`~gpupool.kube.scheduler.volume_binding.VolumesNotReadyError`) waits
with kube-scheduler's words.

Each pod is shown to the placement policy once (online policies learn the workload mix from
arrivals), not on every retry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from gpupool.core.framework import Scheduler
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.objects.pod_groups import group_key
from gpupool.kube.objects.records import PodRecord
from gpupool.kube.objects.translate import InvalidObjectError
from gpupool.kube.policy.book import PolicyBook
from gpupool.kube.scheduler.config import LiveStats
from gpupool.kube.scheduler.default_spread import DefaultSpread
from gpupool.kube.scheduler.gang_book import GangBook
from gpupool.kube.scheduler.state import ClusterState
from gpupool.kube.scheduler.verdicts import Verdicts
from gpupool.kube.scheduler.volume_binding import VolumesNotReadyError
from gpupool.policy.workload import Workload
from gpupool.scheduling.wait_cause import WaitKind

log = logging.getLogger(__name__)

FAILPOINT_RAISE_LABEL = "GPUPOOL_FAILPOINT_RAISE_LABEL"
"""Test-only: pods carrying the label named by this environment variable make scheduling raise.

It exists so that tests can prove one failing pod does not stop the others; it is read once at
start and does nothing unless set.
"""


def pod_order(pod: PodRecord) -> tuple[int, str, str, str]:
    """Highest priority first, then oldest, then by name (a total order)."""
    meta = pod.metadata
    return (-pod.spec.priority, meta.creation_timestamp or "", meta.namespace, meta.name)


class Intake:
    """Turns ready pods into the workloads of a cycle.

    Args:
        state: The cache (pending pods, their translated requests).
        book: The compiled policy's view of pods (queue, class, runtime).
        verdicts: Where a pod that cannot be read is reported.
        stats: Counts invalid pods.
        placement: The placement scheduler, shown each pod once.
        api: The API port its watches read: Services and controllers (the default topology
            spread of a pod that states none) and PodGroups (which pods are gangs).
        changed: Called when a PodGroup changes (pods waiting for it are tried again).
    """

    def __init__(
        self,
        state: ClusterState,
        book: PolicyBook,
        verdicts: Verdicts,
        stats: LiveStats,
        placement: Scheduler,
        api: KubeAPI,
        changed: Callable[[], None],
    ) -> None:
        self.state = state
        self.book = book
        self.verdicts = verdicts
        self.stats = stats
        self.placement = placement
        self.spread = DefaultSpread(api)
        self.gangs = GangBook(api, changed)
        self.seen: set[str] = set()  # pods shown to the policy (online learning)
        self._raise_label = os.environ.get(FAILPOINT_RAISE_LABEL, "")

    async def run(self) -> None:
        """Watch what turns a pod into a workload (Services, controllers, PodGroups)."""
        await asyncio.gather(self.spread.run(), self.gangs.run())

    def ready(self, every_cycle: Iterable[str]) -> list[str]:
        """The uids to decide now: those the queue releases, in pod order, then ``every_cycle``.

        Then the other pending pods of their gangs: a gang is decided whole.

        ``every_cycle``: pods tried in every cycle whatever their queue entry says, the
        nominees, the holders of backfill reservations and the blocked pods awaiting one: a
        parked holder would lose its reservation (a cycle keeps only its own pods'), a parked
        blocked pod would get none, and pods arriving after it would take the node it waits
        for.
        """
        state = self.state
        pods = state.pods
        ready = self.verdicts.queue.pop_active(
            time.monotonic(),
            state.capacity_epoch,
            lambda uid: pod_order(pods[uid]) if uid in pods else (0, "", "", uid),
        )
        found = list(dict.fromkeys([*ready, *every_cycle]))
        return [*found, *self._gang_peers(found)]

    def _gang_peers(self, uids: list[str]) -> list[str]:
        """The pending pods not among ``uids`` of the gangs some pod of ``uids`` belongs to."""
        pods = self.state.pods
        gangs = {key for uid in uids if uid in pods and (key := group_key(pods[uid]))}
        if not gangs:
            return []
        chosen = set(uids)
        return [
            uid
            for uid in self.state.pending
            if uid not in chosen and uid in pods and group_key(pods[uid]) in gangs
        ]

    def workloads(self, uids: Iterable[str]) -> list[Workload]:
        """The pending pods among ``uids`` as workloads; the others leave the queue."""
        state, queue = self.state, self.verdicts.queue
        workloads: list[Workload] = []
        for uid in uids:
            pod = state.pods.get(uid)
            if pod is None or uid not in state.pending:
                queue.discard(uid)
                continue
            workload = self._workload(pod)
            if workload is None:
                continue
            if uid not in self.seen:
                self.placement.observe(workload.pod)
                self.seen.add(uid)
            workloads.append(workload)
        return workloads

    def _workload(self, pod: PodRecord) -> Workload | None:
        try:
            if self._raise_label and self._raise_label in pod.metadata.labels:
                raise RuntimeError(f"failpoint: label {self._raise_label} on {pod.key}")
            workload = self.book.workload(pod, self.spread.applied(pod, self.state.spec_of(pod)))
            if workload.gang and not self.gangs.gang_of(pod):  # a basic group: one by one
                return replace(workload, gang="")
            return workload
        except VolumesNotReadyError as error:  # kube's PreFilter: no node, whatever runs there
            nodes = self.state.snapshot.size if self.state.snapshot is not None else 0
            message = f"0/{nodes} nodes are available: {error}."
            self.verdicts.failed(pod, message, "unschedulable", WaitKind.NODE_CONSTRAINTS)
        except InvalidObjectError as error:
            self.stats.invalid_pods += 1
            message = f"invalid request: {error}"
            self.verdicts.failed(pod, message, "unschedulable", WaitKind.INVALID)
        except Exception as error:
            log.exception("scheduling %s failed", pod.key)
            message = f"scheduling error: {type(error).__name__}: {error}"
            self.verdicts.failed(pod, message, "error", WaitKind.OTHER)
        return None
