"""A pod's podAffinity, podAntiAffinity and topologySpreadConstraints, read from the API object.

The placement rules are the core's (tests/unit/core/test_pod_affinity.py); these tests show the
object's fields reach them with kube's defaults, and that what gpupool refuses is named by path.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.core.constraints import Requirement
from gpupool.core.filtering import filter_nodes
from gpupool.core.pod_affinity import REASON_ANTI_AFFINITY
from gpupool.core.pod_terms import HONOR, IGNORE, LabelSelector
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec

from ..builders import decode_pod, make_state, node, pod_dict

HOST = "kubernetes.io/hostname"
ANTI = "spec.affinity.podAntiAffinity"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _pod(affinity: dict[str, Any] | None = None, spread: list[Any] | None = None) -> Any:
    obj = pod_dict("p", gpus=1, namespace="team")
    obj["metadata"]["labels"] = {"app": "web", "rev": "7"}
    if affinity is not None:
        obj["spec"]["affinity"] = affinity
    if spread is not None:
        obj["spec"]["topologySpreadConstraints"] = spread
    return decode_pod(obj)


def _term(**extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST, **extra}


def test_a_pod_without_pod_rules_has_no_terms_but_carries_its_namespace_and_labels() -> None:
    spec = pod_spec(_pod())
    assert spec.terms is None
    assert spec.namespace == "team"
    assert spec.labels == (("app", "web"), ("rev", "7"))


def test_required_and_preferred_terms_default_to_the_pods_namespace() -> None:
    affinity = {
        "podAntiAffinity": {
            REQUIRED: [_term()],
            PREFERRED: [{"weight": 30, "podAffinityTerm": _term(namespaces=["a", "b"])}],
        },
        "podAffinity": {REQUIRED: [_term(namespaceSelector={})]},
    }
    terms = pod_spec(_pod(affinity)).terms
    assert terms is not None
    (anti,) = terms.anti_affinity
    assert anti.namespaces == frozenset({"team"})
    assert anti.selector == LabelSelector((("app", "web"),))
    assert terms.preferred_anti_affinity[0].namespaces == frozenset({"a", "b"})
    assert terms.preferred_anti_affinity[0].weight == 30
    assert terms.affinity[0].namespaces is None  # namespaceSelector {}: every namespace


def test_match_and_mismatch_label_keys_are_merged_into_the_selector() -> None:
    affinity = {
        "podAntiAffinity": {REQUIRED: [_term(matchLabelKeys=["rev"], mismatchLabelKeys=["app"])]}
    }
    terms = pod_spec(_pod(affinity)).terms
    assert terms is not None
    assert terms.anti_affinity[0].selector == LabelSelector(
        (("app", "web"),), (Requirement("rev", "In", ("7",)), Requirement("app", "NotIn", ("web",)))
    )


def test_spread_constraints_take_kubes_defaults() -> None:
    spread = [
        {
            "maxSkew": 2,
            "topologyKey": HOST,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "matchLabelKeys": ["rev", "absent"],
        }
    ]
    terms = pod_spec(_pod(spread=spread)).terms
    assert terms is not None
    (constraint,) = terms.spread
    assert (constraint.max_skew, constraint.min_domains) == (2, 1)
    assert (constraint.node_affinity_policy, constraint.node_taints_policy) == (HONOR, IGNORE)
    assert constraint.selector == LabelSelector(
        (("app", "web"),), (Requirement("rev", "In", ("7",)),)
    )


@pytest.mark.parametrize(
    ("affinity", "spread", "field"),
    [
        (
            {"podAntiAffinity": {REQUIRED: [_term(namespaceSelector={"matchLabels": {"a": "b"}})]}},
            None,
            f"{ANTI}.{REQUIRED}[0].namespaceSelector",
        ),
        (
            {"podAntiAffinity": {REQUIRED: [_term(topologyKey="")]}},
            None,
            f"{ANTI}.{REQUIRED}[0].topologyKey",
        ),
        (
            {"podAffinity": {PREFERRED: [{"weight": 0, "podAffinityTerm": _term()}]}},
            None,
            f"spec.affinity.podAffinity.{PREFERRED}[0].weight",
        ),
        (
            {
                "podAntiAffinity": {
                    REQUIRED: [
                        {
                            "labelSelector": {
                                "matchExpressions": [
                                    {"key": "a", "operator": "Gt", "values": ["1"]}
                                ]
                            },
                            "topologyKey": HOST,
                        }
                    ]
                }
            },
            None,
            f"{ANTI}.{REQUIRED}[0].labelSelector.matchExpressions",
        ),
        (
            None,
            [{"maxSkew": 0, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule"}],
            "spec.topologySpreadConstraints[0].maxSkew",
        ),
        (
            None,
            [{"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "Later"}],
            "spec.topologySpreadConstraints[0].whenUnsatisfiable",
        ),
    ],
)
def test_a_refused_pod_rule_is_named_by_its_path(
    affinity: dict[str, Any] | None, spread: list[Any] | None, field: str
) -> None:
    with pytest.raises(InvalidObjectError) as error:
        pod_spec(_pod(affinity, spread))
    assert error.value.field == field


def test_a_bound_pod_whose_request_cannot_be_read_still_counts_for_anti_affinity() -> None:
    """Its labels stay on the snapshot, so a newcomer's anti-affinity still sees it."""
    unreadable = pod_dict(
        "old", gpus=1, cores=150, node="n0", phase="Running", labels={"app": "web"}
    )
    state = make_state(node("n0"), node("n1"), pods=(decode_pod(unreadable),))
    assert state.snapshot is not None
    newcomer = pod_dict("new", gpus=1)
    newcomer["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [_term(namespaces=["default"])]}}
    result = filter_nodes(state.snapshot, state.spec_of(decode_pod(newcomer)))
    assert result.mask.tolist() == [False, True]
    assert dict(result.reasons()) == {REASON_ANTI_AFFINITY: 1}


def test_relabelling_a_running_pod_changes_whom_anti_affinity_keeps_away() -> None:
    running = pod_dict("old", gpus=1, node="n0", phase="Running", labels={"app": "db"})
    state = make_state(node("n0"), node("n1"), pods=(decode_pod(running),))
    assert state.snapshot is not None
    newcomer = pod_dict("new", gpus=1)
    newcomer["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: [_term(namespaces=["default"])]}}
    spec = state.spec_of(decode_pod(newcomer))
    assert filter_nodes(state.snapshot, spec).mask.tolist() == [True, True]
    running["metadata"]["labels"] = {"app": "web"}
    running["metadata"]["resourceVersion"] = "2"
    state.on_pod("MODIFIED", decode_pod(running))
    state.sync()
    assert filter_nodes(state.snapshot, spec).mask.tolist() == [False, True]
