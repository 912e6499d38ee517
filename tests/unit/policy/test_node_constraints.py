"""The engine applies a pod's node constraints everywhere: placement, victim search, reservation.

Each preemption row is built so that the cheapest victims sit on a node the preemptor may not
use: without the check the engine would evict there (the ``unconstrained`` column, checked
too), with it the engine must evict on the node the pod's selector, affinity, toleration or
allowed models let it use, or not preempt at all.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.core.constraints import NodeConstraints, Requirement, SelectorTerm, Taint, Toleration
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.policy.spec import PolicyConfig, PoolMode, PoolSpec
from gpupool.policy.workload import Workload
from gpupool.scheduling.decisions import Admit, Preempt, Wait

from .builders import Cluster, node, queue, whole, work

POOL = PoolSpec("p", PoolMode.EXCLUSIVE)
DEDICATED = Taint("dedicated", "infer", "NoSchedule")
TOLERATES = (Toleration("dedicated", "Exists"),)


def _nodes(taint_n1: Taint | None = None, model_n0: str = "A100") -> list[NodeSpec]:
    """n0 (zone a) runs an old pod, n1 (zone b) a young one: evicting on n1 loses least."""
    n0 = replace(node("n0", gpus=1, model=model_n0), labels=(("zone", "a"),))
    n1 = replace(node("n1", gpus=1), labels=(("zone", "b"),))
    if taint_n1 is not None:
        n1 = replace(n1, taints=(taint_n1,))
    return [n0, n1]


def _running(nodes: list[NodeSpec]) -> Cluster:
    cluster = Cluster(nodes, PolicyConfig((POOL,), (queue("q", "p"),)))
    for name, zone, at in (("old", "a", 0.0), ("young", "b", 50.0)):
        # the running pods tolerate everything and pin themselves to their zone
        constraints = NodeConstraints.of(
            {"zone": zone}, tolerations=(Toleration(operator="Exists"),)
        )
        pod = replace(whole(name), constraints=constraints)
        (decision,) = cluster.cycle([work(pod, "q")], at).decisions
        assert isinstance(decision, Admit), decision
        cluster.start(decision, at)
    return cluster


def _urgent(
    constraints: NodeConstraints | None = None, models: frozenset[str] = frozenset()
) -> Workload:
    pod = replace(whole("urgent"), constraints=constraints, gpu_models=models)
    return work(pod, "q", priority=5)


ZONE_A_TERM = SelectorTerm((Requirement("zone", "NotIn", ("b",)),))


@pytest.mark.parametrize(
    ("nodes", "preemptor", "expected", "unconstrained"),
    [
        pytest.param(
            _nodes(), _urgent(NodeConstraints.of({"zone": "a"})), ("n0", ("old",)), "n1",
            id="node-selector",
        ),
        pytest.param(
            _nodes(), _urgent(NodeConstraints.of(affinity=(ZONE_A_TERM,))), ("n0", ("old",)), "n1",
            id="required-affinity",
        ),
        pytest.param(
            _nodes(DEDICATED), _urgent(), ("n0", ("old",)), "n1",
            id="untolerated-taint",
        ),
        pytest.param(
            _nodes(Taint("dedicated", "infer", "NoExecute")), _urgent(), ("n0", ("old",)), "n1",
            id="untolerated-noexecute-taint",
        ),
        pytest.param(
            _nodes(DEDICATED), _urgent(NodeConstraints.of(tolerations=TOLERATES)),
            ("n1", ("young",)), "n1",
            id="toleration-allows-the-cheaper-node",
        ),
        pytest.param(
            _nodes(Taint("dedicated", "infer", "PreferNoSchedule")), _urgent(),
            ("n1", ("young",)), "n1",
            id="prefer-no-schedule-keeps-nobody-off",
        ),
        pytest.param(
            _nodes(model_n0="H100"), _urgent(models=frozenset({"H100"})), ("n0", ("old",)), "n1",
            id="allowed-model",
        ),
        pytest.param(
            _nodes(), _urgent(NodeConstraints.of({"zone": "c"})), None, "n1",
            id="no-node-allowed-no-preemption",
        ),
    ],
)  # fmt: skip
def test_preemption_chooses_a_node_the_preemptors_constraints_allow(
    nodes: list[NodeSpec],
    preemptor: Workload,
    expected: tuple[str, tuple[str, ...]] | None,
    unconstrained: str,
) -> None:
    (decision,) = _running(nodes).cycle([preemptor], 100.0).decisions
    if expected is None:
        assert isinstance(decision, Wait), decision
        assert "didn't match Pod's node affinity/selector" in decision.reason
    else:
        assert isinstance(decision, Preempt), decision
        assert (decision.node_name, decision.victims) == expected
    # the same pod without its constraints (any model, tolerating nothing new) goes elsewhere
    plain = replace(preemptor, pod=replace(preemptor.pod, constraints=None, gpu_models=frozenset()))
    (free,) = _running(_nodes()).cycle([plain], 100.0).decisions
    assert isinstance(free, Preempt)
    assert free.node_name == unconstrained


def test_forbidden_nodes_with_cheaper_victims_do_not_use_up_the_search() -> None:
    """Nine nodes of cheap victims the pod may not use are ranked first; the tenth is found."""
    nodes = [replace(node(f"n{i}", gpus=1), labels=(("zone", "b"),)) for i in range(9)]
    nodes.append(replace(node("n9", gpus=1), labels=(("zone", "a"),)))
    cluster = Cluster(nodes, PolicyConfig((POOL,), (queue("q", "p"),)))
    for i, spec in enumerate(nodes):
        zone = dict(spec.labels)["zone"]
        pod = replace(whole(f"r{i}"), constraints=NodeConstraints.of({"zone": zone}))
        at = 0.0 if zone == "a" else 90.0  # the pods on zone b nodes are young: cheap
        (decision,) = cluster.cycle([work(pod, "q")], at).decisions
        assert isinstance(decision, Admit)
        cluster.start(decision, at)
    (decision,) = cluster.cycle([_urgent(NodeConstraints.of({"zone": "a"}))], 100.0).decisions
    assert isinstance(decision, Preempt), decision
    assert (decision.node_name, decision.victims) == ("n9", ("r9",))


def test_the_reservation_of_a_blocked_pod_is_on_a_node_it_may_use() -> None:
    """n1 frees first, but the blocked head's selector wants n0: it is reserved there."""
    nodes = [
        replace(node("n0", gpus=2), labels=(("zone", "a"),)),
        replace(node("n1", gpus=2), labels=(("zone", "b"),)),
    ]
    cluster = Cluster(nodes, PolicyConfig((POOL,), (queue("q", "p"),)))
    for name, zone, runtime in (("long", "a", 1000.0), ("short", "b", 100.0)):
        pod = replace(whole(name), constraints=NodeConstraints.of({"zone": zone}))
        (decision,) = cluster.cycle([work(pod, "q", runtime=runtime)]).decisions
        assert isinstance(decision, Admit)
        cluster.start(decision)
    head = work(replace(whole("head", 2), constraints=NodeConstraints.of({"zone": "a"})), "q")
    small = work(PodSpec("small", 1000, 1024, gpu_count=1, gpu_milli=1000), "q", created_at=1.0,
                 runtime=5000.0)  # fmt: skip
    result = cluster.cycle([head, small], 1.0)
    ((reservation,),) = result.reservations.values()
    assert (reservation.pod, nodes[reservation.node].name, reservation.start_at) == (
        "head",
        "n0",
        1000.0,
    )
    by_name = {d.workload.name: d for d in result.decisions}
    # the long small pod may not take n0's free GPU (it would delay the head) but may take n1's
    assert isinstance(by_name["small"], Admit)
    assert by_name["small"].bind.node_name == "n1"


def test_a_failed_request_does_not_stop_one_that_may_use_other_nodes() -> None:
    """Same shape, other constraints: the no-smaller skip must not hide a node it can use."""
    nodes = [
        replace(node("n0", gpus=1), labels=(("zone", "a"),)),
        replace(node("n1", gpus=1), labels=(("zone", "b"),)),
    ]
    cluster = Cluster(nodes, PolicyConfig((POOL,), (queue("q", "p"),)))
    busy = replace(whole("busy"), constraints=NodeConstraints.of({"zone": "a"}))
    (decision,) = cluster.cycle([work(busy, "q")]).decisions
    assert isinstance(decision, Admit)
    cluster.start(decision)
    pinned = work(replace(whole("pinned"), constraints=NodeConstraints.of({"zone": "a"})), "q")
    free = work(whole("free"), "q", created_at=1.0)
    result = cluster.cycle([pinned, free], 2.0)
    by_name = {d.workload.name: d for d in result.decisions}
    assert isinstance(by_name["pinned"], Wait)
    assert isinstance(by_name["free"], Admit)
    assert by_name["free"].bind.node_name == "n1"
