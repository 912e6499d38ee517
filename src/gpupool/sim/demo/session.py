"""One ``gpupool demo`` session: the bundled workload on the embedded cluster, and its summary.

A session owns an :class:`~gpupool.sim.demo.embedded.EmbeddedCluster` with the demo's pools and
queues and feeds it the bundled arrivals (:mod:`gpupool.sim.demo.workload`). The caller moves
simulated time forward (the CLI at a chosen speed, tests in exact steps); readers (the terminal
summary, the dashboard) take :meth:`DemoSession.locked` to see a consistent state while another
thread steps it. A session starts *warm*: the first simulated hours run at once, so the first
screen already shows a busy cluster with queues at their limits.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources

from gpupool.governance.rules import Limits
from gpupool.policy.units import MILLI_UNITS
from gpupool.scheduling.wait_cause import WaitCause
from gpupool.sim.demo.embedded import ClusterEvent, EmbeddedCluster
from gpupool.sim.demo.workload import DemoArrivals, demo_nodes
from gpupool.sim.policy_file import parse_policy_text

SHARED_POOL_GOVERNANCE = Limits(
    idle_threshold_percent=5.0,
    idle_period=20 * 60.0,
    grace=5 * 60.0,
    exempt_classes=frozenset({"inference"}),
)
"""The demo's idle rule, in the shared pool: under 5 % SM for 20 minutes, warned, reclaimed 5
minutes later if still idle; inference (serving) is exempt."""
STEP_SECONDS = 30.0
DAY = 86400.0
"""Simulated seconds per scheduling step (the live scheduler's cycles are event-driven; the
demo's coarser steps keep a simulated day cheap)."""
WARM_HOURS = 3.0


def demo_config_text() -> str:
    """The bundled pools and queues (``configs/demo.yaml``)."""
    return (resources.files("gpupool.sim") / "configs" / "demo.yaml").read_text()


@dataclass(frozen=True, slots=True)
class QueueUse:
    """One queue in one pool: what it holds against its guarantee and ceiling (GPU units)."""

    queue: str
    pool: str
    used: float
    guaranteed: float
    ceiling: float | None


@dataclass(frozen=True, slots=True)
class Summary:
    """What the demo shows in the terminal."""

    now: float
    capacity_units: float
    allocated_units: float
    running: int
    pending: int
    completed: int
    preemptions: int
    reclaims: int
    reasons: tuple[tuple[str, int], ...]
    queues: tuple[QueueUse, ...]
    recent: tuple[ClusterEvent, ...]


class DemoSession:
    """The demo's cluster and workload.

    Args:
        seed: Seed of the workload and the placement's ties.
        warm_hours: Simulated hours run at once when the session starts.
        epoch: The date of the simulated clock's 0, seconds since 1970 (default: midnight UTC
            of the day the session starts), for the dates the dashboard's chart shows.
    """

    def __init__(
        self, seed: int = 0, warm_hours: float = WARM_HOURS, epoch: float | None = None
    ) -> None:
        self.epoch = epoch if epoch is not None else time.time() // DAY * DAY
        config = parse_policy_text(demo_config_text(), "demo.yaml")
        self.cluster = EmbeddedCluster(
            demo_nodes(), config, seed=seed, limits={"a100-shared": SHARED_POOL_GOVERNANCE}
        )
        self.arrivals = DemoArrivals(seed)
        self._lock = threading.Lock()
        self._carry = 0.0
        self.advance(warm_hours * 3600.0)

    @contextmanager
    def locked(self) -> Iterator[EmbeddedCluster]:
        """The cluster, held still while the caller reads it."""
        with self._lock:
            yield self.cluster

    def calendar(self, at: float) -> str:
        """The simulated instant ``at`` as an RFC 3339 date (UTC)."""
        stamp = dt.datetime.fromtimestamp(self.epoch + at, tz=dt.UTC)
        return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of simulated time pass, in scheduling steps."""
        with self._lock:
            self._carry += seconds
            while self._carry >= STEP_SECONDS:
                self._carry -= STEP_SECONDS
                cluster = self.cluster
                for submission in self.arrivals.arrivals(cluster.now, STEP_SECONDS):
                    cluster.submit(submission)
                cluster.advance(STEP_SECONDS)

    def summary(self, recent: int = 5) -> Summary:
        """A consistent picture of the cluster now."""
        with self._lock:
            cluster = self.cluster
            tables, layout = cluster.policy.tables, cluster.policy.layout
            uses = []
            for q, queue in enumerate(tables.queues):
                for p, pool in enumerate(layout.pools):
                    used = int(cluster.ledger.used[q, p])
                    quota = queue.quota(pool.name)
                    if not (used or quota):
                        continue
                    ceiling = quota.ceiling if quota is not None else None
                    uses.append(
                        QueueUse(
                            queue=queue.name,
                            pool=pool.name,
                            used=used / MILLI_UNITS,
                            guaranteed=int(tables.guaranteed[q, p]) / MILLI_UNITS,
                            ceiling=ceiling / MILLI_UNITS if ceiling is not None else None,
                        )
                    )
            reasons = Counter(_short(cause) for cause in cluster.causes.values())
            return Summary(
                now=cluster.now,
                capacity_units=int(layout.capacity.sum()) / MILLI_UNITS,
                allocated_units=int(cluster.ledger.used.sum()) / MILLI_UNITS,
                running=len(cluster.running),
                pending=len(cluster.pending),
                completed=cluster.completed,
                preemptions=cluster.preemptions,
                reclaims=cluster.reclaims,
                reasons=tuple(reasons.most_common(4)),
                queues=tuple(uses),
                recent=tuple(list(cluster.events)[-recent:]),
            )


def _short(cause: WaitCause | None) -> str:
    """How a pending reason is counted in the summary."""
    return cause.text() if cause is not None else "not tried yet"
