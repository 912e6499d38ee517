"""gpupool's DRA objects on a real API server: the node's ResourceSlice, the DeviceClasses, and
the admission policy that keeps claim allocations gpupool's.

The agent runs in-process with exactly the rights of deploy/agent-rbac.yaml, against a fake NVML
(8 A100s, four of them in MIG mode); what it publishes is read back as a plain user with only
``get``/``list`` on resourceslices, as ``kubectl get resourceslices -o yaml`` would.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.handoff import HandoffConfig
from gpupool.agent.service import Agent, AgentConfig
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.install.crds import apply_object, install_crds
from gpupool.kube.install.device_classes import device_class_manifests
from gpupool.kube.objects.dra.records import CLASSES_PATH, SLICES_PATH, ResourceSlice, slice_name

from .live_helpers import wait_for

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
RESOURCE = "/apis/resource.k8s.io/v1"
SCHEDULER = "gpupool-scheduler"


class NoKubelet:
    """The PodResources API of a node without a kubelet (nothing held)."""

    async def held(self) -> list[Any]:
        return []


async def _bind(api: KubeAPI, user: str, role: dict[str, Any]) -> None:
    await apply_object(api, f"{RBAC}/clusterroles", role)
    await apply_object(
        api,
        f"{RBAC}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{role['metadata']['name']}-{user}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role["metadata"]["name"],
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def _agent_role() -> dict[str, Any]:
    documents = yaml.safe_load_all((DEPLOY / "agent-rbac.yaml").read_text())
    role: dict[str, Any] = next(d for d in documents if d and d["kind"] == "ClusterRole")
    return role


async def _reader(api: KubeAPI, control_plane: LocalControlPlane, user: str) -> KubeAPI:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "slice-reader"},
        "rules": [
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceslices", "deviceclasses"],
                "verbs": ["get", "list"],
            }
        ],
    }
    await _bind(api, user, role)
    return KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(user))


async def test_the_agent_publishes_its_gpus_as_a_resource_slice(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> None:
    name = f"gpu-{namespace}"
    await api.create(
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
        },
    )
    await _bind(api, f"agent-{namespace}", _agent_role())
    agent_api = KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(f"agent-{namespace}"))
    reader = await _reader(api, control_plane, f"reader-{namespace}")
    nvml = FakeNvml.preset("a100-mig", name)
    config = AgentConfig(handoff=HandoffConfig(name, tmp_path / "cdi", tmp_path / "state"))
    agent = Agent(config, nvml, agent_api, NoKubelet())
    try:
        await agent.refresh_inventory()
        stored = await reader.get(f"{SLICES_PATH}/{slice_name(name)}")
        record = msgspec.json.decode(json.dumps(stored), type=ResourceSlice)
        assert record.spec.driver == "gpu.gpupool.io"
        assert (record.spec.node_name, record.spec.pool.name) == (name, name)
        assert record.spec.pool.generation == 1
        owner = stored["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Node", name)
        node_uid = (await api.get(f"/api/v1/nodes/{name}"))["metadata"]["uid"]
        assert owner["uid"] == node_uid
        devices = {d["name"]: d for d in stored["spec"]["devices"]}
        assert len(devices) == 4 + 28  # four whole A100s, 4 x 7 MIG instances
        gpu = devices["gpu-5"]
        attributes = {k: next(iter(v.values())) for k, v in gpu["attributes"].items()}
        assert attributes == {
            "type": "gpu",
            "uuid": f"GPU-{name}-5",
            "model": "A100",
            "index": 5,
            "productName": "NVIDIA A100-SXM4-80GB",
            "migCapable": True,
            "migEnabled": False,
            "driverVersion": "570.124.6",
        }
        assert gpu["allowMultipleAllocations"] is True
        assert gpu["capacity"]["memory"]["value"] == "80Gi"  # 81920Mi, as the API server writes it
        assert gpu["capacity"]["memory"]["requestPolicy"] == {
            "default": "0",
            "validRange": {"min": "0", "step": "1Mi"},
        }
        assert gpu["capacity"]["compute"]["value"] == "1"
        mig = devices["mig-2-6"]
        assert mig["attributes"]["profile"] == {"string": "1g.10gb"}
        assert mig["attributes"]["parentUUID"] == {"string": f"GPU-{name}-2"}
        assert "allowMultipleAllocations" not in mig

        # unchanged: nothing written; a critical XID: a NoSchedule taint, a new generation
        assert not await agent.slices.publish(nvml.devices())
        nvml.inject_xid(f"GPU-{name}-6", 79)
        assert nvml.wait_xid(1000) is not None
        await agent.refresh_inventory()
        stored = await reader.get(f"{SLICES_PATH}/{slice_name(name)}")
        assert stored["spec"]["pool"]["generation"] == 2
        taints = {d["name"]: d.get("taints", []) for d in stored["spec"]["devices"]}
        (taint,) = taints["gpu-6"]
        assert (taint["key"], taint["value"], taint["effect"]) == (
            "gpu.gpupool.io/unhealthy",
            "xid",
            "NoSchedule",
        )
        assert taint["timeAdded"]  # set by the API server
        assert taints["gpu-5"] == []
        assert not await agent.slices.publish(nvml.devices(), verify=True)  # read back: equal

        # the kubelet deletes a node's slices when it starts: after a registration it is back
        await api.delete(f"{SLICES_PATH}/{slice_name(name)}")
        await agent.publish_slice()
        again = await reader.get(f"{SLICES_PATH}/{slice_name(name)}")
        assert again["spec"]["pool"]["generation"] == 1
        assert len(again["spec"]["devices"]) == 32

        # no GPU left: no slice
        nvml.replace_devices(())
        await agent.refresh_inventory()
        with pytest.raises(ApiError) as gone:
            await reader.get(f"{SLICES_PATH}/{slice_name(name)}")
        assert gone.value.status == 404
        listed = await reader.get(SLICES_PATH)
        assert not [s for s in listed["items"] if s["spec"].get("nodeName") == name]
    finally:
        await agent_api.close()
        await reader.close()


async def test_device_classes_install_and_select_only_gpupools_devices(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str
) -> None:
    await install_crds(api)
    reader = await _reader(api, control_plane, f"reader-{namespace}")
    try:
        listed = await reader.get(CLASSES_PATH)
        installed = {c["metadata"]["name"]: c for c in listed["items"]}
        for shipped in device_class_manifests():
            stored = installed[shipped["metadata"]["name"]]
            assert stored["spec"] == shipped["spec"]
            assert stored["metadata"]["labels"] == shipped["metadata"]["labels"]
        await install_crds(api)  # idempotent
    finally:
        await reader.close()


async def _until_allocation_refused(tenant: KubeAPI, claims: str) -> None:
    """Wait until the API server enforces the claim policy just installed (its policy informer
    syncs within seconds, later on a loaded machine), each try on a fresh claim."""
    probes = itertools.count()

    async def enforced() -> bool:
        name = f"probe-{next(probes)}"
        await tenant.create(claims, _claim(name))
        try:
            await tenant.patch(f"{claims}/{name}/status", {"status": {"allocation": ALLOCATION}})
        except ApiError as error:
            return error.status == 403
        return False

    await wait_for(enforced, 30, "the claim allocation policy to be enforced")


def _claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu-share.gpupool.io",
                            "capacity": {"requests": {"memory": "8Gi", "compute": "250m"}},
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": 'device.attributes["gpu.gpupool.io"]'
                                        '.model == "A100"'
                                    }
                                }
                            ],
                        },
                    }
                ]
            }
        },
    }


ALLOCATION = {
    "devices": {
        "results": [
            {
                "request": "gpu",
                "driver": "gpu.gpupool.io",
                "pool": "n1",
                "device": "gpu-5",
                "shareID": "0b6a2c1e-7c1a-4d8e-9a44-6f1b6e2d9a10",
                "consumedCapacity": {"memory": "8Gi", "compute": "250m"},
            }
        ]
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]
    },
}


async def test_only_the_scheduler_allocates_gpupools_devices_to_claims(
    api: KubeAPI, control_plane: LocalControlPlane, namespace: str
) -> None:
    scheduler_user = f"{SCHEDULER}-{namespace}"
    await install_crds(api, scheduler_identities=(scheduler_user,))
    writer_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "claim-writer"},
        "rules": [
            {
                "apiGroups": ["resource.k8s.io"],
                # since 1.37 changing status.allocation or reservedFor also needs the synthetic
                # resourceclaims/binding with the same verb, cluster-wide (kube-scheduler has it)
                "resources": ["resourceclaims", "resourceclaims/status", "resourceclaims/binding"],
                "verbs": ["get", "create", "update", "patch"],
            },
            {  # and since 1.37, for status.devices, this per driver
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceclaims/driver"],
                "resourceNames": ["gpu.gpupool.io"],
                "verbs": ["arbitrary-node:patch"],
            },
        ],
    }
    tenant, scheduler = f"tenant-{namespace}", scheduler_user
    for user in (tenant, scheduler):
        await _bind(api, user, writer_role)
    clients = {
        user: KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(user))
        for user in (tenant, scheduler)
    }
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    try:
        await _until_allocation_refused(clients[tenant], claims)
        await clients[tenant].create(claims, _claim("mine"))
        status = {"status": {"allocation": ALLOCATION}}
        with pytest.raises(ApiError) as refused:  # a tenant (or kube-scheduler) allocating
            await clients[tenant].patch(f"{claims}/mine/status", status)
        assert refused.value.status == 403  # Forbidden, by the policy
        assert "allocated only by the gpupool scheduler" in str(refused.value)
        await clients[scheduler].patch(f"{claims}/mine/status", status)
        entry = {k: ALLOCATION["devices"]["results"][0][k] for k in ("driver", "pool", "device")}
        entry["shareID"] = ALLOCATION["devices"]["results"][0]["shareID"]
        record = {**entry, "data": {"gpupool.io/claim-allocation": '{"node":"n1"}'}}
        with pytest.raises(ApiError) as forged:  # a record beside gpupool's allocation
            await clients[tenant].patch(f"{claims}/mine/status", {"status": {"devices": [record]}})
        assert forged.value.status == 403
        assert "status.devices of gpu.gpupool.io" in str(forged.value)
        await clients[scheduler].patch(f"{claims}/mine/status", {"status": {"devices": [record]}})
        spoiled = {**record, "data": {"gpupool.io/claim-allocation": '{"node":"n2"}'}}
        with pytest.raises(ApiError) as forged:  # changing the scheduler's record
            await clients[tenant].patch(f"{claims}/mine/status", {"status": {"devices": [spoiled]}})
        assert "may not set or change them" in str(forged.value)
        changed = json.loads(json.dumps(ALLOCATION))
        changed["devices"]["results"][0]["device"] = "gpu-6"
        with pytest.raises(ApiError):  # moving the claim to another device: the scheduler's
            await clients[tenant].patch(
                f"{claims}/mine/status", {"status": {"allocation": changed}}
            )
        stored = await api.get(f"{claims}/mine")
        assert stored["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-5"
        # nobody reserved: the allocation and its record may be cleared (the claim controller
        # deallocates)
        cleared = {"status": {"allocation": None, "devices": None}}
        await clients[tenant].patch(f"{claims}/mine/status", cleared)
        assert (await api.get(f"{claims}/mine")).get("status", {}) == {}
    finally:
        for client in clients.values():
            await client.close()
