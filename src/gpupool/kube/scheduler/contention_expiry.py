"""Contention scores that placement stops honouring once their agent went silent.

``spec.contention.avoidAbove`` keeps new pods off GPUs whose agent-published score is at or
above it. The scores come from a Node annotation the agent republishes every period; an agent
that dies, or a node cut off from the API server, leaves its last scores behind, and a GPU
marked contended would then be avoided for as long as the annotation stays: idle, and refused
to every pod. So a score counts for placement only while its signal is fresh (the rule of
:func:`gpupool.governance.freshness.stale_after`, which the metrics, the API and governance's
usage apply too), and the snapshot is rebuilt when the first fresh signal it honours goes stale,
even if no event arrives then (the scheduler's loop wakes for it).

Split from :mod:`gpupool.kube.scheduler.state` because it is one rule about one signal, not
part of keeping the records and the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gpupool.core.model import NodeSpec
from gpupool.governance.freshness import stale_after
from gpupool.kube.objects.contention_signal import read_contention
from gpupool.kube.objects.records import NodeRecord
from gpupool.kube.objects.timestamps import parse_time


def signal_expiry(node: NodeRecord) -> float | None:
    """When the node's published contention goes stale (None: no signal, or no readable time)."""
    signal = read_contention(node.metadata.annotations, node.key)
    sampled = parse_time(signal.sampled_at) if signal is not None else None
    if signal is None or sampled is None:
        return None
    return sampled + stale_after(signal.period_seconds)


def fresh_contention(spec: NodeSpec, node: NodeRecord, now: float) -> tuple[NodeSpec, float | None]:
    """``spec`` without its contention scores if their signal is stale at ``now``.

    Returns the spec and when its scores go stale (None: it honours none).
    """
    if not spec.gpu_contention:
        return spec, None
    expires = signal_expiry(node)
    if expires is None or expires <= now:  # stale, or scores with no time to judge them by
        return replace(spec, gpu_contention=()), None
    return spec, expires


class ContentionExpiry:
    """When the snapshot's contention scores go stale.

    Part of :class:`~gpupool.kube.scheduler.state.ClusterState`; the attributes are the state's
    own (declared here for the type checker).
    """

    clock: Callable[[], float]
    _contention_until: dict[str, float]
    """Each node whose scores the snapshot honours, to when they go stale."""

    def fresh_specs(self, specs: list[tuple[NodeSpec, NodeRecord]]) -> list[NodeSpec]:
        """The specs of a rebuild with stale scores dropped; remembers when the rest expire."""
        now = self.clock()
        self._contention_until = {}
        kept = []
        for spec, node in specs:
            fresh, expires = fresh_contention(spec, node, now)
            kept.append(fresh)
            if expires is not None:
                self._contention_until[node.key] = expires
        return kept

    def renew_contention(self, node: NodeRecord) -> None:
        """The node's agent republished: the scores the snapshot honours last longer.

        The same scores with a new ``sampledAt`` do not rebuild the node (its signature leaves
        the time out); without this they would expire while their agent still publishes them.
        """
        if node.key in self._contention_until and (expires := signal_expiry(node)) is not None:
            self._contention_until[node.key] = expires

    @property
    def contention_expires(self) -> float | None:
        """When the first score the snapshot honours goes stale (None: it honours none)."""
        return min(self._contention_until.values(), default=None)

    def contention_went_stale(self) -> bool:
        """Whether a score the snapshot honours is stale now (it must be rebuilt)."""
        expires = self.contention_expires
        return expires is not None and self.clock() >= expires

    def wake_within(self, delay: float | None) -> float | None:
        """Seconds until the loop must wake: ``delay`` (None: no deadline), or sooner.

        Sooner when a score the snapshot honours goes stale before then.
        """
        expires = self.contention_expires
        if expires is None:
            return delay
        until = max(0.0, expires - self.clock())
        return until if delay is None else min(delay, until)
