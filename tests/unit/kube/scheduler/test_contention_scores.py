"""Placement reads ``gpupool.io/gpu-contention``: scores per GPU, rebuilds only on a change."""

from __future__ import annotations

import json

import msgspec

from gpupool.devcluster.fakenodes import FakeGpuNode
from gpupool.kube.objects.records import NodeRecord
from gpupool.kube.objects.translate import node_spec
from gpupool.kube.scheduler.node_signature import node_signature


def _node(contention: object) -> NodeRecord:
    manifest = FakeGpuNode("n", gpus=4).manifest()
    if contention is not None:
        value = contention if isinstance(contention, str) else json.dumps(contention)
        manifest["metadata"]["annotations"]["gpupool.io/gpu-contention"] = value
    return msgspec.convert(manifest, NodeRecord)


def _signal(sampled_at: str, **scores: float) -> dict[str, object]:
    gpus = {index[1:]: {"level": "high", "score": score} for index, score in scores.items()}
    return {"sampledAt": sampled_at, "gpus": gpus}


def test_published_scores_reach_the_node_spec_by_gpu_index() -> None:
    assert node_spec(_node(_signal("t", g2=0.734))).gpu_contention == (0.0, 0.0, 0.73, 0.0)
    assert node_spec(_node(_signal("t", g9=0.9))).gpu_contention == ()  # no GPU 9 here
    assert node_spec(_node(None)).gpu_contention == ()
    assert node_spec(_node("{not json")).gpu_contention == ()  # logged, placed without it


def test_a_republication_rebuilds_the_node_only_when_its_scores_move() -> None:
    before = node_signature(_node(_signal("2026-12-06T10:00:00Z", g0=0.601)))
    same = node_signature(_node(_signal("2026-12-06T10:01:00Z", g0=0.603)))
    moved = node_signature(_node(_signal("2026-12-06T10:02:00Z", g0=0.65)))
    assert same == before
    assert moved != before
