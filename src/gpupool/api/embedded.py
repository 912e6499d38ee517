"""The face of ``gpupool demo``: the dashboard and API over the embedded simulated cluster.

The demo steps its :class:`~gpupool.sim.demo_session.DemoSession` in the main thread while the
face is served from another (:func:`~gpupool.api.serve.serving`). Each request takes
:meth:`DemoView.detached` under the session's lock: a copy of the snapshot and of the lists,
built in milliseconds, from which the answer is computed without holding the lock. So the
dashboard shows exactly the state the same policy engine produced, never a half-applied step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from gpupool.api.app import create_face
from gpupool.api.model import CostLine, Pool, Queue, Record
from gpupool.api.serve import serving
from gpupool.api.sources import DetachedView, SnapshotView
from gpupool.api.view import PodInfo, Waiting
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.policy.quota import NO_LIMIT
from gpupool.policy.units import MILLI_UNITS
from gpupool.sim.demo_session import DemoSession
from gpupool.sim.embedded import ClusterEvent, EmbeddedCluster


def _pools(cluster: EmbeddedCluster) -> list[Pool]:
    layout, used = cluster.policy.layout, cluster.ledger.used.sum(axis=0)
    return [
        Pool(
            name=pool.name,
            mode=pool.mode.value,
            capacity_units=int(layout.capacity[p]),
            allocated_units=int(used[p]),
        )
        for p, pool in enumerate(layout.pools)
        if layout.node_count[p]
    ]


def _queues(cluster: EmbeddedCluster) -> list[Queue]:
    tables, ledger = cluster.policy.tables, cluster.ledger
    waiting = [tables.queue_of(w.namespace, w.queue) for w in cluster.pending.values()]
    queues = []
    for q, queue in enumerate(tables.queues):
        ceilings = [int(c) for c in tables.ceiling[q] if c < NO_LIMIT]
        queues.append(
            Queue(
                name=queue.name,
                guaranteed_milli=int(tables.guaranteed[q].sum()) or None,
                ceiling_milli=sum(ceilings) if ceilings else None,
                used_milli=int(ledger.used[q].sum()),
                pending=waiting.count(q),
            )
        )
    return queues


class DemoView:
    """A :class:`~gpupool.api.view.ClusterView` of a running demo session."""

    source = "simulator (gpupool demo)"

    def __init__(self, session: DemoSession) -> None:
        self.session = session

    def _view(self) -> SnapshotView:
        with self.session.locked() as cluster:
            queues = cluster.policy.tables.queues
            info = {
                name: PodInfo(key=name, team=queues[record.queue].name)
                for name, record in cluster.running.items()
            }
            return SnapshotView(
                cluster.snapshot.copy(),
                [(w.pod, cluster.reasons.get(name, "")) for name, w in cluster.pending.items()],
                info=info,
                source=self.source,
                pool_list=_pools(cluster),
                queue_list=_queues(cluster),
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

    def queues(self) -> list[Queue]:
        """The demo's queues with their use."""
        return self._view().queues()

    def detached(self) -> DetachedView:
        """A frozen copy, taken under the session's lock."""
        return self._view().detached()


GOVERNANCE_ACTIONS = ("warn", "reclaim", "preempt")


def _record(event: ClusterEvent) -> Record:
    hours, rest = divmod(int(event.at), 3600)
    clock = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return Record(at=f"t={clock}", kind=event.action, subject=event.pod, detail=event.detail)


class DemoRecords:
    """The demo's decisions as the store would keep them (a :class:`RecordSource`)."""

    def __init__(self, session: DemoSession) -> None:
        self.session = session

    def _events(self) -> list[ClusterEvent]:
        with self.session.locked() as cluster:
            return list(reversed(cluster.events))

    def actions(self, limit: int) -> list[Record]:
        """Warnings, reclaims and preemptions, newest first."""
        chosen = [e for e in self._events() if e.action in GOVERNANCE_ACTIONS]
        return [_record(event) for event in chosen[:limit]]

    def audit(self, limit: int) -> list[Record]:
        """Every decision kept, newest first."""
        return [_record(event) for event in self._events()[:limit]]

    def cost(self) -> list[CostLine]:
        """GPU-hours per team: released shares, plus what running pods have held so far."""
        with self.session.locked() as cluster:
            hours = dict(cluster.gpu_hours)
            queues = cluster.policy.tables.queues
            for record in cluster.running.values():
                held = record.units / MILLI_UNITS * (cluster.now - record.started_at) / 3600
                name = queues[record.queue].name
                hours[name] = hours.get(name, 0.0) + held
        return [
            CostLine(team=team, gpu_hours=round(value, 3)) for team, value in sorted(hours.items())
        ]


@contextmanager
def serve_demo(session: DemoSession, port: int) -> Iterator[str]:
    """Serve the dashboard and API of ``session`` on 127.0.0.1:``port``; yields the URL."""
    face = create_face(DemoView(session), None, DemoRecords(session))
    with serving(face, "127.0.0.1", port) as url:
        yield url
