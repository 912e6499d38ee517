"""``bench live --pod-rules``: which pods carry a rule, and how a broken rule is found."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from benchlib.live_config import LiveConfig
from benchlib.live_rules import RULE_LABEL, check_rule_groups, pod_rule, with_rule
from benchlib.live_setup import pod_manifest


def test_a_fifth_of_the_pods_alternate_the_two_rules_in_groups_no_larger_than_the_nodes() -> None:
    rules = [pod_rule(i, 0.2, nodes=30) for i in range(1000)]
    ruled = [r for r in rules if r]
    assert len(ruled) == 200
    assert all(rules[i] for i in range(0, 1000, 5))
    kinds = Counter(r.split("-")[0] for r in ruled)
    assert kinds == {"anti": 100, "spread": 100}
    assert max(Counter(ruled).values()) == 30  # a group fits one pod per node
    assert not any(pod_rule(i, 0.0, nodes=30) for i in range(100))


def test_the_rule_is_on_the_pod_and_a_node_holding_two_of_a_group_breaks_it() -> None:
    anti = with_rule(pod_manifest("a", "gpupool", {"bench": "x"}), "anti-0")
    spread = with_rule(pod_manifest("s", "kube-scheduler", {"bench": "x"}), "spread-0")
    assert anti["metadata"]["labels"] == {"app": "bench", RULE_LABEL: "anti-0"}
    (term,) = anti["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["labelSelector"] == {"matchLabels": {RULE_LABEL: "anti-0"}}
    (constraint,) = spread["spec"]["topologySpreadConstraints"]
    assert (constraint["maxSkew"], constraint["whenUnsatisfiable"]) == (1, "DoNotSchedule")
    assert with_rule(pod_manifest("p", "gpupool", None), "") == pod_manifest("p", "gpupool", None)

    def bound(name: str, node: str) -> dict[str, Any]:
        pod = with_rule(pod_manifest(name, "gpupool", None), "anti-0")
        return {**pod, "spec": {**pod["spec"], "nodeName": node}}

    apart = [bound("a", "n1"), bound("b", "n2")]
    assert check_rule_groups(apart) == {"ruled_pods": 2, "broken_rules": 0, "ok": True}
    together = [*apart, bound("c", "n2")]
    assert check_rule_groups(together)["broken_rules"] == 1


def test_a_share_outside_zero_to_one_is_refused_naming_the_option() -> None:
    with pytest.raises(ValueError, match="--pod-rules"):
        LiveConfig(pod_rules=1.5).validate()
