"""Node constraints in the core: kube-scheduler's selector, affinity and taint rules, as masks.

The tables are kube-scheduler's semantics (NodeAffinity, TaintToleration); the last tests show
the masks the filter, preemption and backfill share (``node_checks``) and that they are counted
in a pending pod's reason like any other check.
"""

from __future__ import annotations

import pytest

from gpupool.core.constraints import (
    NodeConstraints,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from gpupool.core.filtering import (
    REASON_NOT_READY,
    REASON_SELECTOR,
    REASON_TAINTS,
    REASON_UNSCHEDULABLE,
    admissible,
    filter_nodes,
    fits_on_node,
    node_checks,
)
from gpupool.core.framework import Scheduler
from gpupool.core.model import InvalidSpecError, NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.policies.bestfit import BestFitPolicy

LABELS = {"gpu": "H100", "zone": "a", "gen": "9"}


def _term(*requirements: Requirement) -> SelectorTerm:
    return SelectorTerm(match_expressions=requirements)


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        (_term(Requirement("gpu", "In", ("H100", "A100"))), True),
        (_term(Requirement("gpu", "In", ("A100",))), False),
        (_term(Requirement("gpu", "NotIn", ("A100",))), True),
        (_term(Requirement("missing", "NotIn", ("x",))), True),
        (_term(Requirement("zone", "Exists")), True),
        (_term(Requirement("missing", "Exists")), False),
        (_term(Requirement("missing", "DoesNotExist")), True),
        (_term(Requirement("zone", "DoesNotExist")), False),
        (_term(Requirement("gen", "Gt", ("8",))), True),
        (_term(Requirement("gen", "Gt", ("9",))), False),
        (_term(Requirement("gen", "Lt", ("10",))), True),
        (_term(Requirement("zone", "Gt", ("1",))), False),  # the label is not a number
        (_term(Requirement("gen", "Gt", ("x",))), False),  # nor the bound
        (_term(Requirement("gpu", "In", ("H100",)), Requirement("zone", "In", ("b",))), False),
        (SelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n1",)),)), True),
        (SelectorTerm(match_fields=(Requirement("metadata.name", "NotIn", ("n1",)),)), False),
        (SelectorTerm(), False),  # an empty term matches nothing
    ],
)
def test_one_affinity_term(term: SelectorTerm, matches: bool) -> None:
    assert term.holds(LABELS, "n1") is matches


def test_any_term_is_enough_and_no_terms_match_nothing() -> None:
    miss, hit = _term(Requirement("gpu", "In", ("A100",))), _term(Requirement("zone", "In", ("a",)))
    assert NodeConstraints.of(affinity=(miss, hit)).selects(LABELS, "n1")
    assert not NodeConstraints.of(affinity=(miss,)).selects(LABELS, "n1")
    assert not NodeConstraints.of(affinity=()).selects(LABELS, "n1")


def test_selector_and_affinity_must_both_hold() -> None:
    term = _term(Requirement("zone", "In", ("a",)))
    assert NodeConstraints.of({"gpu": "H100"}, (term,)).selects(LABELS, "n1")
    assert not NodeConstraints.of({"gpu": "A100"}, (term,)).selects(LABELS, "n1")
    assert not NodeConstraints.of({"gpu": "H100", "rack": "1"}).selects(LABELS, "n1")


DEDICATED = Taint("dedicated", "ml", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (Toleration("dedicated", "Exists"), True),
        (Toleration(operator="Exists"), True),
        (Toleration("dedicated", "Exists", effect="NoSchedule"), True),
        (Toleration("dedicated", "Equal", "ml", "NoSchedule"), True),
        (Toleration("dedicated", value="ml"), True),  # Equal is the default
        (Toleration("dedicated", "Equal", "cv"), False),
        (Toleration("other", "Exists"), False),
        (Toleration("dedicated", "Exists", effect="NoExecute"), False),
        (Toleration(operator="Exists", effect="NoExecute"), False),
    ],
)
def test_one_toleration(toleration: Toleration, tolerated: bool) -> None:
    assert toleration.tolerates(DEDICATED) is tolerated
    assert NodeConstraints.of(tolerations=(toleration,)).tolerates((DEDICATED,)) is tolerated


def test_only_noschedule_and_noexecute_taints_keep_pods_off() -> None:
    plain = NodeConstraints()
    assert not plain.tolerates((Taint("gone", effect="NoExecute"),))
    assert not plain.tolerates((DEDICATED,))
    assert plain.tolerates((Taint("soft", effect="PreferNoSchedule"),))
    both = (DEDICATED, Taint("gone", effect="NoExecute"))
    one = NodeConstraints.of(tolerations=(Toleration("dedicated", "Exists"),))
    assert not one.tolerates(both)  # every blocking taint needs a toleration


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Toleration("k", "Exists", "v"), "value"),
        (lambda: Toleration("", "Equal"), "operator"),
        (lambda: Toleration("k", "Sometimes"), "operator"),
        (lambda: Toleration("k", effect="NoRun"), "effect"),
        (lambda: Taint("", effect="NoSchedule"), "key"),
        (lambda: Taint("k", effect="Never"), "effect"),
        (lambda: Requirement("k", "Sideways", ("x",)), "operator"),
        (lambda: Requirement("k", "In"), "values"),
        (lambda: Requirement("k", "Exists", ("x",)), "values"),
        (lambda: Requirement("k", "Gt", ("1", "2")), "values"),
        (
            lambda: SelectorTerm(match_fields=(Requirement("metadata.uid", "In", ("x",)),)),
            "matchFields",
        ),
        (lambda: NodeConstraints(node_selector=(("b", "1"), ("a", "1"))), "node_selector"),
    ],
)
def test_bad_values_are_refused_naming_the_field(make: object, field: str) -> None:
    with pytest.raises(InvalidSpecError) as caught:
        make()  # type: ignore[operator]
    assert caught.value.field_name == field


def test_empty_constraints_are_no_constraints() -> None:
    pod = PodSpec("p", 100, 100, constraints=NodeConstraints.of({}, None, ()))
    assert pod.constraints is None
    assert pod == PodSpec("p", 100, 100)


def _node(name: str, **fields: object) -> NodeSpec:
    return NodeSpec(name, 8000, 8192, gpu_count=1, gpu_model="A100", **fields)  # type: ignore[arg-type]


def _cluster() -> ClusterSnapshot:
    return ClusterSnapshot(
        [
            _node("n0", labels=(("zone", "a"),)),
            _node("n1", ready=False, labels=(("zone", "a"),)),
            _node("n2", unschedulable=True),
            _node("n3", taints=(DEDICATED,), labels=(("zone", "b"),)),
            _node("n4", taints=(Taint("soft", effect="PreferNoSchedule"),)),
        ]
    )


def _pod(constraints: NodeConstraints | None = None) -> PodSpec:
    return PodSpec("p", 1000, 1024, gpu_count=1, gpu_milli=500, constraints=constraints)


def test_node_checks_are_the_node_state_and_the_pods_constraints() -> None:
    snapshot = _cluster()
    plain = dict(node_checks(snapshot, None))
    assert plain.keys() == {REASON_NOT_READY, REASON_UNSCHEDULABLE, REASON_TAINTS}
    assert plain[REASON_NOT_READY].tolist() == [True, False, True, True, True]
    assert plain[REASON_UNSCHEDULABLE].tolist() == [True, True, False, True, True]
    assert plain[REASON_TAINTS].tolist() == [True, True, True, False, True]
    zone_b = NodeConstraints.of({"zone": "b"}, tolerations=(Toleration("dedicated", "Exists"),))
    found = dict(node_checks(snapshot, zone_b))
    assert REASON_TAINTS not in found
    assert found[REASON_SELECTOR].tolist() == [False, False, False, True, False]
    assert admissible(snapshot, _pod(zone_b)).tolist() == [False, False, False, True, False]
    assert admissible(snapshot, _pod()).tolist() == [True, False, False, False, True]


def test_masks_are_compiled_once_per_constraint_set() -> None:
    snapshot = _cluster()
    one = NodeConstraints.of({"zone": "a"})
    assert node_checks(snapshot, one) is node_checks(snapshot, NodeConstraints.of({"zone": "a"}))
    assert len(snapshot.constraint_checks) == 1


def test_a_cluster_of_ready_untainted_nodes_adds_no_check() -> None:
    snapshot = ClusterSnapshot([_node("n0"), _node("n1")])
    assert node_checks(snapshot, None) == ()


def test_the_filter_counts_every_constraint_in_the_reason_and_fits_on_node_agrees() -> None:
    snapshot = _cluster()
    result = filter_nodes(snapshot, _pod(NodeConstraints.of({"zone": "a"})))
    assert result.mask.tolist() == [True, False, False, False, False]
    assert dict(result.reasons()) == {
        REASON_SELECTOR: 3,
        REASON_NOT_READY: 1,
        REASON_UNSCHEDULABLE: 1,
        REASON_TAINTS: 1,
    }
    pod = _pod(NodeConstraints.of({"zone": "a"}))
    assert [fits_on_node(snapshot, pod, n) for n in range(5)] == result.mask.tolist()
    decision = Scheduler(BestFitPolicy()).schedule(snapshot, pod)
    assert decision.node_name == "n0"  # type: ignore[union-attr]
