"""The vectorised pod-relative checks agree with a plain, per-node reading of kube's rules.

The reference below walks nodes and pods one at a time with dictionaries, the way the plugins'
Filter functions read (InterPodAffinity: affinity, then anti-affinity, then existing pods'
anti-affinity, first failure per node; PodTopologySpread: per constraint, a missing key, then
the skew). Random clusters of a few nodes in a few zones, pods in two namespaces with two apps,
random terms: every node must fail for the same reasons in both.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.core.constraints import NodeConstraints, Taint, Toleration
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.pod_affinity import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
)
from gpupool.core.pod_relative import pod_checks
from gpupool.core.pod_terms import AffinityTerm, LabelSelector, PodTerms, SpreadConstraint
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.core.topology_spread import REASON_SPREAD, REASON_SPREAD_LABEL

HOST, ZONE = "kubernetes.io/hostname", "zone"
APPS, NAMESPACES = ("a", "b"), ("x", "y")

selectors = st.one_of(
    st.none(),
    st.just(LabelSelector()),
    st.sampled_from(APPS).map(lambda app: LabelSelector((("app", app),))),
)
terms = st.builds(
    AffinityTerm,
    topology_key=st.sampled_from((HOST, ZONE)),
    selector=selectors,
    namespaces=st.one_of(
        st.none(), st.sets(st.sampled_from(NAMESPACES), min_size=1).map(frozenset)
    ),
)
constraints = st.builds(
    SpreadConstraint,
    max_skew=st.integers(1, 2),
    topology_key=st.sampled_from((HOST, ZONE)),
    selector=selectors,
    min_domains=st.integers(1, 4),
    node_taints_policy=st.sampled_from(("Honor", "Ignore")),
)
pod_terms = st.builds(
    PodTerms,
    affinity=st.lists(terms, max_size=2).map(tuple),
    anti_affinity=st.lists(terms, max_size=2).map(tuple),
    spread=st.lists(constraints, max_size=2).map(tuple),
)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeSpec], list[tuple[PodSpec, int]], PodSpec]:
    nodes = []
    for i in range(draw(st.integers(1, 5))):
        labels = {HOST: f"n{i}"}
        zone = draw(st.sampled_from(("z1", "z2", None)))
        if zone:
            labels[ZONE] = zone
        taints = (Taint("t"),) if draw(st.booleans()) else ()
        nodes.append(
            NodeSpec(f"n{i}", 64000, 65536, labels=tuple(sorted(labels.items())), taints=taints)
        )

    def pod(name: str) -> PodSpec:
        return PodSpec(
            name,
            0,
            0,
            namespace=draw(st.sampled_from(NAMESPACES)),
            labels=(("app", draw(st.sampled_from(APPS))),),
            terms=draw(st.one_of(st.none(), pod_terms)),
            constraints=draw(
                st.sampled_from((None, NodeConstraints.of(tolerations=[Toleration("t", "Exists")])))
            ),
        )

    placed = [
        (pod(f"p{i}"), draw(st.integers(0, len(nodes) - 1))) for i in range(draw(st.integers(0, 6)))
    ]
    return nodes, placed, pod("new")


def _reference(
    nodes: list[NodeSpec], placed: list[tuple[PodSpec, int]], pod: PodSpec
) -> list[set[str]]:
    labels = [dict(node.labels) for node in nodes]
    own = pod.terms or PodTerms()

    def matches(term: AffinityTerm, other: PodSpec) -> bool:
        return term.matches(other.namespace, dict(other.labels))

    def inter_pod(n: int) -> str | None:
        if own.affinity:
            counts: Counter[tuple[str, str]] = Counter()
            for other, m in placed:
                if all(matches(t, other) for t in own.affinity):
                    for t in own.affinity:
                        if t.topology_key in labels[m]:
                            counts[(t.topology_key, labels[m][t.topology_key])] += 1
            if any(t.topology_key not in labels[n] for t in own.affinity):
                return REASON_AFFINITY
            if not all(counts[(t.topology_key, labels[n][t.topology_key])] for t in own.affinity):
                first = not counts and all(matches(t, pod) for t in own.affinity)
                if not first:
                    return REASON_AFFINITY
        for t in own.anti_affinity:
            value = labels[n].get(t.topology_key)
            if value is not None and any(
                matches(t, other) and labels[m].get(t.topology_key) == value for other, m in placed
            ):
                return REASON_ANTI_AFFINITY
        for other, m in placed:
            for t in other.terms.anti_affinity if other.terms else ():
                value = labels[m].get(t.topology_key)
                if value is not None and matches(t, pod) and labels[n].get(t.topology_key) == value:
                    return REASON_EXISTING_ANTI_AFFINITY
        return None

    hard = [c for c in own.spread if c.hard]
    rules = pod.constraints or NodeConstraints()

    def spread(n: int) -> str | None:
        with_keys = [i for i in range(len(nodes)) if all(c.topology_key in labels[i] for c in hard)]
        for c in hard:
            if c.topology_key not in labels[n]:
                return REASON_SPREAD_LABEL
            eligible = [
                i
                for i in with_keys
                if c.node_taints_policy == "Ignore" or rules.tolerates(nodes[i].taints)
            ]
            counts = {labels[i][c.topology_key]: 0 for i in eligible}
            for other, m in placed:
                if (
                    m in eligible
                    and c.selector is not None
                    and not c.selector.empty
                    and other.namespace == pod.namespace
                    and c.selector.matches(dict(other.labels))
                ):
                    counts[labels[m][c.topology_key]] += 1
            minimum = min(counts.values()) if len(counts) >= c.min_domains else 0
            own_match = c.selector is not None and c.selector.matches(dict(pod.labels))
            if counts.get(labels[n][c.topology_key], 0) + own_match - minimum > c.max_skew:
                return REASON_SPREAD
        return None

    return [{r for r in (inter_pod(n), spread(n)) if r} for n in range(len(nodes))]


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_vectorised_checks_fail_the_same_nodes_for_the_same_reasons(
    cluster: tuple[list[NodeSpec], list[tuple[PodSpec, int]], PodSpec],
) -> None:
    nodes, placed, pod = cluster
    snapshot = ClusterSnapshot(nodes)
    for other, node in placed:
        snapshot.bind(other, node)
    checks = pod_checks(snapshot, pod)
    found = [{reason for reason, passed in checks if not passed[n]} for n in range(len(nodes))]
    assert found == _reference(nodes, placed, pod)
