"""A pod's required node affinity and node selector, read from the API object by the scheduler.

The matching rules themselves are the core's (tests/unit/core/test_constraints.py); these tests show
the pod object reaches them whole, and that a field the core refuses is named by its path.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpupool.core.filtering import REASON_SELECTOR
from gpupool.kube.objects.translate import InvalidObjectError, pod_spec

from ..builders import decode_pod, make_state, masks, node, pod_dict


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def _with_affinity(obj: dict[str, Any], *terms: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": _expr("zone", "In", "b")}
            ],
        }
    }
    return obj


def test_state_filters_nodes_by_required_affinity_and_selector_together() -> None:
    state = make_state(
        node("n0", labels={"zone": "a", "tier": "gold"}),
        node("n1", labels={"zone": "b", "tier": "gold"}),
        node("n2", labels={"zone": "a"}),
    )
    obj = _with_affinity(pod_dict("p", gpus=1, selector={"tier": "gold"}), _expr("zone", "In", "a"))
    assert masks(state, decode_pod(obj))[REASON_SELECTOR] == [True, False, False]


def test_match_fields_select_the_node_by_name() -> None:
    state = make_state(node("n0"), node("n1"))
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    obj = _with_affinity(pod_dict("p", gpus=1), term)
    assert masks(state, decode_pod(obj))[REASON_SELECTOR] == [False, True]


@pytest.mark.parametrize(
    ("term", "field"),
    [
        (
            _expr("gpu", "Sideways", "H100"),
            "nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
        (_expr("gpu", "Exists", "H100"), "nodeSelectorTerms[0].matchExpressions[0].values"),
        (
            {"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]},
            "nodeSelectorTerms[0].matchFields",
        ),
    ],
)
def test_a_requirement_the_core_refuses_is_named_by_its_path(
    term: dict[str, Any], field: str
) -> None:
    obj = _with_affinity(pod_dict("p", gpus=1), term)
    with pytest.raises(InvalidObjectError) as caught:
        pod_spec(decode_pod(obj))
    assert caught.value.field.startswith(
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
    )
    assert caught.value.field.endswith(field)


def test_a_bad_toleration_is_named_by_its_path() -> None:
    obj = pod_dict("p", gpus=1, tolerations=[{"key": "k", "operator": "Exists", "value": "v"}])
    with pytest.raises(InvalidObjectError) as caught:
        pod_spec(decode_pod(obj))
    assert caught.value.field == "spec.tolerations[0].value"
    assert "must be empty when operator is Exists" in str(caught.value)


def test_a_pod_without_selector_affinity_or_tolerations_has_no_constraints() -> None:
    assert pod_spec(decode_pod(pod_dict("p", gpus=1))).constraints is None
