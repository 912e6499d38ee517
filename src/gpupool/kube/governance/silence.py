"""Nodes whose agent has gone silent: their usage is stale, and people are told once.

A stale usage annotation (:mod:`gpupool.governance.freshness`) means governance neither
reclaims nor clears anything on that node's pods, which is safe but invisible: without a word,
an operator would see idle pods that are never reclaimed and not know why. So the controller
counts silent nodes (the ``gpupool_governance_stale_usage_nodes`` gauge) and writes one Warning
Event on the Node when its agent goes silent, and one Normal Event when it speaks again;
never one per pass.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gpupool.governance.freshness import stale_after
from gpupool.kube.governance.facts import NodeUsage
from gpupool.kube.objects.records import NodeRecord
from gpupool.kube.objects.timestamps import format_time
from gpupool.kube.scheduler.writes import PodReporter

log = logging.getLogger(__name__)

REASON_SILENT = "GPUUsageStale"
REASON_BACK = "GPUUsageFresh"


class AgentSilence:
    """Which nodes' agents are silent now, with one Event per change.

    Args:
        reports: Where the Events go (the scheduler's reporter).
    """

    def __init__(self, reports: PodReporter) -> None:
        self.reports = reports
        self.silent: set[str] = set()

    def update(
        self, nodes: Mapping[str, NodeRecord], published: Mapping[str, NodeUsage], stale: set[str]
    ) -> None:
        """Take this pass's stale nodes; tell what changed since the last pass."""
        now_silent = stale & nodes.keys()
        for name in sorted(now_silent - self.silent):
            usage = published[name]
            note = (
                f"the gpupool agent on {name} last published GPU usage sampled at "
                f"{format_time(usage.sampled_at)}, more than {stale_after(usage.period):.0f} s "
                "ago: its pods count as neither idle nor active, so governance reclaims none of "
                "them until it publishes again. Check the gpupool-agent pod on this node."
            )
            log.warning("%s", note)
            self.reports.node_event(nodes[name], "Warning", REASON_SILENT, note)
        for name in sorted(self.silent - now_silent):
            if name in nodes:
                note = f"the gpupool agent on {name} publishes GPU usage again"
                self.reports.node_event(nodes[name], "Normal", REASON_BACK, note)
        self.silent = now_silent
