"""A node whose agent refuses a kind of hand-off stops attracting that kind of pod.

The agent's record of what it refused (agent.refusals), its encoding on the Node and the
scheduler's reading of it (kube.objects.handoff_refusals, translate.node_spec) are driven end to
end here: what the agent writes is what keeps the scheduler's share pods off the node.
"""

from __future__ import annotations

import pytest

from gpupool.agent.grants import ContainerGrant, GpuGrant
from gpupool.agent.refusals import RETRY_AFTER_SECONDS, NodeRefusals
from gpupool.core.filtering import REASON_REFUSED, filter_nodes, fits_on_node
from gpupool.core.model import PodSpec, RequestKind
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.kube.objects.handoff_refusals import encode
from gpupool.kube.objects.translate import InvalidObjectError, node_spec
from gpupool.kube.objects.vocabulary import ANNOTATION_HANDOFF_REFUSED

from .kube.builders import decode_node, node_dict

SHARE = ContainerGrant("u1", "ns", "p", "main", (GpuGrant("GPU-1", 1, 300, 4096, False),))
WHOLE = ContainerGrant("u2", "ns", "q", "main", (GpuGrant("GPU-2", 2),))
MIG = ContainerGrant("u3", "ns", "r", "main", (GpuGrant("MIG-7", 0),))


def _nodes(refused: str | None) -> ClusterSnapshot:
    raw = node_dict("n0", gpus=2)
    if refused is not None:
        raw["metadata"].setdefault("annotations", {})[ANNOTATION_HANDOFF_REFUSED] = refused
    return ClusterSnapshot(
        [node_spec(decode_node(raw)), node_spec(decode_node(node_dict("n1", gpus=2)))]
    )


def test_what_the_agent_refused_keeps_that_kind_off_the_node_and_nothing_else() -> None:
    now = [1000.0]
    refusals = NodeRefusals(lambda: now[0])
    refusals.refused(SHARE, "GPU GPU-1 would be oversubscribed")
    snapshot = _nodes(encode(refusals.current()))
    share = PodSpec("s", 100, 100, 1, 300, 4096)
    result = filter_nodes(snapshot, share)
    assert result.mask.tolist() == [False, True]
    assert (REASON_REFUSED, 1) in result.reasons()
    assert not fits_on_node(snapshot, share, 0)
    whole = PodSpec("w", 100, 100, 1, 1000)
    assert filter_nodes(snapshot, whole).mask.tolist() == [True, True]


def test_a_start_of_the_kind_or_the_retry_time_lifts_the_refusal() -> None:
    now = [1000.0]
    refusals = NodeRefusals(lambda: now[0])
    refusals.refused(SHARE, "full")
    refusals.refused(WHOLE, "full")
    refusals.started(SHARE)
    assert set(refusals.current()) == {RequestKind.WHOLE}
    now[0] += RETRY_AFTER_SECONDS
    assert refusals.current() == {}
    assert encode(refusals.current()) is None  # the annotation is removed


def test_mig_slices_are_not_refused_by_kind() -> None:
    refusals = NodeRefusals(lambda: 0.0)
    refusals.refused(MIG, "full")
    assert refusals.current() == {}


def test_a_node_without_refusals_adds_no_check() -> None:
    snapshot = _nodes(None)
    assert snapshot.refused == {}
    names = [name for name, _ in filter_nodes(snapshot, PodSpec("s", 1, 1, 1, 300)).checks]
    assert REASON_REFUSED not in names


def test_a_malformed_refusal_annotation_is_named() -> None:
    with pytest.raises(InvalidObjectError) as refused:
        _nodes("not json")
    assert refused.value.field == f"metadata.annotations[{ANNOTATION_HANDOFF_REFUSED}]"
