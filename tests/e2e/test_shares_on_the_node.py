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
from pathlib import Path
from typing import Any

import pytest

from gpupool.agent.cdi import spec_path
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.objects.vocabulary import ANNOTATION_GPU_LINKS, RESOURCE_GPU

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
async def test_a_two_gpu_pod_gets_both_gpus_from_one_nvlink_island(
    installed: Cluster, api: KubeAPI
) -> None:
    """The node's eight GPUs are two NVLink islands of four (the agent publishes them). A
    three-GPU pod takes GPUs 0-2; the first free pair by index would then be 3 and 4, one in
    each island, joined only by PCIe: the two-GPU pod gets two GPUs of the second island, and
    its container sees exactly those."""
    cluster = installed
    await published(api, cluster.node.name, CAPACITY)
    node = await api.get(f"/api/v1/nodes/{cluster.node.name}")
    assert node["metadata"]["annotations"][ANNOTATION_GPU_LINKS] == "0,0,0,0,1,1,1,1"
    image = cluster.images.test_workload
    script = f"{INSPECT}\n{DONE}"
    async with tenants(cluster, api, "carol") as made:
        [(namespace, carol)] = made
        path = f"/api/v1/namespaces/{namespace}/pods"
        await carol.create(path, workload_pod("three", image, script, {RESOURCE_GPU: "3"}))
        await pod_log(carol, namespace, "three")
        await carol.create(path, workload_pod("pair", image, script, {RESOURCE_GPU: "2"}))
        report = await pod_log(carol, namespace, "pair")
        three = await expected_gpus(carol, namespace, "three")
        pair = await expected_gpus(carol, namespace, "pair")
        assert three == {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"}, three
        assert pair == {"/dev/nvidia4", "/dev/nvidia5"}, pair
        assert set(devices_in(report)) == pair | CONTROL_NODES


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


TRAIN = """
echo "dataset=$(cat /data/dataset.txt)"
i=0
while [ ! -s /data/sidecar ] && [ $i -lt 120 ]; do sleep 0.5; i=$((i+1)); done
echo "sidecar=$(cat /data/sidecar)"
echo step-100 > /data/checkpoint
echo done=1
exec sleep 3600
"""
"""A training step: read the dataset, see the sidecar's mark, write a checkpoint."""
SIDECAR = "echo shipping > /data/sidecar; exec sleep 3600"


def _local_volume(name: str, storage_class: str, path: Path, node: str) -> dict[str, Any]:
    """A static local PersistentVolume on ``node`` (what a platform team lays out per disk)."""
    on_node = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class,
            "local": {"path": str(path)},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [on_node]}]}},
        },
    }


@pytest.mark.timeout(1800)
async def test_a_training_pod_mounts_its_wait_for_first_consumer_volume_beside_a_native_sidecar(
    installed: Cluster, api: KubeAPI, tmp_path: Path
) -> None:
    """VolumeBinding on the real node: the claim waits for its pod (WaitForFirstConsumer),
    gpupool binds it to the local volume on the node it chose before binding the pod (kube's
    PreBind), kube-controller-manager's PV controller completes the binding and the kubelet
    mounts it; the pod's native sidecar (an init container that keeps running) starts first."""
    cluster = installed
    await published(api, cluster.node.name, CAPACITY)
    image = cluster.images.test_workload
    folder = tmp_path / "disk-0"
    folder.mkdir()
    (folder / "dataset.txt").write_text("imagenet-shard-7\n")
    async with tenants(cluster, api, "carol") as made:
        [(namespace, tenant)] = made
        storage_class, volume = f"local-{namespace}", f"local-{namespace}-0"
        await api.create(
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": storage_class},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )
        await api.create(
            "/api/v1/persistentvolumes",
            _local_volume(volume, storage_class, folder, cluster.node.name),
        )
        try:
            await tenant.create(
                f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "data"},
                    "spec": {
                        "storageClassName": storage_class,
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                },
            )
            mount = [{"name": "data", "mountPath": "/data"}]
            body = workload_pod("train", image, TRAIN, SHARE)
            claimed = {"claimName": "data"}
            body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": claimed}]
            body["spec"]["containers"][0]["volumeMounts"] = mount
            body["spec"]["initContainers"] = [
                {
                    "name": "log-shipper",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "restartPolicy": "Always",
                    "command": ["/bin/sh", "-c", SIDECAR],
                    "volumeMounts": mount,
                }
            ]
            await tenant.create(f"/api/v1/namespaces/{namespace}/pods", body)
            seen = await pod_log(tenant, namespace, "train")
            assert (seen["dataset"], seen["sidecar"]) == ("imagenet-shard-7", "shipping")
            assert (folder / "checkpoint").read_text() == "step-100\n"  # on the node's disk
            pod = await tenant.get(f"/api/v1/namespaces/{namespace}/pods/train")
            assert (pod["spec"]["schedulerName"], pod["spec"]["nodeName"]) == (
                "gpupool",
                cluster.node.name,
            )
            (sidecar,) = pod["status"]["initContainerStatuses"]
            assert "running" in sidecar["state"], sidecar
            claim = await tenant.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data")
            assert (claim["status"]["phase"], claim["spec"]["volumeName"]) == ("Bound", volume)
        finally:
            await api.delete(f"/api/v1/persistentvolumes/{volume}")
            await api.delete(f"/apis/storage.k8s.io/v1/storageclasses/{storage_class}")


@pytest.mark.timeout(1800)
async def test_replicas_with_required_anti_affinity_one_per_node_and_the_rest_pend_saying_why(
    installed: Cluster, api: KubeAPI
) -> None:
    """An inference Deployment of three replicas that must not share a node, on one node: one
    runs, and the other two pend with kube-scheduler's reason for anti-affinity."""
    cluster = installed
    await published(api, cluster.node.name, CAPACITY)
    image = cluster.images.test_workload
    async with tenants(cluster, api, "dave") as made:
        [(namespace, tenant)] = made
        template = workload_pod("serve", image, DONE, SHARE)
        labels = {"app": "serve"}
        template["metadata"] = {"labels": labels}
        apart = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
        template["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}
        }
        await tenant.create(
            f"/apis/apps/v1/namespaces/{namespace}/deployments",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "serve"},
                "spec": {"replicas": 3, "selector": {"matchLabels": labels}, "template": template},
            },
        )
        reasons: list[str] = []

        async def settled() -> bool:
            nonlocal reasons
            pods = await list_pods(tenant, namespace)
            assert not failed_admission(pods), failed_admission(pods)
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            reasons = [
                c.get("message", "")
                for p in pods
                for c in p["status"].get("conditions", [])
                if c["type"] == "PodScheduled" and c["status"] == "False"
            ]
            return len(pods) == 3 and len(running) == 1 and len(reasons) == 2

        await wait_for(settled, 600, "one replica Running and two pending with a reason")
        for reason in reasons:
            assert "1 node(s) didn't match pod anti-affinity rules" in reason, reason
