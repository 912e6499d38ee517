"""Tenants' GPU pods on the real node, with the chart installed as a platform team would.

No GPUPool object exists (out of the box: every node is in the default pool); the agent runs on
the fake NVML (8 H100s), whose device tree gives each GPU a real character device, and isolates
shares with HAMi-core (``agent.isolation=hami``; the library itself needs a GPU, so the node has
a stand-in file at the path the chart names). Tenants are users with their own client
certificates and the built-in ``edit`` role in their namespace, never administrators. What a
container sees is read from its log, as a tenant would with ``kubectl logs``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gpupool.agent.cdi import spec_path
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.objects.vocabulary import RESOURCE_GPU

from .chart import installed_with_hami
from .conftest import Cluster, wait_for
from .workloads import (
    CAPACITY,
    CONTROL_NODES,
    DONE,
    INSPECT,
    SHARE,
    WHOLE,
    devices_in,
    env_in,
    expected_gpus,
    failed_admission,
    host_device,
    list_pods,
    pending_reason,
    pod_log,
    published,
    tenants,
    workload_pod,
)

pytestmark = pytest.mark.e2e

UNSET_ALL = """
for v in $(/bin/env | /bin/sed 's/=.*//'); do unset "$v"; done
echo "left=$(/bin/env | /bin/wc -l)"
echo "preload=$(/bin/cat /etc/ld.so.preload)"
/bin/sed 's/^/limit:/' /etc/gpupool/limits
if (echo x > /etc/ld.so.preload) 2>/dev/null; then echo write=allowed; else echo write=refused; fi
if /bin/umount /etc/ld.so.preload 2>/dev/null; then echo umount=allowed
else echo umount=refused; fi
/bin/rm -f /etc/ld.so.preload 2>/dev/null; [ -e /etc/ld.so.preload ] && echo after_rm=still-there
"""
SHM = """
echo "shm=$(stat -c '%d:%i' /dev/shm)"
ls /dev/shm | sed 's/.*/shmfile:&=1/'  # one key per file
echo secret > /dev/shm/from-$MARK
"""


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Iterator[Cluster]:
    yield from installed_with_hami(cluster)


@pytest.mark.timeout(3600)  # the install, then 32 containers started on a loaded machine
async def test_out_of_the_box_every_bound_share_runs_and_the_next_pends(
    installed: Cluster, api: KubeAPI
) -> None:
    cluster = installed
    capacity = CAPACITY
    await published(api, cluster.node.name, capacity)
    image = cluster.images.test_workload
    async with tenants(cluster, api, "alice") as made:
        [(namespace, tenant)] = made
        for i in range(capacity):
            await tenant.create(
                f"/api/v1/namespaces/{namespace}/pods",
                workload_pod(f"share-{i:02}", image, DONE, SHARE),
            )

        async def all_running() -> bool:
            pods = await list_pods(tenant, namespace)
            assert not failed_admission(pods), failed_admission(pods)
            return sum(pod["status"].get("phase") == "Running" for pod in pods) == capacity

        await wait_for(all_running, 1800, f"{capacity} share pods Running")
        pods = await list_pods(tenant, namespace)
        assert all(pod["spec"]["nodeName"] == cluster.node.name for pod in pods)
        assert all(pod["spec"]["schedulerName"] == "gpupool" for pod in pods)
        # the GPUs are full: the next share pends, and the scheduler says why
        await tenant.create(
            f"/api/v1/namespaces/{namespace}/pods", workload_pod("one-more", image, DONE, SHARE)
        )
        condition = await pending_reason(tenant, namespace, "one-more")
        assert condition["reason"] == "Unschedulable"
        assert f"Insufficient {RESOURCE_GPU}" in condition["message"], condition
        pending = await tenant.get(f"/api/v1/namespaces/{namespace}/pods/one-more")
        assert not pending["spec"].get("nodeName")
        # and nothing that was bound failed admission meanwhile
        assert not failed_admission(await list_pods(tenant, namespace))


@pytest.mark.timeout(1800)
async def test_each_container_sees_exactly_its_gpus_with_the_pools_caps(
    installed: Cluster, api: KubeAPI
) -> None:
    cluster = installed
    await published(api, cluster.node.name, CAPACITY)
    image = cluster.images.test_workload
    script = f"{INSPECT}\n{DONE}"
    async with tenants(cluster, api, "alice", "bob") as made:
        [(alice_ns, alice), (bob_ns, bob)] = made
        await alice.create(
            f"/api/v1/namespaces/{alice_ns}/pods", workload_pod("share", image, script, SHARE)
        )
        await alice.create(
            f"/api/v1/namespaces/{alice_ns}/pods", workload_pod("whole", image, script, WHOLE)
        )
        await bob.create(
            f"/api/v1/namespaces/{bob_ns}/pods", workload_pod("share", image, script, SHARE)
        )
        seen = {
            ("alice", "share"): await pod_log(alice, alice_ns, "share"),
            ("alice", "whole"): await pod_log(alice, alice_ns, "whole"),
            ("bob", "share"): await pod_log(bob, bob_ns, "share"),
        }
        clients = {"alice": (alice, alice_ns), "bob": (bob, bob_ns)}
        gpus = {}
        for (user, name), report in seen.items():
            client, namespace = clients[user]
            mine = await expected_gpus(client, namespace, name)
            gpus[(user, name)] = mine
            devices = devices_in(report)
            # exactly its GPUs' nodes and the control nodes, each the node's fake device
            assert set(devices) == mine | CONTROL_NODES, (user, name, devices)
            for path, shown in devices.items():
                assert shown == host_device(cluster, path.removeprefix("/dev/")), path
            # containerd applied the agent's CDI spec: the pod's identity and its spec on disk
            pod = await client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            env = env_in(report)
            assert env["GPUPOOL_POD_UID"] == pod["metadata"]["uid"]
            token = env["GPUPOOL_HANDOFF_TOKEN"]
            written = json.loads(spec_path(cluster.node.cdi_dir, token).read_text())
            edits = written["devices"][0]["containerEdits"]
            assert f"GPUPOOL_POD_UID={pod['metadata']['uid']}" in edits["env"]
            assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"]
            assert "LD_PRELOAD" not in env
        # the whole GPU is nobody else's
        whole = gpus[("alice", "whole")]
        assert not whole & (gpus[("alice", "share")] | gpus[("bob", "share")])
        # HAMi caps for the shares, in their environment and their read-only files
        for user in ("alice", "bob"):
            report = seen[(user, "share")]
            assert env_in(report)["CUDA_DEVICE_SM_LIMIT"] == "10"
            assert report["limit:CUDA_DEVICE_SM_LIMIT"] == "10"
            assert report["preload"] == "/usr/local/gpupool/libvgpu.so"
            assert report["mount:/etc/ld.so.preload"].split(",")[0] == "ro"
            assert report["mount:/etc/gpupool/limits"].split(",")[0] == "ro"
        # a whole GPU has no caps at all
        report = seen[("alice", "whole")]
        assert not any(key.startswith("CUDA_DEVICE_") for key in env_in(report))
        assert "preload" not in report
        assert not any(key.startswith(("limit:", "mount:")) for key in report)


@pytest.mark.timeout(1800)
async def test_after_unset_the_preload_and_read_only_limits_stay_and_tenants_share_no_shm(
    installed: Cluster, api: KubeAPI
) -> None:
    """What stays with a hami share whose process unsets its whole environment.

    The preload and the read-only limits file stay; the caps in the environment do not, and
    HAMi-core reads its caps from the environment when it loads, so such a process runs
    uncapped (docs/architecture.md, "What is left to the environment"). This shows what the
    node keeps, not that the caps hold.
    """
    cluster = installed
    await published(api, cluster.node.name, CAPACITY)
    image = cluster.images.test_workload
    async with tenants(cluster, api, "alice", "bob") as made:
        [(alice_ns, alice), (bob_ns, bob)] = made
        await alice.create(
            f"/api/v1/namespaces/{alice_ns}/pods",
            workload_pod("unset", image, f"{SHM}\n{UNSET_ALL}\n{DONE}", SHARE, mark="alice"),
        )
        after_unset = await pod_log(alice, alice_ns, "unset")
        assert after_unset["left"] == "0"  # every variable gone, LD_PRELOAD and the caps too
        assert after_unset["preload"] == "/usr/local/gpupool/libvgpu.so"
        assert after_unset["limit:CUDA_DEVICE_SM_LIMIT"] == "10"
        assert (after_unset["write"], after_unset["umount"]) == ("refused", "refused")
        assert after_unset["after_rm"] == "still-there"
        # bob starts after alice wrote into her /dev/shm: he must not see it
        await bob.create(
            f"/api/v1/namespaces/{bob_ns}/pods",
            workload_pod("peek", image, f"{SHM}\n{DONE}", SHARE, "bob"),
        )
        peek = await pod_log(bob, bob_ns, "peek")
        assert peek["shm"] != after_unset["shm"]
        assert not any(key.startswith("shmfile:") for key in peek), peek
