"""Inter-pod affinity, anti-affinity and topology spread, as kube-scheduler 1.37 decides them.

Each case places pods one at a time with the core's scheduler and checks where they land, or
which reason keeps them pending; the hypothesis property compares the vectorised checks with a
plain per-node reading of kube's rules.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpupool.core.constraints import NodeConstraints, Requirement, Taint, Toleration
from gpupool.core.decisions import Bind, Reject
from gpupool.core.filtering import admissible, filter_nodes, fits_on_node
from gpupool.core.framework import Scheduler, apply
from gpupool.core.model import InvalidSpecError, NodeSpec, PodSpec
from gpupool.core.pod_affinity import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
)
from gpupool.core.pod_relative import failed_for_neighbours
from gpupool.core.pod_terms import (
    SCHEDULE_ANYWAY,
    AffinityTerm,
    LabelSelector,
    PodTerms,
    SpreadConstraint,
)
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.core.topology_spread import REASON_SPREAD, REASON_SPREAD_LABEL
from gpupool.policy.workload import Running, Workload
from gpupool.scheduling.policies.bestfit import BestFitPolicy
from gpupool.scheduling.preemption import Rule, choose_victims

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(name: str, zone: str | None = None, **extra: object) -> NodeSpec:
    labels = {HOST: name, **({ZONE: zone} if zone else {})}
    return NodeSpec(
        name=name,
        cpu_milli=32000,
        memory_mib=65536,
        gpu_count=8,
        gpu_model="A100",
        labels=tuple(sorted(labels.items())),
        **extra,  # type: ignore[arg-type]
    )


def app(value: str) -> LabelSelector:
    return LabelSelector(match_labels=(("app", value),))


def term(key: str = HOST, value: str = "web", weight: int = 0) -> AffinityTerm:
    return AffinityTerm(key, app(value), frozenset({"team"}), weight)


def pod(name: str, label: str = "web", terms: PodTerms | None = None, **extra: object) -> PodSpec:
    fields: dict[str, object] = {"cpu_milli": 1000, "gpu_count": 1, "gpu_milli": 1000, **extra}
    return PodSpec(
        name=name,
        memory_mib=1024,
        namespace="team",
        labels=(("app", label),),
        terms=terms,
        **fields,  # type: ignore[arg-type]
    )


def place(snapshot: ClusterSnapshot, pods: list[PodSpec]) -> list[str | None]:
    """Schedule ``pods`` in order; the node each lands on (None: rejected)."""
    scheduler, landed = Scheduler(BestFitPolicy()), []
    for spec in pods:
        decision = scheduler.schedule(snapshot, spec)
        apply(snapshot, decision)
        landed.append(decision.node_name if isinstance(decision, Bind) else None)
    return landed


def spread(max_skew: int = 1, key: str = HOST, **extra: object) -> PodTerms:
    return PodTerms(spread=(SpreadConstraint(max_skew, key, selector=app("web"), **extra),))  # type: ignore[arg-type]


def test_three_anti_affine_replicas_on_two_nodes_land_one_per_node_and_the_third_waits() -> None:
    snapshot = ClusterSnapshot([node("a"), node("b")])
    terms = PodTerms(anti_affinity=(term(),))
    landed = place(snapshot, [pod(f"r{i}", terms=terms) for i in range(3)])
    assert sorted(filter(None, landed)) == ["a", "b"]
    assert landed[2] is None
    decision = Scheduler(BestFitPolicy()).schedule(snapshot, pod("r3", terms=terms))
    assert isinstance(decision, Reject)
    assert decision.message == f"0/2 nodes are available: 2 {REASON_ANTI_AFFINITY}."


def test_four_replicas_spread_with_max_skew_one_land_two_and_two() -> None:
    snapshot = ClusterSnapshot([node("a"), node("b")])
    landed = place(snapshot, [pod(f"r{i}", terms=spread()) for i in range(4)])
    assert sorted(landed) == ["a", "a", "b", "b"]  # type: ignore[type-var]


def test_without_terms_the_packing_policy_would_stack_them() -> None:
    """The control for the two cases above: the same pods without terms land on one node."""
    snapshot = ClusterSnapshot([node("a"), node("b")])
    assert len(set(place(snapshot, [pod(f"r{i}") for i in range(4)]))) == 1


def test_an_existing_pods_anti_affinity_keeps_a_matching_newcomer_out_of_its_domain() -> None:
    snapshot = ClusterSnapshot([node("a"), node("b")])
    guard = pod("guard", label="db", terms=PodTerms(anti_affinity=(term(value="web"),)))
    snapshot.bind(guard, 0, (0,))
    result = filter_nodes(snapshot, pod("newcomer"))  # no terms of its own
    assert result.mask.tolist() == [False, True]
    assert dict(result.reasons()) == {REASON_EXISTING_ANTI_AFFINITY: 1}
    other = filter_nodes(snapshot, pod("other", label="cache"))  # not matched: anywhere
    assert other.mask.tolist() == [True, True]
    snapshot.release("guard")
    assert not snapshot.pods_with_terms


def test_zone_anti_affinity_keeps_the_whole_zone_free_not_just_the_node() -> None:
    snapshot = ClusterSnapshot([node("a1", "z1"), node("a2", "z1"), node("b1", "z2")])
    terms = PodTerms(anti_affinity=(term(ZONE),))
    landed = place(snapshot, [pod(f"r{i}", terms=terms) for i in range(3)])
    assert landed[2] is None
    assert {landed[0], landed[1]} in ({"a1", "b1"}, {"a2", "b1"})


def test_required_affinity_follows_a_matching_pod_into_its_zone() -> None:
    snapshot = ClusterSnapshot([node("a1", "z1"), node("a2", "z1"), node("b1", "z2")])
    snapshot.bind(pod("db", label="db"), 2, (0,))
    follower = pod("f", label="web", terms=PodTerms(affinity=(term(ZONE, "db"),)))
    result = filter_nodes(snapshot, follower)
    assert result.mask.tolist() == [False, False, True]
    assert dict(result.reasons()) == {REASON_AFFINITY: 2}


def test_the_first_pod_of_a_self_affine_group_may_go_anywhere_with_the_key() -> None:
    snapshot = ClusterSnapshot([node("a", "z1"), node("b", "z2"), node("c")])
    first = pod("first", terms=PodTerms(affinity=(term(ZONE, "web"),)))
    assert filter_nodes(snapshot, first).mask.tolist() == [True, True, False]
    stranger = pod("stranger", label="other", terms=PodTerms(affinity=(term(ZONE, "web"),)))
    assert not filter_nodes(snapshot, stranger).mask.any()  # it does not match itself


def test_min_domains_counts_missing_domains_as_empty_so_pods_wait_for_new_ones() -> None:
    snapshot = ClusterSnapshot([node("a"), node("b")])
    terms = spread(min_domains=3)
    landed = place(snapshot, [pod(f"r{i}", terms=terms) for i in range(3)])
    assert sorted(filter(None, landed)) == ["a", "b"]
    assert landed[2] is None
    decision = Scheduler(BestFitPolicy()).schedule(snapshot, pod("r3", terms=terms))
    assert isinstance(decision, Reject)
    assert REASON_SPREAD in decision.message


def test_a_node_without_the_spread_key_is_refused_with_the_missing_label_reason() -> None:
    bare = NodeSpec(name="bare", cpu_milli=32000, memory_mib=65536, gpu_count=8, gpu_model="A100")
    snapshot = ClusterSnapshot([node("a", "z1"), bare])
    result = filter_nodes(snapshot, pod("p", terms=spread(key=ZONE)))
    assert dict(result.reasons()) == {REASON_SPREAD_LABEL: 1}
    assert not admissible(snapshot, pod("p", terms=spread(key=ZONE)))[1]  # no removal helps


def test_node_taints_policy_honor_leaves_a_tainted_domain_out_of_the_minimum() -> None:
    """A tainted node's empty domain holds the minimum at 0 unless the policy says Honor."""
    tainted = node("t", taints=(Taint("gpu", effect="NoSchedule"),))
    snapshot = ClusterSnapshot([node("a"), tainted])
    snapshot.bind(pod("old"), 0, (0,))
    tolerant = NodeConstraints.of(tolerations=[Toleration(key="other", operator="Exists")])
    ignored = pod("p1", terms=spread(), constraints=tolerant)
    honored = pod("p2", terms=spread(node_taints_policy="Honor"), constraints=tolerant)
    assert not filter_nodes(snapshot, ignored).mask[0]  # 1 + 1 - 0 > 1
    assert filter_nodes(snapshot, honored).mask[0]  # the only domain is a: 1 + 1 - 1 <= 1


def test_preferred_anti_affinity_breaks_a_tie_but_not_the_policy_score() -> None:
    snapshot = ClusterSnapshot([node("a"), node("b")])
    snapshot.bind(pod("x"), 0, (0,))
    soft = PodTerms(preferred_anti_affinity=(term(weight=50),))
    spreader = pod("s", terms=soft, cpu_milli=0)
    scheduler = Scheduler(BestFitPolicy())
    # bestfit prefers the fuller node a; the soft term only decides among equals
    assert scheduler.schedule(snapshot, spreader).node_name == "a"  # type: ignore[union-attr]
    snapshot.release("x")
    snapshot.bind(pod("x", cpu_milli=0, gpu_count=0, gpu_milli=0), 0)
    assert scheduler.schedule(snapshot, spreader).node_name == "b"  # type: ignore[union-attr]


def test_schedule_anyway_spread_breaks_ties_toward_the_emptier_domain() -> None:
    snapshot = ClusterSnapshot([node("a"), node("b")])
    snapshot.bind(pod("x", cpu_milli=0, gpu_count=0, gpu_milli=0), 0)
    soft = spread(when_unsatisfiable=SCHEDULE_ANYWAY)
    decision = Scheduler(BestFitPolicy()).schedule(snapshot, pod("s", terms=soft))
    assert decision.node_name == "b"  # type: ignore[union-attr]


def test_fits_on_node_sees_a_removal_that_clears_the_anti_affinity() -> None:
    snapshot = ClusterSnapshot([node("a")])
    snapshot.bind(pod("victim"), 0, (0,))
    newcomer = pod("new", terms=PodTerms(anti_affinity=(term(),)))
    assert not fits_on_node(snapshot, newcomer, 0)
    restore = snapshot.simulate_removal(["victim"])
    assert fits_on_node(snapshot, newcomer, 0)
    restore()
    assert not fits_on_node(snapshot, newcomer, 0)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: AffinityTerm("", None, None), "topologyKey"),
        (lambda: SpreadConstraint(0, HOST), "maxSkew"),
        (lambda: SpreadConstraint(1, HOST, when_unsatisfiable="Maybe"), "whenUnsatisfiable"),
        (lambda: SpreadConstraint(1, HOST, min_domains=0), "minDomains"),
        (lambda: SpreadConstraint(1, HOST, node_taints_policy="x"), "nodeTaintsPolicy"),
        (
            lambda: LabelSelector(match_expressions=(Requirement("a", "Gt", ("1",)),)),
            "matchExpressions",
        ),
        (lambda: PodSpec("p", 0, 0, labels=(("b", "1"), ("a", "1"))), "labels"),
    ],
)
def test_invalid_terms_are_refused_naming_the_field(build: object, field: str) -> None:
    with pytest.raises(InvalidSpecError) as error:
        build()  # type: ignore[operator]
    assert error.value.field_name == field


def test_empty_terms_are_stored_as_none_so_the_common_pod_stays_cheap() -> None:
    assert pod("p", terms=PodTerms()).terms is None


def _running(spec: PodSpec, node_row: int, started_at: float) -> Running:
    return Running(
        Workload(pod=spec), queue=0, pool=0, units=1000, node=node_row, started_at=started_at
    )


def _victims(snapshot: ClusterSnapshot, preemptor: PodSpec, candidates: list[Running]) -> object:
    choice = choose_victims(
        snapshot,
        preemptor,
        candidates,
        np.ones(snapshot.size, dtype=np.bool_),
        100.0,
        Rule.PRIORITY,
    )
    return None if choice is None else (snapshot.node_names[choice.node], choice.victims)


def test_preemption_evicts_the_pod_whose_removal_satisfies_the_anti_affinity() -> None:
    snapshot = ClusterSnapshot([node("a")])
    db, web = pod("db", label="db"), pod("web")
    snapshot.bind(db, 0, (0,))
    snapshot.bind(web, 0, (1,))
    preemptor = pod("new", label="api", terms=PodTerms(anti_affinity=(term(),)))
    # db is the cheaper victim (younger), but only web's removal lets the preemptor in
    candidates = [_running(db, 0, started_at=90.0), _running(web, 0, started_at=0.0)]
    assert _victims(snapshot, preemptor, candidates) == ("a", ("web",))
    assert set(snapshot.allocations) == {"db", "web"}  # the what-ifs left it as it was


def test_preemption_refuses_victims_that_leave_the_anti_affinity_violated() -> None:
    snapshot = ClusterSnapshot([node("a1", "z1"), node("a2", "z1")])
    db, web = pod("db", label="db"), pod("web")
    snapshot.bind(db, 0, (0,))
    snapshot.bind(web, 1, (0,))  # not a candidate: stays in the zone
    preemptor = pod("new", label="api", terms=PodTerms(anti_affinity=(term(ZONE),)))
    assert _victims(snapshot, preemptor, [_running(db, 0, started_at=0.0)]) is None


def test_a_rejection_for_neighbours_does_not_skip_other_pods_of_the_same_size() -> None:
    """The engine skips pods no smaller than one that failed, unless a pod rule failed it."""
    snapshot = ClusterSnapshot([node("a")])
    snapshot.bind(
        pod("guard", label="db", terms=PodTerms(anti_affinity=(term(value="web"),))), 0, (0,)
    )
    blocked = Scheduler(BestFitPolicy()).schedule(snapshot, pod("web-1"))
    assert isinstance(blocked, Reject)
    assert failed_for_neighbours(blocked.reasons)
    full = ClusterSnapshot([node("a")])
    full.bind(PodSpec("hog", cpu_milli=32000, memory_mib=0), 0)
    by_room = Scheduler(BestFitPolicy()).schedule(full, pod("web-1"))
    assert isinstance(by_room, Reject)
    assert not failed_for_neighbours(by_room.reasons)
