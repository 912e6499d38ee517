"""The kinds of hand-off this node refuses lately, for the scheduler to keep such pods away.

A refusal for a reason of the node's own (:class:`~gpupool.agent.grants.NodeRefusedError`: a GPU
the agent counts as full, the MPS daemon missing) is remembered by request kind and published
on the Node (:mod:`gpupool.kube.objects.handoff_refusals`). Without it the scheduler, which saw
room, placed the next pod of the kind on the same node, to be refused again. An entry goes when
a hand-off of its kind starts here, or after :data:`RETRY_AFTER_SECONDS`: by then the pods that
held the GPU may have ended or the daemon come back, and one pod tries again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpupool.agent.grants import Grant
from gpupool.core.model import RequestKind

RETRY_AFTER_SECONDS = 300.0


def grant_kind(grant: Grant) -> RequestKind | None:
    """A share when any GPU is capped, whole GPUs when all are exclusive; MIG slices: None."""
    if any(gpu.uuid.startswith("MIG-") for gpu in grant.gpus):
        return None
    if any(not gpu.exclusive for gpu in grant.gpus):
        return RequestKind.SHARE
    return RequestKind.WHOLE if grant.gpus else None


class NodeRefusals:
    """Refused kinds with why and when, kept until a start of the kind or the retry time.

    Args:
        clock: Seconds, any epoch (tests drive it).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._entries: dict[RequestKind, tuple[str, float]] = {}

    def refused(self, grant: Grant, why: str) -> None:
        """Remember that ``grant``'s kind was refused for a reason of the node's."""
        kind = grant_kind(grant)
        if kind is not None:
            self._entries[kind] = (why, self._clock())

    def started(self, grant: Grant) -> None:
        """A hand-off of ``grant``'s kind went through: the node takes that kind again."""
        kind = grant_kind(grant)
        if kind is not None:
            self._entries.pop(kind, None)

    def current(self) -> dict[RequestKind, str]:
        """The kinds refused within the retry time, and why."""
        now = self._clock()
        self._entries = {
            kind: entry
            for kind, entry in self._entries.items()
            if now - entry[1] < RETRY_AFTER_SECONDS
        }
        return {kind: why for kind, (why, _) in self._entries.items()}
