"""The face of ``gpupool demo``: the dashboard and API over the embedded simulated cluster.

The demo steps its :class:`~gpupool.sim.demo.session.DemoSession` in the main thread while the
face is served from another (:func:`~gpupool.api.serve.serving`). Each request takes
:meth:`DemoView.detached` under the session's lock: a copy of the snapshot and of the lists,
built in milliseconds, from which the answer is computed without holding the lock. So the
dashboard shows exactly the state the same policy engine produced, never a half-applied step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from gpupool.api.app import create_face
from gpupool.api.congestion import CongestionSource
from gpupool.api.model import CostBucket, CostLine, Pool, Queue, Record
from gpupool.api.records import Namespaces
from gpupool.api.serve import serving
from gpupool.api.sources import DetachedView, SnapshotView
from gpupool.api.view import PodInfo, Waiting, pools_of, queues_of, team_of
from gpupool.core.contention import ContendedGpu, class_shares
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.governance.accounting import SECONDS_PER_HOUR
from gpupool.policy.cluster import ClusterPolicy
from gpupool.policy.units import MILLI_UNITS
from gpupool.policy.usage import pool_usage, queue_usage
from gpupool.sim.demo.contention import simulated_contention
from gpupool.sim.demo.embedded import ClusterEvent, EmbeddedCluster
from gpupool.sim.demo.session import DemoSession


def _pools(cluster: EmbeddedCluster) -> list[Pool]:
    return pools_of(pool_usage(cluster.policy, cluster.ledger, cluster.running.values()))


def _queues(cluster: EmbeddedCluster) -> list[Queue]:
    tables = cluster.policy.tables
    waiting = [tables.queue_of(w.namespace, w.queue) for w in cluster.pending.values()]
    return queues_of(queue_usage(cluster.policy, cluster.ledger, waiting))


class DemoView:
    """A :class:`~gpupool.api.view.ClusterView` of a running demo session."""

    source = "simulator (gpupool demo)"

    def __init__(self, session: DemoSession) -> None:
        self.session = session

    def _view(self) -> SnapshotView:
        with self.session.locked() as cluster:
            tables = cluster.policy.tables
            info = {
                name: PodInfo(key=name, team=tables.queues[record.queue].name)
                for name, record in cluster.running.items()
            }
            for name, waiting in cluster.pending.items():
                queue = tables.queue_of(waiting.namespace, waiting.queue)
                info[name] = PodInfo(key=name, team=tables.queues[queue].name)
            return SnapshotView(
                cluster.snapshot.copy(),
                [(w.pod, cluster.causes.get(name)) for name, w in cluster.pending.items()],
                info=info,
                source=self.source,
                pool_list=_pools(cluster),
                queue_list=_queues(cluster),
                workloads=dict(cluster.pending),
                compiled=cluster.policy,
                contended=_contended(cluster),
            )

    def snapshot(self) -> ClusterSnapshot | None:
        """A copy of the demo cluster's snapshot."""
        return self._view().snapshot()

    def pod_info(self, pod_id: str) -> PodInfo:
        """Who a pod is: ``team/name``, its queue as team."""
        return self._view().pod_info(pod_id)

    def gpu_uuids(self, node: str) -> Sequence[str]:
        """Simulated GPUs have no UUIDs."""
        return ()

    def waiting(self) -> list[Waiting]:
        """Pending pods with the engine's reasons."""
        return self._view().waiting()

    def pools(self) -> list[Pool]:
        """The demo's pools with their allocation."""
        return self._view().pools()

    def policy(self) -> ClusterPolicy | None:
        """The demo's compiled pools and queues (compiled once, never changed)."""
        with self.session.locked() as cluster:
            return cluster.policy

    def queues(self) -> list[Queue]:
        """The demo's queues with their use."""
        return self._view().queues()

    def contention(self) -> list[ContendedGpu]:
        """The simulated contention of the demo's GPUs."""
        return self._view().contention()

    def detached(self) -> DetachedView:
        """A frozen copy, taken under the session's lock."""
        return self._view().detached()


GOVERNANCE_ACTIONS = ("warn", "reclaim", "preempt")


def _record(event: ClusterEvent) -> Record:
    hours, rest = divmod(int(event.at), 3600)
    clock = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return Record(at=f"t={clock}", kind=event.action, subject=event.pod, detail=event.detail)


class DemoRecords:
    """The demo's decisions as the store would keep them (a :class:`RecordSource`).

    The demo's namespaces are its teams, which are also its queues.
    """

    def __init__(self, session: DemoSession) -> None:
        self.session = session

    def _events(self, namespaces: Namespaces) -> list[ClusterEvent]:
        with self.session.locked() as cluster:
            events = list(reversed(cluster.events))
        return [e for e in events if namespaces is None or team_of(e.pod) in namespaces]

    async def namespaces(self) -> set[str]:
        """The teams the decisions name."""
        with self.session.locked() as cluster:
            return {team_of(event.pod) for event in cluster.events}

    async def actions(self, limit: int, namespaces: Namespaces) -> list[Record]:
        """Warnings, reclaims and preemptions, newest first."""
        chosen = [e for e in self._events(namespaces) if e.action in GOVERNANCE_ACTIONS]
        return [_record(event) for event in chosen[:limit]]

    async def audit(self, limit: int, namespaces: Namespaces) -> list[Record]:
        """Every decision kept, newest first."""
        return [_record(event) for event in self._events(namespaces)[:limit]]

    async def cost(self, namespaces: Namespaces) -> tuple[list[CostLine], list[CostBucket]]:
        """GPU-hours per team: released shares, plus what running pods have held so far.

        Cut into the simulated clock's hours (:mod:`gpupool.sim.demo.hourly`), dated from the
        session's epoch, so the dashboard's chart has points from the first hour on.
        """
        with self.session.locked() as cluster:
            queues = cluster.policy.tables.queues
            running = [
                (queues[r.queue].name, r.units / MILLI_UNITS, r.started_at)
                for r in cluster.running.values()
            ]
            by_hour, now = cluster.hourly.with_open(running, cluster.now), cluster.now
        totals: dict[str, float] = {}
        buckets = []
        for hour, teams in sorted(by_hour.items()):
            shown = {t: v for t, v in teams.items() if namespaces is None or t in namespaces}
            for team, value in shown.items():
                totals[team] = totals.get(team, 0.0) + value
            start, end = hour * SECONDS_PER_HOUR, min((hour + 1) * SECONDS_PER_HOUR, now)
            buckets.append(
                CostBucket(
                    start=self.session.calendar(start),
                    end=self.session.calendar(end),
                    gpu_hours={team: round(value, 3) for team, value in sorted(shown.items())},
                )
            )
        lines = [CostLine(team=t, gpu_hours=round(v, 3)) for t, v in sorted(totals.items())]
        return lines, buckets


def _contended(cluster: EmbeddedCluster) -> list[ContendedGpu]:
    """The demo's GPUs under contention, from its simulated usage (call under the lock)."""
    classes = {name: r.workload.workload_class for name, r in cluster.running.items()}
    return simulated_contention(cluster.snapshot, cluster.usage, classes)


def demo_congestion(session: DemoSession) -> CongestionSource:
    """The demo's congestion ledger, read under its lock, dated from the session's epoch."""

    def read() -> dict[str, Any]:
        with session.locked() as cluster:
            shares = class_shares(_contended(cluster))
            return cluster.congestion.ledger.as_json(shares, epoch=session.epoch)

    return read


@contextmanager
def serve_demo(session: DemoSession, port: int) -> Iterator[str]:
    """Serve the dashboard and API of ``session`` on 127.0.0.1:``port``; yields the URL."""
    face = create_face(
        DemoView(session),
        None,
        DemoRecords(session),
        insecure_local=True,
        congestion=demo_congestion(session),
    )
    with serving(face, "127.0.0.1", port) as url:
        yield url
