"""Backfill as EASY does it: a reservation for the first blocked pod, and only harmless jumps.

When the first pod of a pool (in serving order) cannot start, it gets a **reservation**: the
earliest time and node at which it would fit if running pods ended when expected (declared or
learned runtimes, :mod:`.runtime`; a pod past its expected end is assumed to end now). A later
pod may then start only where it cannot delay that reservation: on another node, or on the
reserved node if it is expected to end before the reserved start. Without backfill, nothing
behind a blocked pod of the pool starts (strict order); with unrestricted skipping, large pods
could wait forever behind a stream of small ones. This is the middle: small pods use idle
shares, large pods keep their place.

The sweep releases running pods on the snapshot in order of expected end and restores them, so
the snapshot is left as it was (only generation counters move).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.core.filtering import fits_on_node
from gpupool.core.model import PodSpec
from gpupool.core.snapshot import Allocation, BoolArray, ClusterSnapshot


@dataclass(frozen=True, slots=True)
class Reservation:
    """Where and when the first blocked pod of a pool is expected to start.

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
        node_mask: Nodes it may use.
        expected_ends: (expected end in seconds, pod name) of running pods.
        now: Seconds.

    Returns:
        The reservation, or ``None`` when it would not fit even on an emptied pool.
    """
    released: list[Allocation] = []
    try:
        for end, name in sorted((max(end, now), name) for end, name in expected_ends):
            allocation = snapshot.allocations.get(name)
            if allocation is None or not node_mask[allocation.node]:
                continue
            released.append(snapshot.release(name))
            if fits_on_node(snapshot, pod, allocation.node):
                return Reservation(pod=pod.name, node=allocation.node, start_at=end)
        return None
    finally:
        for allocation in reversed(released):
            snapshot.bind(allocation.pod, allocation.node, allocation.gpus)


def may_backfill(reservation: Reservation, node: int, now: float, runtime: float) -> bool:
    """Whether starting a pod of expected ``runtime`` on ``node`` leaves the reservation intact."""
    return node != reservation.node or now + runtime <= reservation.start_at
