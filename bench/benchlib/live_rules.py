"""Pod rules in ``bench live``: a share of the pods with anti-affinity or topology spread.

``--pod-rules 0.2`` gives every fifth pod one rule, alternately a required pod anti-affinity
and a ``DoNotSchedule`` topology spread (``maxSkew: 1``), both on ``kubernetes.io/hostname``
and against the other pods of its group (label ``bench-rule``). A group has at most as many
pods as the phase has nodes, so every pod can be bound by either scheduler, and each rule
holds exactly when no node carries two pods of one group (:func:`check_rule_groups`: a spread
with one pod per node at most has skew 1 at most). Both schedulers get the same pods; what the
rules cost is the phase's rate against the same run without them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from gpupool.kube.client.api import JsonObject

RULE_LABEL = "bench-rule"
GROUP_SIZE = 100
"""Pods per group and rule (fewer where the phase has fewer nodes)."""
HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pod_rule(index: int, share: float, nodes: int) -> str:
    """The rule group of pod ``index`` ("" for none): ``anti-<n>`` or ``spread-<n>``.

    Every ``round(1 / share)``-th pod has a rule, alternating the two kinds; consecutive ruled
    pods of a kind fill a group of ``min(GROUP_SIZE, nodes)``.
    """
    if share <= 0:
        return ""
    every = max(1, round(1 / share))
    if index % every:
        return ""
    ruled = index // every
    kind = "anti" if ruled % 2 == 0 else "spread"
    return f"{kind}-{(ruled // 2) // min(GROUP_SIZE, nodes)}"


def with_rule(pod: JsonObject, rule: str) -> JsonObject:
    """``pod`` labelled with its group and carrying its rule (unchanged for "")."""
    if not rule:
        return pod
    group = {"matchLabels": {RULE_LABEL: rule}}
    spec = dict(pod["spec"])
    if rule.startswith("anti-"):
        required = {REQUIRED: [{"labelSelector": group, "topologyKey": HOSTNAME}]}
        spec["affinity"] = {"podAntiAffinity": required}
    else:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": HOSTNAME,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": group,
            }
        ]
    labels = {**pod["metadata"]["labels"], RULE_LABEL: rule}
    return {**pod, "metadata": {**pod["metadata"], "labels": labels}, "spec": spec}


def check_rule_groups(pods: Sequence[JsonObject]) -> dict[str, Any]:
    """Ruled pods, and nodes that hold two pods of one group (a broken rule)."""
    together = Counter(
        (pod["metadata"]["labels"][RULE_LABEL], pod["spec"]["nodeName"])
        for pod in pods
        if RULE_LABEL in pod["metadata"].get("labels", {}) and pod["spec"].get("nodeName")
    )
    broken = sum(1 for count in together.values() if count > 1)
    return {"ruled_pods": sum(together.values()), "broken_rules": broken, "ok": not broken}
