from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gpupool.kube.affinity import node_matches
from gpupool.kube.node_checks import REASON_SELECTOR
from gpupool.kube.records import NodeSelector

from .builders import decode_pod, make_state, masks, node, pod_dict

LABELS = {"gpu": "H100", "zone": "a", "gen": "9"}


def _selector(*terms: dict[str, Any]) -> NodeSelector:
    return msgspec.convert({"nodeSelectorTerms": list(terms)}, NodeSelector)


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        (_expr("gpu", "In", "H100", "A100"), True),
        (_expr("gpu", "In", "A100"), False),
        (_expr("gpu", "NotIn", "A100"), True),
        (_expr("missing", "NotIn", "x"), True),
        (_expr("zone", "Exists"), True),
        (_expr("missing", "Exists"), False),
        (_expr("missing", "DoesNotExist"), True),
        (_expr("zone", "DoesNotExist"), False),
        (_expr("gen", "Gt", "8"), True),
        (_expr("gen", "Gt", "9"), False),
        (_expr("gen", "Lt", "10"), True),
        (_expr("zone", "Gt", "1"), False),  # not a number
        (_expr("gpu", "Sideways", "H100"), False),  # unknown operator matches nothing
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, True),
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}, False),
        ({}, False),  # an empty term matches nothing
    ],
)
def test_one_term(term: dict[str, Any], matches: bool) -> None:
    assert node_matches(_selector(term), LABELS, "n1") is matches


def test_expressions_of_a_term_all_hold() -> None:
    both = {
        "matchExpressions": [
            {"key": "gpu", "operator": "In", "values": ["H100"]},
            {"key": "zone", "operator": "In", "values": ["b"]},
        ]
    }
    assert not node_matches(_selector(both), LABELS, "n1")


def test_any_term_is_enough() -> None:
    assert node_matches(
        _selector(_expr("gpu", "In", "A100"), _expr("zone", "In", "a")), LABELS, "n1"
    )


def test_no_terms_match_nothing() -> None:
    assert not node_matches(_selector(), LABELS, "n1")


def test_state_filters_nodes_by_required_affinity_and_selector_together() -> None:
    state = make_state(
        node("n0", labels={"zone": "a", "tier": "gold"}),
        node("n1", labels={"zone": "b", "tier": "gold"}),
        node("n2", labels={"zone": "a"}),
    )
    obj = pod_dict("p", gpus=1, selector={"tier": "gold"})
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [_expr("zone", "In", "a")]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": _expr("zone", "In", "b")}
            ],
        }
    }
    assert masks(state, decode_pod(obj))[REASON_SELECTOR] == [True, False, False]
