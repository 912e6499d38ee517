"""The simulator's contention: what the demo's agents would publish for shared GPUs."""

from __future__ import annotations

from starlette.testclient import TestClient

from gpupool.api.app import create_api
from gpupool.api.embedded import DemoView
from gpupool.core.contention import ContentionLevel
from gpupool.core.model import NodeSpec, PodSpec
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.sim.demo.contention import simulated_contention
from gpupool.sim.demo.session import DemoSession


def _share(name: str, milli: int) -> PodSpec:
    return PodSpec(name, 1000, 1000, gpu_count=1, gpu_milli=milli, gpu_memory_mib=1024)


def test_busy_shares_of_one_gpu_contend_and_a_lone_share_does_not() -> None:
    snapshot = ClusterSnapshot([NodeSpec("n", 64000, 512000, 2, "A100", 81920)])
    for pod, gpu in (("a/serve", 0), ("a/train", 0), ("a/alone", 1)):
        snapshot.bind(_share(pod, 500), 0, (gpu,))
    usage = {"a/serve": 30.0, "a/train": 90.0, "a/alone": 95.0}
    classes = {"a/serve": "inference", "a/train": "training"}
    (gpu,) = simulated_contention(snapshot, usage, classes)
    assert (gpu.node, gpu.gpu, gpu.level) == ("n", 0, ContentionLevel.HIGH)
    # 30 + 90 ask for 120 %: serve is measured at 25 % of its 50 % cap, 2x slower
    assert [(s.pod, s.workload_class, s.slowdown) for s in gpu.shares] == [
        ("a/serve", "inference", 2.0),
        ("a/train", "training", 1.0),
    ]
    quiet = {"a/serve": 20.0, "a/train": 30.0}
    assert simulated_contention(snapshot, quiet, classes) == []


def test_the_demo_shows_contention_so_its_panel_is_not_empty() -> None:
    demo = DemoSession(seed=0)
    with TestClient(create_api(DemoView(demo))) as client:
        body = client.get("/api/v1/contention").json()
    assert body["gpus"], "the demo's shared GPUs show no contention"
    assert abs(sum(body["class_share"].values()) - 1) < 1e-3
