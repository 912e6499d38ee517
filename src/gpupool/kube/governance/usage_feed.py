"""The agents' usage samples as governance reads them: per pod, from the pod's own node only.

Split from the controller because it is the one place that believes a node about a pod's
usage: a sample counts only when the node that published it is the node the pod runs on (one
agent's token must not have another node's pods reclaimed or shielded), it is folded into the
pod's quiet-phase history under its pool's activity settings, and a node whose samples went
stale is told once (:class:`~gpupool.kube.governance.silence.AgentSilence`).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.core.model import PodSpec
from gpupool.governance.freshness import DEFAULT_PUBLICATION_PERIOD, is_stale
from gpupool.governance.usage import UsageHistory, UsagePoint
from gpupool.kube.governance.facts import GovernanceSettings, node_usage, stored_sample
from gpupool.kube.governance.silence import AgentSilence
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec
from gpupool.policy.units import compute_fraction
from gpupool.store.records import UsageSample


class UsageFeed:
    """Each pod's usage history, last activity and its agent's publication period."""

    def __init__(self, silence: AgentSilence) -> None:
        self.silence = silence
        self._usage: dict[str, UsageHistory] = {}
        self._last_active: dict[str, float | None] = {}
        self._period: dict[str, float] = {}
        self._fractions: dict[str, float] = {}

    def fraction(self, pod: PodRecord, claim_gpus: PodSpec | None = None) -> float:
        """The compute part of a GPU the pod holds (its GPU request cannot change: cached).

        NVML's SM figures are parts of the whole GPU; a pod whose request cannot be read is
        held to the whole GPU's threshold, the strictest. A claim pod's GPUs are its claim's
        (``claim_gpus``, :func:`~gpupool.kube.scheduler.dra.claims.claim_gpus_by_pod`), not cached:
        until its claim is seen, it is held to the whole GPU's threshold.
        """
        if claim_gpus is not None:
            return compute_fraction(claim_gpus)
        uid = pod.metadata.uid
        known = self._fractions.get(uid)
        if known is None:
            try:
                known = compute_fraction(pod_spec(pod))
            except InvalidObjectError:
                known = 1.0
            self._fractions[uid] = known
        return known

    def history(self, uid: str) -> UsageHistory:
        """The pod's usage so far (empty when its agent never spoke of it)."""
        return self._usage.get(uid, UsageHistory())

    def last_active(self, uid: str) -> float | None:
        """The agent's last time the pod used the GPU (None: unknown)."""
        return self._last_active.get(uid)

    def period(self, uid: str) -> float:
        """How often the agent of the pod's node publishes (the default until it says)."""
        return self._period.get(uid, DEFAULT_PUBLICATION_PERIOD)

    def observe(
        self,
        nodes: Mapping[str, NodeRecord],
        pods: Mapping[str, PodRecord],
        settings: GovernanceSettings,
        now: float,
        claim_gpus: Mapping[str, PodSpec] | None = None,
    ) -> list[UsageSample]:
        """Take in the agents' new samples; those to store (one per pod and sampling time).

        ``claim_gpus``: per claim pod, its claim's GPUs (they scale the pod's idle threshold).
        """
        claim_gpus = claim_gpus or {}
        fresh: list[UsageSample] = []
        nodes = dict(nodes)
        published = {name: found for name, node in nodes.items() if (found := node_usage(node))}
        for name, found in published.items():
            pool = settings.pool_of(nodes[name])
            for uid, usage in found.pods.items():
                pod = pods.get(uid)
                if pod is None or pod.spec.node_name != name:
                    continue  # only a pod's own node speaks for it
                point = UsagePoint(
                    usage.sampled_at, usage.sm_percent, usage.memory_mib, usage.memory_busy_percent
                )
                fraction = self.fraction(pod, claim_gpus.get(uid))
                activity = settings.limits_for(pool, pod).activity_for(fraction)
                history = self.history(uid)
                if history.last is None or history.last.time < usage.sampled_at:
                    fresh.extend(stored_sample(uid, usage))
                self._usage[uid] = history.observe(point, activity)
                self._last_active[uid] = usage.last_active
                self._period[uid] = found.period
        stale = {n for n, u in published.items() if is_stale(u.sampled_at, u.period, now)}
        self.silence.update(nodes, published, stale)
        for per_pod in (self._usage, self._last_active, self._period, self._fractions):
            for uid in [uid for uid in per_pod if uid not in pods]:
                del per_pod[uid]
        return fresh
