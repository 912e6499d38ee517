"""The read model over the example cluster: every number follows from the snapshot."""

from __future__ import annotations

import pytest

from gpupool.api import view
from gpupool.api.example import NODES, PLACED, WAITING, example_view
from gpupool.api.explain import NotPendingError, explain
from gpupool.api.sources import SnapshotView
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.wait_cause import WaitCause, WaitKind


def test_nodes_list_every_gpu_with_its_shares() -> None:
    nodes = view.nodes(example_view())
    assert [n.name for n in nodes] == [n.name for n in NODES]
    assert sum(len(n.gpus) for n in nodes) == 10
    shares = [(n.name, g.index, s.pod) for n in nodes for g in n.gpus for s in g.shares]
    assert len(shares) == 8
    assert ("a100-1", 2, "nlp/finetune-0") in shares
    assert ("a100-1", 2, "nlp/finetune-1") in shares
    gpu = nodes[0].gpus[2]
    assert gpu.used_milli == 1000
    assert gpu.used_memory_mib == 2 * 40960
    assert gpu.uuid == "GPU-a100-1-0002"
    whole = nodes[0].gpus[0].shares[0]
    assert (whole.kind, whole.milli, whole.memory_mib) == ("whole", 1000, 81920)
    assert whole.team == "vision"


def test_cluster_summary_counts() -> None:
    summary = view.cluster(example_view())
    assert summary.nodes == 3
    assert summary.gpus == 10
    assert summary.gpu_milli_used == sum(p.total_gpu_milli for p, _, _ in PLACED)
    assert summary.capacity_units == 10.0
    assert summary.idle_gpus == 4
    assert summary.allocated_pods == len(PLACED)
    assert summary.pending_pods == len(WAITING)
    assert summary.pending_by_reason == {"insufficient_resources": 2}


def test_pending_in_order_with_reasons() -> None:
    pending = view.pending(example_view())
    assert [p.pod for p in pending] == [spec.name for spec, _ in WAITING]
    assert [p.position for p in pending] == [1, 2]
    assert pending[0].reason.startswith("0/3 nodes are available")
    assert pending[1].kind == "share"


def test_teams_add_up_to_the_cluster() -> None:
    teams = {t.name: t for t in view.teams(example_view())}
    assert set(teams) == {"vision", "nlp", "research"}
    assert teams["vision"].used_units == 2.5  # two whole GPUs and half a T4
    # nlp: two finetunes of 50% compute and 40 GiB of 80 (0.5 each), a serve of 30% and 20 GiB
    assert teams["nlp"].used_units == pytest.approx(1.3)
    assert teams["vision"].pending == 1
    total = sum(t.used_units for t in teams.values())
    assert total == pytest.approx(view.cluster(example_view()).allocated_units)


def test_empty_view_is_all_zero() -> None:
    empty = SnapshotView(None)
    assert view.nodes(empty) == []
    summary = view.cluster(empty)
    assert (summary.nodes, summary.gpus, summary.pending_pods) == (0, 0, 0)


def test_explain_names_the_closest_node_and_who_holds_it() -> None:
    answer = explain(example_view(), "vision/train-1")
    assert answer.pending.position == 1
    assert answer.nodes_could_fit == 2  # the A100 nodes; the T4 node has two GPUs only
    best = answer.closest[0]
    assert best.node == "a100-2"
    assert best.milli_short == 800  # notebooks 2 x 250 on GPU 0, serve 300 on GPU 1
    assert best.holders == ["nlp/serve-0", "research/notebook-0", "research/notebook-1"]


def test_explain_a_pod_no_node_can_ever_hold() -> None:
    answer = explain(example_view(), "research/big-notebook")
    assert answer.nodes_could_fit == 0
    assert answer.closest == []


def test_explain_unknown_pod() -> None:
    with pytest.raises(NotPendingError, match="nobody/nothing"):
        explain(example_view(), "nobody/nothing")


def test_views_never_change_the_snapshot() -> None:
    snapshot = ClusterSnapshot([NodeSpec("n", 1000, 1000, gpu_count=1, gpu_model="T4")])
    snapshot.bind(PodSpec("a/p", 100, 100, 1, 500), 0, (0,))
    why = WaitCause(WaitKind.RESOURCES, "0/1 nodes are available: 1 Insufficient")
    waiting = [(PodSpec("a/q", 100, 100, 1, 800), why)]
    source = SnapshotView(snapshot, waiting)
    before = (snapshot.gpu_free.copy(), dict(snapshot.allocations), snapshot.node_gen.copy())
    view.nodes(source)
    view.cluster(source)
    view.teams(source)
    explain(source, "a/q")
    assert (snapshot.gpu_free == before[0]).all()
    assert snapshot.allocations == before[1]
    assert (snapshot.node_gen == before[2]).all()
