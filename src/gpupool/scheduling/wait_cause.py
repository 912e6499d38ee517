"""Why a pod waits, as data: a kind and the pods, pools, node and time it names.

Other modules act on a wait: the live applier tries a pod held only behind others again in the
next cycle, ``/metrics`` and the dashboard count pending pods by kind, and the live cluster
writes the reason with pods by ``namespace/name`` and times in UTC where the engine names them
by UID and cycle clock. They read these fields; none parses the sentence back.
:meth:`WaitCause.text` is the one writer of that sentence, kube-scheduler's words where the
placement refused the pod ("0/40 nodes are available: 12 Insufficient cpu, ...").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from gpupool.core.decisions import Reject

WAITING_BEHIND = "waiting behind "
"""How every ordering wait's sentence begins."""


class WaitKind(StrEnum):
    """What holds a pod: the values are the bounded label ``/metrics`` and the dashboard use."""

    BEHIND = "waiting_behind"
    """Only other pods of this cycle (a blocked pool in strict order, or the backfill depth):
    it had no verdict of its own and is tried again in the next cycle."""
    RESERVATION = "reservation"
    """It would delay a backfill reservation held for a larger pod."""
    QUOTA = "quota"
    """A queue's ceiling, ``maxConcurrentPods`` or its borrowing rule."""
    POOL = "pool"
    """No pool admits it, or its pool has no nodes."""
    RESOURCES = "insufficient_resources"
    """Some node passes its constraints but none has enough free GPU, CPU, memory or more."""
    NODE_CONSTRAINTS = "node_constraints"
    """No node passes its selector, affinity, taints, volumes or readiness."""
    NEVER_FITS = "never_fits"
    """No node of its pools could ever hold it, even empty: it waits for the nodes to change."""
    GANG = "gang"
    """Its gang cannot start whole (too few of its pods fit at once), or its PodGroup is unknown."""
    PREEMPTING = "preempting"
    """It waits for the pods it preempts to go."""
    INVALID = "invalid_request"
    """Its request cannot be read."""
    OTHER = "other"
    """Anything else: a failed Binding, a scheduling error, evicted in the simulator."""


NOT_TRIED = "not_tried"
"""The category of a pending pod the scheduler has not decided for yet (it has no cause)."""

PENDING_CATEGORIES = (NOT_TRIED, *(kind.value for kind in WaitKind))
"""Every category a pending pod is counted in: a bounded label set, the same on every scrape."""


def category(kind: WaitKind | None) -> str:
    """The category a pending pod held by ``kind`` is counted in (``None``: not tried yet)."""
    return NOT_TRIED if kind is None else kind.value


def _same(name: str) -> str:
    return name


def cycle_time(at: float) -> str:
    """A time in the cycle's clock as the engine writes it (``t=1200s``)."""
    return f"t={at:.0f}s"


@dataclass(frozen=True, slots=True)
class WaitCause:
    """Why a pod waits.

    Attributes:
        kind: What holds it.
        detail: The rule's own words, naming no pod: the quota or pool refusal, the placement's
            kube-scheduler sentence, or why an ordering wait holds (``"strict order"``).
        pods: The pods it names by workload name: those it waits behind (one per entry of
            ``pools``), the holder of the reservation it would delay, or the pod whose
            rejection it shares (one no larger that failed in the pool this cycle).
        pools: The pools of the pods it waits behind.
        node: The node of the reservation it would delay, or the node it is nominated to.
        at: When that reservation starts, in the cycle's clock.
        reject: The placement's rejection (per-reason node counts) when it waits for capacity.
    """

    kind: WaitKind
    detail: str = ""
    pods: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    node: str = ""
    at: float = 0.0
    reject: Reject | None = None

    def text(
        self, name: Callable[[str], str] = _same, instant: Callable[[float], str] = cycle_time
    ) -> str:
        """The sentence a user reads: each pod as ``name`` gives it, times as ``instant`` does."""
        if self.kind is WaitKind.BEHIND:
            named = ", ".join(
                f"{name(p)} in pool {q}" for p, q in zip(self.pods, self.pools, strict=True)
            )
            return f"{WAITING_BEHIND}{named}" + (f" ({self.detail})" if self.detail else "")
        if self.kind is WaitKind.RESERVATION:
            return (
                f"backfill: would delay {name(self.pods[0])}, reserved on node {self.node} "
                f"from {instant(self.at)}"
            )
        if self.kind is WaitKind.PREEMPTING and self.node:
            return f"nominated to node {self.node}: waiting for preempted pods to terminate"
        if self.pods:
            return (
                f"{self.detail.rstrip('.')} (found for {name(self.pods[0])}, which asks no more)."
            )
        return self.detail


def waiting_behind(*heads: tuple[str, str], why: str = "") -> WaitCause:
    """An ordering wait behind each (pod, pool) of ``heads``, held for ``why``."""
    return WaitCause(
        WaitKind.BEHIND,
        detail=why,
        pods=tuple(pod for pod, _ in heads),
        pools=tuple(pool for _, pool in heads),
    )


def rejected(reject: Reject, *, never: bool = False, like: str = "") -> WaitCause:
    """A wait for capacity or for a node that passes the pod's constraints.

    Args:
        reject: The placement's rejection.
        never: No node of its pools could ever hold the pod.
        like: The pod, no larger, whose rejection this is (it failed in the pool this cycle).
    """
    if never:
        kind = WaitKind.NEVER_FITS
    elif any(reason.startswith("Insufficient ") for reason, _ in reject.reasons):
        kind = WaitKind.RESOURCES
    else:
        kind = WaitKind.NODE_CONSTRAINTS
    return WaitCause(kind, reject.message, pods=(like,) if like else (), reject=reject)
