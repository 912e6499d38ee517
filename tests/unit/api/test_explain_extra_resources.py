"""The simulator takes a pod asking for a resource its nodes lack, and explain says so.

A pod asking ``example.com/rdma`` in the demo cluster (whose nodes offer none) stays pending
with kube-scheduler's reason, and ``explain`` counts no node that could ever hold it, rather
than pointing at GPUs to free that would not help.
"""

from __future__ import annotations

from starlette.testclient import TestClient

from gpupool.api.app import create_api
from gpupool.api.embedded import DemoView
from gpupool.core.model import PodSpec
from gpupool.policy.workload import Workload
from gpupool.sim.demo.embedded import Submission
from gpupool.sim.demo.session import DemoSession

RDMA_POD = "vision/train-rdma"


def test_a_pod_asking_for_an_unoffered_resource_waits_and_is_explained() -> None:
    demo = DemoSession(seed=0, warm_hours=0.0)
    with demo.locked() as cluster:
        pod = PodSpec(
            RDMA_POD, 1000, 1024, gpu_count=1, gpu_milli=1000,
            extra_resources=(("example.com/rdma", 1),),
        )  # fmt: skip
        cluster.submit(
            Submission(Workload(pod, namespace="vision", workload_class="training"), duration=600.0)
        )
    demo.advance(60.0)
    with demo.locked() as cluster:
        assert RDMA_POD in cluster.pending
        cause = cluster.causes[RDMA_POD]
        assert cause is not None
        assert "Insufficient example.com/rdma" in cause.text()
    with TestClient(create_api(DemoView(demo))) as client:
        answer = client.get(f"/api/v1/pending/{RDMA_POD}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["nodes_could_fit"] == 0
    assert answer.json()["closest"] == []
