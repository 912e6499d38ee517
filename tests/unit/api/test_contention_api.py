"""Contention in the REST API, the dashboard and the control plane's view of the agents' signals."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import msgspec
import pytest
from starlette.testclient import TestClient

from gpupool.api.app import create_api
from gpupool.api.example import example_view
from gpupool.core.contention import ContentionLevel
from gpupool.kube.objects.records import NodeRecord, PodRecord
from gpupool.kube.objects.timestamps import format_time
from gpupool.kube.scheduler.contention_view import contended_gpus
from gpupool.policy.spec import QueueSpec

UID = "11111111-2222-4333-8444-555555555555"


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_api(example_view())) as test_client:
        yield test_client


def test_the_api_lists_contended_gpus_their_slowed_shares_and_each_class_part(
    client: TestClient,
) -> None:
    body = client.get("/api/v1/contention").json()
    high, low = body["gpus"]
    assert (high["node"], high["gpu"], high["level"], high["uuid"]) == (
        "a100-1",
        2,
        "high",
        "GPU-a100-1-0002",
    )
    assert high["shares"][0] == {
        "pod": "nlp/finetune-0",
        "workload_class": "training",
        "slowdown": 2.5,
    }
    assert "SM saturated" in high["reasons"][0]
    assert (low["level"], low["reasons"]) == ("low", ["throttled: power cap"])
    assert body["class_share"] == {"dev": 0.5, "training": 0.5}


def test_the_dashboard_panel_shows_the_contended_gpus(client: TestClient) -> None:
    html = client.get("/ui/live").text
    assert 'data-gpu="a100-1/2" data-level="high"' in html
    assert 'data-pod="nlp/finetune-0" data-slowdown="2.5"' in html
    assert "memory bandwidth saturated (96%)" in html


def _node(name: str, annotations: dict[str, str]) -> NodeRecord:
    return msgspec.convert({"metadata": {"name": name, "annotations": annotations}}, NodeRecord)


def _signal(sampled_at: float, gpus: dict[str, object]) -> dict[str, str]:
    value = {"sampledAt": format_time(sampled_at), "periodSeconds": 60, "gpus": gpus}
    return {"gpupool.io/gpu-contention": json.dumps(value)}


def test_live_view_joins_pods_and_drops_stale_or_unreadable_signals() -> None:
    now = time.time()
    entry = {"level": "high", "score": 0.7, "reasons": ["r"], "pods": {UID: 3.0, "gone": 1.2}}
    pod = msgspec.convert(
        {
            "metadata": {
                "name": "serve",
                "namespace": "ml",
                "uid": UID,
                "labels": {"gpupool.io/class": "inference"},
            }
        },
        PodRecord,
    )
    nodes = [
        _node("fresh", _signal(now - 30, {"1": entry})),
        _node("stale", _signal(now - 3600, {"0": entry})),  # its agent stopped publishing
        _node("garbled", {"gpupool.io/gpu-contention": '{"gpus": 3}'}),
        _node("quiet", _signal(now, {})),
    ]
    found = contended_gpus(
        nodes, {UID: pod}, [QueueSpec("ml", frozenset({"ml"}))], {"fresh": ("GPU-a", "GPU-b")}, now
    )
    assert [(g.node, g.gpu, g.gpu_uuid, g.level) for g in found] == [
        ("fresh", 1, "GPU-b", ContentionLevel.HIGH)
    ]
    assert [(s.pod, s.workload_class, s.slowdown) for s in found[0].shares] == [
        ("gone", "", 1.2),  # a pod the scheduler does not know: its UID
        ("ml/serve", "inference", 3.0),
    ]
