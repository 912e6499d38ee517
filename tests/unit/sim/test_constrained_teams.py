"""A simulated cluster whose teams carry node selectors and tolerations, under the real workload.

The workload process gives every pod of ``nlp`` a node selector (zone a) and every pod of
``vision`` a toleration of the taint that reserves node n3 for it; the embedded simulated
cluster runs the policy engine over four hours of arrivals at 1.5 times its capacity, with
urgent pods preempting inside their team. No pod ever runs, or preempts, on a node its
constraints exclude, and constrained pods do preempt (on the nodes they may use).
"""

from __future__ import annotations

import numpy as np

from gpupool.core.constraints import NodeConstraints, Taint, Toleration
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.policy.spec import PolicyConfig, QueueSpec
from gpupool.sim.demo.embedded import EmbeddedCluster, Submission
from gpupool.sim.dynamic.workload_process import ArrivalProcess

RESERVED = Taint("dedicated", "vision", "NoSchedule")
TEAMS = {
    "nlp": NodeConstraints.of({"zone": "a"}),
    "vision": NodeConstraints.of(tolerations=(Toleration("dedicated", "Equal", "vision"),)),
}
ZONE_A = {"n0", "n1"}
STEP = 30.0


def _nodes() -> list[NodeSpec]:
    return [
        NodeSpec(
            f"n{i}", 64_000, 512_000, 4, "A100", 40_960,
            labels=(("zone", "a" if i < 2 else "b"),),
            taints=(RESERVED,) if i == 3 else (),
        )
        for i in range(4)
    ]  # fmt: skip


SHAPES = [
    PodSpec("whole1", 1000, 1024, gpu_count=1, gpu_milli=1000),
    PodSpec("whole2", 1000, 1024, gpu_count=2, gpu_milli=1000),
    PodSpec("serving", 1000, 1024, gpu_count=1, gpu_milli=600),
    PodSpec("research", 1000, 1024, gpu_count=1, gpu_milli=200),
]


def test_constrained_teams_run_and_preempt_only_where_their_constraints_allow() -> None:
    teams = ("vision", "nlp", "serving", "research")
    config = PolicyConfig(queues=tuple(QueueSpec(t, frozenset({t})) for t in teams))
    cluster = EmbeddedCluster(_nodes(), config, seed=3)
    process = ArrivalProcess(SHAPES, 16, 1.5, np.random.default_rng(3), TEAMS)
    team_of: dict[str, str] = {}
    placed: dict[str, set[str]] = {}
    preempted_on: dict[str, set[str]] = {}
    arrival = process.next()
    for step in range(1, int(4 * 3600 / STEP) + 1):
        while arrival.at <= step * STEP:
            team_of[arrival.workload.name] = arrival.workload.namespace
            cluster.submit(Submission(arrival.workload, arrival.duration))
            arrival = process.next()
        cluster.advance(STEP)
        for name, record in cluster.running.items():
            placed.setdefault(name, set()).add(cluster.snapshot.node_names[record.node])
        for event in cluster.events:
            if event.action == "preempt":  # detail: "<rule> for <preemptor> on <node>"
                preemptor, _, node = event.detail.split(" for ", 1)[1].partition(" on ")
                preempted_on.setdefault(preemptor, set()).add(node)
    by_team: dict[str, set[str]] = {}
    for name, nodes in placed.items():
        by_team.setdefault(team_of[name], set()).update(nodes)
    assert by_team["nlp"] <= ZONE_A
    assert all("n3" not in nodes for team, nodes in by_team.items() if team != "vision")
    assert "n3" in by_team["vision"]  # the toleration lets vision use the node reserved for it
    for team in ("nlp", "vision"):
        preemptors = [name for name in preempted_on if team_of[name] == team]
        assert preemptors, f"no {team} pod preempted: the run shows nothing about its checks"
    for preemptor, nodes in preempted_on.items():
        team = team_of[preemptor]
        if team == "nlp":
            assert nodes <= ZONE_A
        if team != "vision":
            assert "n3" not in nodes
    assert cluster.preemptions > 0
