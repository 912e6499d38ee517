"""MPS isolation on the real node: what two tenants' shares have in common, and nothing more.

The chart with ``agent.isolation=mps`` (its default), without the MPS control daemon (it needs a
GPU): the shares get what docs/architecture.md says an MPS client needs and nothing else, the
daemon's pipe directory and its ``/dev/shm``, both the same host folders for every share; their
caps (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``) in the environment and the read-only limits file;
a whole-GPU pod of the same node mounts nothing shared and keeps its sandbox's own ``/dev/shm``.
Whether CUDA clients then reach a server through them needs a GPU, which this machine has not;
the daemon's two folders, which it makes when it starts, are made by the test in its stead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpupool.agent.isolation import MPS_PIPE_IN_CONTAINER
from gpupool.devcluster.nodens import session_path
from gpupool.kube.client.api import KubeAPI

from .chart import CHART, NAMESPACE, RELEASE, chart_values, helm
from .conftest import Cluster
from .workloads import (
    CAPACITY,
    DONE,
    SHARE,
    WHOLE,
    pod_log,
    published,
    tenants,
    workload_pod,
)

pytestmark = pytest.mark.e2e

MPS_ROOT = "/run/gpupool/mps"  # the chart's host folder of the daemon (a node path)
INSPECT = f"""
echo "shm=$(stat -c '%d:%i' /dev/shm)"
echo "pipe=$(stat -c '%d:%i' {MPS_PIPE_IN_CONTAINER} 2>/dev/null)"
env | grep -E '^CUDA_(MPS|DEVICE)_' | sed 's/^/env:/'
[ -f /etc/gpupool/limits ] && sed 's/^/limit:/' /etc/gpupool/limits
awk '{{print "mount:" $5 "=" $6}}' /proc/self/mountinfo | grep -E '=(ro|rw)' | \
    grep -E 'mount:(/dev/shm|/var/run/gpupool|/etc/gpupool)'
echo secret > /dev/shm/from-$MARK
ls /dev/shm | sed 's/.*/shmfile:&=1/'  # one key per file
{DONE}
"""


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Iterator[Cluster]:
    """The chart with MPS isolation and no daemon; uninstalled afterwards."""
    values = chart_values(cluster, {"agent.isolation": "mps"})  # mpsControlDaemon=false
    for folder in ("pipe", "shm"):  # what the daemon makes when it starts (it needs a GPU)
        (session_path(cluster.node.session, "/run/gpupool") / "mps" / folder).mkdir(
            parents=True, exist_ok=True
        )
    helm(cluster, "install", RELEASE, CHART, "-n", NAMESPACE, "--create-namespace", *values,
         "--wait", "--timeout=10m", timeout=900)  # fmt: skip
    try:
        yield cluster
    finally:
        helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=5m")


def _host_id(cluster: Cluster, folder: str) -> str:
    """``dev:inode`` of a node folder, as ``stat -c '%d:%i'`` prints it inside a container."""
    info = os.stat(session_path(cluster.node.session, "/run/gpupool") / folder)
    return f"{info.st_dev}:{info.st_ino}"


@pytest.mark.timeout(1800)
async def test_mps_shares_share_only_the_daemons_folders_and_a_whole_gpu_nothing(
    installed: Cluster, api: KubeAPI
) -> None:
    cluster = installed
    await published(api, cluster.node.name, CAPACITY)
    image = cluster.images.test_workload
    async with tenants(cluster, api, "mps-alice", "mps-bob") as made:
        [(alice_ns, alice), (bob_ns, bob)] = made
        await alice.create(
            f"/api/v1/namespaces/{alice_ns}/pods",
            workload_pod("share", image, INSPECT, SHARE, mark="mps-alice"),
        )
        seen_alice = await pod_log(alice, alice_ns, "share")
        await bob.create(
            f"/api/v1/namespaces/{bob_ns}/pods",
            workload_pod("share", image, INSPECT, SHARE, mark="mps-bob"),
        )
        await bob.create(
            f"/api/v1/namespaces/{bob_ns}/pods", workload_pod("whole", image, INSPECT, WHOLE)
        )
        seen_bob = await pod_log(bob, bob_ns, "share")
        whole = await pod_log(bob, bob_ns, "whole")
        shm, pipe = _host_id(cluster, "mps/shm"), _host_id(cluster, "mps/pipe")
        for seen in (seen_alice, seen_bob):
            # the daemon's own folders, the same for every client, and nothing else shared
            assert (seen["shm"], seen["pipe"]) == (shm, pipe), seen
            assert seen["env:CUDA_MPS_PIPE_DIRECTORY"] == MPS_PIPE_IN_CONTAINER
            assert seen["env:CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "10"
            assert seen["limit:CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "10"
            assert seen["mount:/etc/gpupool/limits"].split(",")[0] == "ro"
            assert not any(key.startswith("env:CUDA_DEVICE_") for key in seen)  # no HAMi caps
        # what MPS requires is shared, so bob's share sees the file alice's wrote: documented
        assert "shmfile:from-mps-alice" in seen_bob
        # a whole GPU on the same node: its sandbox's own /dev/shm, no MPS folder, no caps
        assert whole["shm"] != shm
        assert not whole["pipe"]
        assert "shmfile:from-mps-alice" not in whole
        assert not any(key.startswith(("env:", "limit:")) for key in whole)
