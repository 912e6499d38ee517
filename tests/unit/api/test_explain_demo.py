"""``gpupool explain`` on the demo names only nodes the scheduler could place the pod on.

The demo's embedded cluster (three pools: h100-exclusive on the H100 nodes, a100-shared on four
A100 nodes, a100-mig on two A100 nodes cut into MIG slices) runs as ``gpupool demo`` runs it;
explain is asked, through the demo's API, about pending pods of each pool. Every node it lists
as a candidate, and every node it counts as able to hold the pod when empty, is in the pod's
pool: before, a pod of h100-exclusive was shown A100 nodes with "0% to free" and "8 of 10 nodes
could hold it when empty", contradicting its own pending reason.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from gpupool.api.app import create_api
from gpupool.api.embedded import DemoView
from gpupool.core.model import PodSpec, RequestKind
from gpupool.policy.workload import Workload
from gpupool.sim.demo.embedded import Submission
from gpupool.sim.demo.session import DemoSession
from gpupool.sim.demo.workload import POOL_LABEL, demo_nodes

POOL_NODES = {
    pool: {n.name for n in demo_nodes() if dict(n.labels)[POOL_LABEL] == group}
    for pool, group in (
        ("h100-exclusive", "exclusive"),
        ("a100-shared", "shared"),
        ("a100-mig", "mig"),
    )
}
POOL_OF_KIND = {
    RequestKind.WHOLE: "h100-exclusive",
    RequestKind.SHARE: "a100-shared",
    RequestKind.MIG: "a100-mig",
}
"""Where configs/demo.yaml sends each request kind (one pool per mode)."""
WIDE_SHARE = "serving/inference-wide"
"""A share of 90% of each of 8 GPUs: only an emptied A100 node of the shared pool holds it."""
BIG_SLICES = 5
"""3g.40gb notebooks submitted at once: the two MIG nodes have four such slices."""


@pytest.fixture(scope="module")
def session() -> DemoSession:
    demo = DemoSession(seed=0)
    with demo.locked() as cluster:
        pod = PodSpec(WIDE_SHARE, 4000, 16_384, gpu_count=8, gpu_milli=900, gpu_memory_mib=10_240)
        workload = Workload(pod, namespace="serving", workload_class="inference")
        cluster.submit(Submission(workload, duration=3600.0))
        for i in range(BIG_SLICES):
            slice_pod = PodSpec(f"research/dev-big-{i}", 2000, 8192, mig_profile="3g.40gb")
            notebook = Workload(slice_pod, namespace="research", workload_class="dev")
            cluster.submit(Submission(notebook, duration=7200.0))
    demo.advance(600.0)
    return demo


@pytest.fixture(scope="module")
def client(session: DemoSession) -> Iterator[TestClient]:
    with TestClient(create_api(DemoView(session))) as test_client:
        yield test_client


def _explained(client: TestClient, pod: str) -> tuple[int, set[str]]:
    answer = client.get(f"/api/v1/pending/{pod}")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return body["nodes_could_fit"], {c["node"] for c in body["closest"]}


def test_explain_names_no_node_outside_the_pods_pool(
    session: DemoSession, client: TestClient
) -> None:
    with session.locked() as cluster:
        pending = {name: w.pod.kind for name, w in cluster.pending.items()}
    assert WIDE_SHARE in pending
    asked: dict[str, int] = {}
    for pod, kind in sorted(pending.items()):
        pool = POOL_OF_KIND[kind]
        could_fit, closest = _explained(client, pod)
        assert closest <= POOL_NODES[pool], (pod, closest)
        assert 0 < could_fit <= len(POOL_NODES[pool]), (pod, could_fit)
        asked[pool] = asked.get(pool, 0) + 1
    assert set(asked) == set(POOL_NODES), asked  # pods of every pool were explained


def test_a_whole_gpu_pod_could_fit_on_exactly_the_h100_nodes(
    session: DemoSession, client: TestClient
) -> None:
    with session.locked() as cluster:
        vision = next(n for n, w in cluster.pending.items() if w.namespace == "vision")
    could_fit, closest = _explained(client, vision)
    assert could_fit == len(POOL_NODES["h100-exclusive"])
    assert closest
    assert all(node.startswith("h100-") for node in closest)


def test_the_wide_share_is_explained_on_the_shared_nodes_only(client: TestClient) -> None:
    could_fit, closest = _explained(client, WIDE_SHARE)
    assert could_fit == len(POOL_NODES["a100-shared"])
    assert closest
    assert closest <= POOL_NODES["a100-shared"]
