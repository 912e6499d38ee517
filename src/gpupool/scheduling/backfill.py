"""Backfill behind reservations: the first ``k`` blocked pods of a pool are protected.

When a pod of a pool (in serving order) cannot start and fewer than ``k`` pods of the pool hold
one, it gets a **reservation**: the earliest time and node at which it would fit if running pods
ended when expected (declared or learned runtimes, :mod:`.runtime`; a pod past its expected end is
assumed to end now, or, with the engine's ``remaining_by_age``, to run for what pods of its kind
that lived as long ran on). A later pod may then start only where it cannot delay any of the pool's
reservations: on a node none of them holds, or on a reserved node if it is expected to end before
that reserved start; a pod that takes no GPU also where the holder would still fit at its
start beside it (:func:`leaves_room`: CPU, memory and a pod slot are all it could take).
``k = 1`` is EASY backfill. Without backfill, nothing behind a blocked pod of the pool starts
(strict order); with unrestricted skipping, large pods could wait forever behind a stream of
small ones. With one reservation, only the first blocked pod keeps its place: the large
pods queued behind it are overtaken by a stream of smaller ones whenever the head's node is not
theirs (measured: docs/benchmarks.md, the dynamic simulation). The engine's default therefore
protects up to 16 pods above one GPU per pool, with reservations that follow their pods, ends
expected by age and p90 runtimes for backfill (:class:`~.decisions.EngineOptions`; chosen by
measurement, docs/benchmarks.md section 7, round three). Each reservation is found on the
cluster as it is, not after the earlier reservations start: a later one is looked for away from
the nodes the pool's earlier ones hold (else the pods queued behind the head, often of the
head's shape, would all reserve the head's node and protect nothing more). That is coarser than
conservative backfill's profile of every future start, and costs one sweep per reservation.

The sweep releases running pods on the snapshot in order of expected end and restores them, so
the snapshot is left as it was (only generation counters move).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from gpupool.core.filtering import NodeCheck, admissible, fits_on_node, mask_of
from gpupool.core.model import PodSpec
from gpupool.core.resources import asks_at_least
from gpupool.core.snapshot import Allocation, BoolArray, ClusterSnapshot
from gpupool.policy.workload import Workload

if TYPE_CHECKING:
    from gpupool.scheduling.decisions import CycleRequest


@dataclass(frozen=True, slots=True)
class Reservation:
    """Where and when a protected blocked pod of a pool is expected to start.

    Attributes:
        pod: Name of the pod holding the reservation.
        node: Node row reserved.
        start_at: Expected start, seconds.
    """

    pod: str
    node: int
    start_at: float


def reserve(
    snapshot: ClusterSnapshot,
    pod: PodSpec,
    node_mask: BoolArray,
    expected_ends: Iterable[tuple[float, str]],
    now: float,
) -> Reservation | None:
    """The earliest (node, time) at which ``pod`` fits as running pods end.

    Args:
        snapshot: The cluster; restored before returning.
        pod: The blocked pod.
        node_mask: Nodes the caller's rules allow (its pool); the pod's own constraints
            (:func:`~gpupool.core.filtering.admissible`) are applied here.
        expected_ends: (expected end in seconds, pod name) of running pods.
        now: Seconds.

    Returns:
        The reservation, or ``None`` when it would not fit even on an emptied pool.
    """
    released: list[Allocation] = []
    usable = node_mask & admissible(snapshot, pod)
    try:
        for end, name in sorted((max(end, now), name) for end, name in expected_ends):
            allocation = snapshot.allocations.get(name)
            if allocation is None or not usable[allocation.node]:
                continue
            released.append(snapshot.release(name))
            if fits_on_node(snapshot, pod, allocation.node):
                return Reservation(pod=pod.name, node=allocation.node, start_at=end)
        return None
    finally:
        for allocation in reversed(released):
            snapshot.bind(allocation.pod, allocation.node, allocation.gpus, running=True)


@dataclass(frozen=True, slots=True)
class Blocked:
    """A pod that could not start in a pool this cycle, and its queue index.

    ``protected``: whether it may hold a reservation (a pod too small to need one can still be
    the pool's head, which the order's waits name).
    """

    workload: Workload
    queue: int
    protected: bool = True


def delayed_nodes(reservations: Iterable[Reservation], now: float, runtime: float) -> set[int]:
    """Reserved nodes where a pod of expected ``runtime`` started ``now`` would delay the start."""
    return {r.node for r in reservations if now + runtime > r.start_at}


def leaves_room(
    snapshot: ClusterSnapshot,
    holder: PodSpec,
    candidate: PodSpec,
    reservation: Reservation,
    ends: Mapping[str, float],
) -> bool:
    """Whether ``holder`` still fits on its reserved node at its start with ``candidate`` there.

    The pods expected to end by the reserved start are released, ``candidate`` is placed, and
    the holder's fit is asked; the snapshot is restored. A pod asking only CPU and memory was
    kept off every reserved node whatever room it left: on four nodes reserved for GPU pods, a
    pod asking ``cpu: 2`` waited beside 60 idle cores for as long as the reservations held.
    """
    node = reservation.node
    if not fits_on_node(snapshot, candidate, node):
        return False
    snapshot.bind(candidate, node, running=True)
    released: list[Allocation] = []
    try:
        for name in list(snapshot.pods_on_node[node]):
            if ends.get(name, math.inf) <= reservation.start_at:
                released.append(snapshot.release(name))
        return fits_on_node(snapshot, holder, node)
    finally:
        for allocation in reversed(released):
            snapshot.bind(allocation.pod, allocation.node, allocation.gpus, running=True)
        snapshot.release(candidate.name)


class Reservations:
    """The reservations of one engine cycle: up to ``per_pool`` per pool with blocked pods.

    A reservation from the previous cycle stays with its pod while that pod is pending and the
    reserved start lies ahead (completions only move it earlier and backfill never moves it
    later). Once that start has passed with the pod still waiting (a pod ran past its expected
    end, or room went to pods ahead of it in serving order), the reservation is dropped, or,
    with ``follow``, found again for the same pod before any new one, on the same node if the
    pod still fits there once it drains: a pod that once held a reservation keeps one until it
    starts, so protection goes to the pods that have waited longest rather than to whichever is
    first in this cycle's fair-share order. Staying on the node matters as much: a reservation
    found afresh goes to whichever node now looks earliest, and estimates move with every
    overrun, so a large pod hopped between nodes (measured: 10-23 hops per 8-GPU pod at
    offered load 1.2) and each node it left filled up again with the pods the reservation had
    kept off it. Then the pool's blocked pods without one get one, in serving order, once per
    cycle, until the pool holds ``per_pool``. One sweep of the running pods per reservation,
    not per backfill candidate. With ``follow``, a pool no pod was tried behind this cycle gets
    that sweep at the cycle's end (``hold_for``; without, reservations are found afresh next
    cycle, as EASY does).

    Args:
        request: The cycle's request (snapshot, running pods and their expected ends, ``now``,
            the previous reservations).
        pending: The cycle's pending pods by name, with their queues.
        per_pool: Reservations a pool holds at most (1: EASY backfill).
        expected_ends: (expected end, pod name) of the running pods, asked once, when the
            first reservation is looked for.
        follow: Whether a reservation whose start has passed is found again for its pod.
    """

    def __init__(
        self,
        request: CycleRequest,
        pending: Mapping[str, Blocked],
        per_pool: int,
        expected_ends: Callable[[], list[tuple[float, str]]],
        follow: bool = False,
    ) -> None:
        self.request = request
        self.pending = pending
        self.per_pool = per_pool
        self._expected_ends = expected_ends
        self.follow = follow
        self._made: dict[int, list[Reservation]] = {}
        self._renew: dict[int, list[Reservation]] = {}
        self._tried: set[str] = set()
        self._ends: list[tuple[float, str]] | None = None
        self.holders = (
            {r.pod for held in request.reservations.values() for r in held} if follow else set()
        )
        """With ``follow``, the pods that held a reservation in the previous cycle: always
        tried, even past the depth bound or behind a failed pod of their shape, else a holder
        would never take the node its binding reservation drained (a failed pod of its shape
        may have been kept off exactly that node). Not for EASY, where a reservation binds
        only the pods behind the head: measured at load 1.2 (seed 1) it changed nothing at
        p95 and raised the large pods' p50 from 2,919 s to 3,454 s."""

    def of(
        self,
        pool: int,
        blocked: Sequence[Blocked],
        checks_of: Callable[[Blocked], tuple[NodeCheck, ...]],
    ) -> list[Reservation]:
        """The reservations of ``pool`` with ``blocked`` its blocked pods in serving order.

        ``checks_of`` gives the nodes a blocked pod may use (asked only for pods that need a
        new reservation).
        """
        made = self._made.get(pool)
        if made is None:
            made = self._carried(pool)
        renew = self._renew[pool]
        heads: list[tuple[Blocked, int | None]] = [(self.pending[r.pod], r.node) for r in renew]
        heads += [(head, None) for head in blocked if head.protected]
        renew.clear()
        for head, node in heads:
            if len(made) >= self.per_pool:
                break
            if head.workload.name in self._tried:
                continue
            self._tried.add(head.workload.name)
            found = self._find(head, node, made, checks_of)
            if found is not None:
                made.append(found)
        return made

    def hold_for(
        self,
        blocked: Mapping[int, Sequence[Blocked]],
        checks_of: Callable[[int, Blocked], tuple[NodeCheck, ...]],
    ) -> None:
        """With ``follow``, the sweep of each pool no pod was tried behind this cycle.

        The live scheduler parks a pod nothing fits and tries it later on its own, so a
        reservation made only when another pod shared its cycle was never made, and a small
        long pod arriving alone took the room the large ones waited for (seen with the control
        plane on the dev cluster). Once per cycle, as in :meth:`of`: sweeping again here, for
        the pods blocked after the pool's sweep, raised the large pods' p95 delay at offered
        load 1.2 from 6,764 to 8,184 s (seeds 1 and 2 of ``bench/sim_dynamic_matrix.py``; once
        per cycle: 6,985 s).
        """
        if not self.follow:
            return
        for pool, heads in blocked.items():
            if pool not in self._made:  # swept when a pod was tried behind its blocked pods
                self.of(pool, heads, partial(checks_of, pool))

    def awaiting(self, blocked: Mapping[int, Sequence[Blocked]]) -> frozenset[str]:
        """With ``follow``, the blocked pods that may hold a reservation and hold none now.

        The live scheduler tries them in every cycle, as it does the holders: a pod blocked
        after its pool's sweep gets its reservation only in a later cycle's sweep, and parked it
        was in none, so a pod arriving alone took the node it would have been given.
        """
        if not self.follow:
            return frozenset()
        holding = {r.pod for made in self.kept().values() for r in made}
        return frozenset(
            head.workload.name
            for heads in blocked.values()
            for head in heads
            if head.protected and head.workload.name not in holding
        )

    def spared(self, reservations: Iterable[Reservation], pod: PodSpec) -> set[int]:
        """The nodes of ``reservations`` whose every holder still fits at its start beside ``pod``.

        For a pod that takes no GPU (the engine asks only for those): GPU pods keep the node-wide
        rule the backfill matrix measured.
        """
        if self._ends is None:
            self._ends = self._expected_ends()
        ends = {name: max(end, self.request.now) for end, name in self._ends}
        spared: dict[int, bool] = {}
        for reservation in reservations:
            holder = self.pending[reservation.pod].workload.pod
            ok = spared.get(reservation.node, True)
            spared[reservation.node] = ok and leaves_room(
                self.request.snapshot, holder, pod, reservation, ends
            )
        return {node for node, ok in spared.items() if ok}

    def _find(
        self,
        head: Blocked,
        node: int | None,
        made: Sequence[Reservation],
        checks_of: Callable[[Blocked], tuple[NodeCheck, ...]],
    ) -> Reservation | None:
        """A reservation for ``head``: on ``node`` if given and it fits there, else anywhere."""
        request = self.request
        if self._ends is None:
            self._ends = self._expected_ends()
        mask = mask_of(request.snapshot.size, checks_of(head))
        mask[[r.node for r in made]] = False
        if node is not None and mask[node]:
            own = np.zeros_like(mask)
            own[node] = True
            found = reserve(request.snapshot, head.workload.pod, own, self._ends, request.now)
            if found is not None:
                return found
        return reserve(request.snapshot, head.workload.pod, mask, self._ends, request.now)

    def _carried(self, pool: int) -> list[Reservation]:
        """The previous cycle's reservations of ``pool`` still ahead; those to find again."""
        request = self.request
        made: list[Reservation] = []
        renew: list[Reservation] = []
        for reservation in request.reservations.get(pool, ()):
            if reservation.pod not in self.pending:
                continue
            if reservation.start_at > request.now:
                made.append(reservation)
            elif self.follow:
                renew.append(reservation)
        made = made[: self.per_pool]
        self._made[pool] = made
        self._renew[pool] = renew[: self.per_pool - len(made)]
        self._tried.update(r.pod for r in made)
        return made

    def binding(self, pool: int) -> bool:
        """Whether ``pool``'s reservations hold back every pod this cycle, not only those behind.

        With ``follow``, once the pool holds any, even the pods served before its first
        blocked pod this cycle may not delay them. Without that, a followed reservation
        protected nothing whenever its holder was not first in this cycle's fair-share order:
        the pods of the queue served first took the node as it drained.
        """
        return self.follow and bool(self.request.reservations.get(pool))

    def kept(self) -> dict[int, tuple[Reservation, ...]]:
        """The reservations to pass to the next cycle (those still to find again included)."""
        if self.follow:  # a pool nobody was tried behind keeps its pods' reservations
            for pool in self.request.reservations:
                if pool not in self._made:
                    self._carried(pool)
        kept = {pool: (*made, *self._renew[pool]) for pool, made in self._made.items()}
        return {pool: reservations for pool, reservations in kept.items() if reservations}


def no_smaller(failed: PodSpec, pod: PodSpec) -> bool:
    """Whether ``pod`` asks for at least everything ``failed`` asked for, in the same shape.

    The same shape includes the same node constraints: a pod that may use other nodes than
    the one that failed can fit where it could not.
    """
    return (
        pod.kind is failed.kind
        and pod.gpu_models == failed.gpu_models
        and pod.mig_profile == failed.mig_profile
        and pod.constraints == failed.constraints
        and pod.gpu_count >= failed.gpu_count
        and pod.gpu_milli >= failed.gpu_milli
        and pod.gpu_memory_mib >= failed.gpu_memory_mib
        and pod.cpu_milli >= failed.cpu_milli
        and pod.memory_mib >= failed.memory_mib
        and asks_at_least(pod, failed)
    )
