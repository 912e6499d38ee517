"""What tenants and nodes may write, enforced by the real API server with real identities.

* No pod that asks for gpupool resources (or for the gpupool scheduler) is created with
  ``spec.nodeName`` set, by a tenant with the pod rights of ``edit`` or by an administrator:
  the ValidatingAdmissionPolicy refuses it naming the field, with no webhook running.
* The node agent's ServiceAccount, with the ClusterRole of deploy/agent-rbac.yaml, holds tokens
  from the TokenRequest API bound to a pod on node A: they carry node A in the user extra
  ``authentication.kubernetes.io/node-name`` (ServiceAccountTokenPodNodeInfo, on in 1.37), and
  the policy lets them change node A (metadata and status, as the agent's own publisher does)
  but not node B, write only node A's ResourceSlice (not B's: create, replace, delete), and
  write Events only as node A. A token bound to no pod changes no node.
* A pod's declared runtime (``gpupool.io/expected-runtime``) is fixed when it is created: no
  update by the tenant or an administrator sets, changes or removes it.

The module has its own control plane (conftest), so the policies do not reach other modules.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.agent.dra.slice import ResourceSlicePublisher
from gpupool.agent.inventory import NodePublication, NodePublisher, publication
from gpupool.agent.nvml import GpuDevice
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import MERGE_PATCH, ApiError, KubeAPI
from gpupool.kube.install.admission_policy import (
    AGENT_POLICY_NAME,
    BYPASS_POLICY_NAME,
    DECLARED_RUNTIME_POLICY_NAME,
    DEFAULT_AGENT_IDENTITIES,
    DEFAULT_SCHEDULER_IDENTITIES,
    POLICY_PATH,
)
from gpupool.kube.install.crds import apply_object, install_crds
from gpupool.kube.objects.dra.records import SLICES_PATH, slice_name
from gpupool.kube.objects.events import pod_event
from gpupool.kube.objects.records import ObjectMeta, PodRecord
from gpupool.kube.objects.timestamps import now_rfc3339
from gpupool.kube.objects.vocabulary import LABEL_CLASS, LABEL_QUEUE

from .live_helpers import (
    gpu_pod,
    grant_role,
    make_nodes,
    service_account_token,
    token_api,
    wait_for,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TENANT = "tenant"
NODE_FIELD = "spec.nodeName: a pod that"
AGENT_WHY = "the gpupool agent may change only its own Node"
OWN_FIELDS_WHY = (
    "the gpupool agent may change on its own Node only the GPU labels, annotations and "
    "gpupool.io/* resources it publishes"
)
EDIT_POD_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    }
]

Json = dict[str, Any]


@pytest.fixture(scope="module")
def policies(control_plane: LocalControlPlane) -> None:
    """The admission policies as `gpupool install-crds` installs them, enforced."""

    async def setup() -> None:
        api = KubeAPI.from_kubeconfig(control_plane.kubeconfig)
        try:
            await install_crds(
                api,
                scheduler_identities=DEFAULT_SCHEDULER_IDENTITIES,
                agent_identities=DEFAULT_AGENT_IDENTITIES,
            )
            await api.create("/api/v1/namespaces", {"metadata": {"name": "probe"}})
            probe = _on_node(gpu_pod("probe"), "nowhere")
            path = "/api/v1/namespaces/probe/pods"

            async def enforced() -> bool:
                try:
                    await api.request("POST", path, body=probe, params={"dryRun": "All"})
                except ApiError as error:
                    return NODE_FIELD in error.message
                return False

            await wait_for(enforced, 30, "the bypass policy to be enforced")
        finally:
            await api.close()

    asyncio.run(setup())


def _on_node(pod: Json, node: str) -> Json:
    pod["spec"]["nodeName"] = node
    return pod


async def _refused(request: Awaitable[object]) -> str:
    """The message of the 403 refusing ``request`` ("" if it went through)."""
    try:
        await request
    except ApiError as error:
        refused = error
    else:
        return ""
    assert refused.status == 403, refused
    return refused.message


async def _refusal(api: KubeAPI, namespace: str, pod: Json) -> str:
    """The message refusing a create of ``pod`` ("" if it was created)."""
    return await _refused(api.create(f"/api/v1/namespaces/{namespace}/pods", pod))


async def test_the_policies_type_check(policies: None, api: KubeAPI) -> None:
    for name in (BYPASS_POLICY_NAME, AGENT_POLICY_NAME, DECLARED_RUNTIME_POLICY_NAME):
        stored = await api.get(f"{POLICY_PATH}/{name}")
        assert stored["status"].get("typeChecking", {}).get("expressionWarnings") is None, name


async def test_no_gpupool_pod_is_created_on_a_node_past_the_scheduler(
    policies: None, control_plane: LocalControlPlane, api: KubeAPI, namespace: str
) -> None:
    (node,) = await make_nodes(api, namespace, 1)
    await grant_role(api, namespace, TENANT, EDIT_POD_RULES)
    tenant = KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(TENANT))
    try:
        asks = await _refusal(tenant, namespace, _on_node(gpu_pod("asks"), node.name))
        assert asks.startswith('pods "asks" is forbidden: ValidatingAdmissionPolicy'), asks
        assert (
            f"{NODE_FIELD} asks for gpupool.io resources is placed only by the gpupool scheduler; "
            f"{TENANT} may not set spec.nodeName when creating it (leave it empty)"
        ) in asks
        share = _on_node(gpu_pod("share", gpus=1, memory_mib=4096), node.name)
        assert NODE_FIELD in await _refusal(tenant, namespace, share)
        init = _on_node(gpu_pod("init", gpus=0), node.name)
        init["spec"]["schedulerName"] = "default-scheduler"
        init["spec"]["initContainers"] = [
            {"name": "warm", "image": "x", "resources": {"limits": {"gpupool.io/gpu": "1"}}}
        ]
        assert "asks for gpupool.io resources" in await _refusal(tenant, namespace, init)
        named = _on_node(gpu_pod("named", gpus=0), node.name)
        assert "names the gpupool scheduler" in await _refusal(tenant, namespace, named)
        # the administrator is refused the same way: the policy holds for system:masters
        assert NODE_FIELD in await _refusal(api, namespace, _on_node(gpu_pod("admin"), node.name))
        # what the policy does not concern is created: a plain pod on a node, a GPU pod unbound
        plain = _on_node(gpu_pod("plain", gpus=0, scheduler="default-scheduler"), node.name)
        assert await _refusal(tenant, namespace, plain) == ""
        assert await _refusal(tenant, namespace, gpu_pod("unbound")) == ""
    finally:
        await tenant.close()


RUNTIME = "gpupool.io/expected-runtime"
FIXED = f"metadata.annotations[{RUNTIME}]: a pod's declared runtime is fixed when it is created"


async def _annotate(
    api: KubeAPI, namespace: str, name: str, value: str | None, key: str = RUNTIME
) -> str:
    """The message refusing a patch of the pod's annotation ("" if it was made)."""
    body = {"metadata": {"annotations": {key: value}}}
    return await _refused(api.patch(f"/api/v1/namespaces/{namespace}/pods/{name}", body))


async def test_a_declared_runtime_is_fixed_when_the_pod_is_created(
    policies: None, control_plane: LocalControlPlane, api: KubeAPI, namespace: str
) -> None:
    await grant_role(api, namespace, TENANT, EDIT_POD_RULES)
    tenant = KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(TENANT))
    pods = f"/api/v1/namespaces/{namespace}/pods"
    try:
        declared = gpu_pod("declared")
        declared["metadata"]["annotations"] = {RUNTIME: "10m"}
        await tenant.create(pods, declared)  # declaring at creation is every tenant's right
        await tenant.create(pods, gpu_pod("undeclared"))

        async def enforced() -> bool:
            return FIXED in await _annotate(tenant, namespace, "declared", "10h")

        await wait_for(enforced, 30, "the declared-runtime policy to be enforced")
        assert f"{TENANT} may not set, change or remove it" in await _annotate(
            tenant, namespace, "declared", "10h"
        )
        assert FIXED in await _annotate(tenant, namespace, "declared", None)  # removed
        assert FIXED in await _annotate(tenant, namespace, "undeclared", "5m")  # added later
        assert FIXED in await _annotate(api, namespace, "declared", "1h")  # admins too
        # what the policy does not concern goes through: other annotations, the same value
        assert await _annotate(tenant, namespace, "declared", "x", key="team.example/note") == ""
        assert await _annotate(tenant, namespace, "declared", "10m") == ""
        stored = await api.get(f"{pods}/declared")
        assert stored["metadata"]["annotations"][RUNTIME] == "10m"
    finally:
        await tenant.close()


async def _relabel(api: KubeAPI, namespace: str, name: str, key: str, value: str | None) -> str:
    """The message refusing a patch of the pod's label ("" if it was made)."""
    body = {"metadata": {"labels": {key: value}}}
    return await _refused(api.patch(f"/api/v1/namespaces/{namespace}/pods/{name}", body))


async def test_a_bound_pods_queue_and_class_are_fixed(
    policies: None, control_plane: LocalControlPlane, api: KubeAPI, namespace: str
) -> None:
    """Relabelling a bound pod's queue would re-charge it past another queue's ceiling."""
    (node,) = await make_nodes(api, namespace, 1)
    await grant_role(api, namespace, TENANT, EDIT_POD_RULES)
    tenant = KubeAPI.from_kubeconfig(control_plane.user_kubeconfig(TENANT))
    pods = f"/api/v1/namespaces/{namespace}/pods"
    try:
        for name in ("bound", "waiting"):
            body = gpu_pod(name)
            body["metadata"]["labels"] = {"gpupool.io/queue": "narrow", "gpupool.io/class": "a"}
            await tenant.create(pods, body)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "bound"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node.name},
        }
        await api.create(f"{pods}/bound/binding", binding)
        queue_fixed = "metadata.labels[gpupool.io/queue]: fixed once the pod is bound"

        async def enforced() -> bool:
            return queue_fixed in await _relabel(tenant, namespace, "bound", LABEL_QUEUE, "wide")

        await wait_for(enforced, 30, "the policy to fix a bound pod's queue")
        refusal = await _relabel(tenant, namespace, "bound", LABEL_QUEUE, None)  # removed
        assert f"{queue_fixed} (its signed allocation record charges it" in refusal
        assert f"{TENANT} may not set, change or remove it" in refusal
        assert queue_fixed in await _relabel(api, namespace, "bound", LABEL_QUEUE, "wide")
        class_fixed = "metadata.labels[gpupool.io/class]: fixed once the pod is bound"
        assert class_fixed in await _relabel(tenant, namespace, "bound", LABEL_CLASS, "b")
        # what the policy does not concern goes through: other labels, a pod not yet bound
        assert await _relabel(tenant, namespace, "bound", "team.example/note", "x") == ""
        assert await _relabel(tenant, namespace, "waiting", LABEL_QUEUE, "wide") == ""
        stored = await api.get(f"{pods}/bound")
        assert stored["metadata"]["labels"][LABEL_QUEUE] == "narrow"
    finally:
        await tenant.close()


async def _agent_account(api: KubeAPI) -> None:
    """The agent's ServiceAccount with exactly the ClusterRole deploy/agent-rbac.yaml gives it."""
    (role,) = [
        doc
        for doc in yaml.safe_load_all((DEPLOY / "agent-rbac.yaml").read_text())
        if doc and doc["kind"] == "ClusterRole"
    ]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    await apply_object(api, f"{rbac}/clusterroles", role)
    await apply_object(
        api,
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": "gpupool-agent"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "gpupool-agent",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "gpupool-agent", "namespace": "kube-system"}
            ],
        },
    )


async def _agent_pod(api: KubeAPI, namespace: str, node: str) -> Json:
    """A pod object on ``node`` for the agent's token to be bound to (as its DaemonSet pod)."""
    pod = _on_node(gpu_pod(f"agent-{node}", gpus=0, scheduler="default-scheduler"), node)
    pod["spec"]["serviceAccountName"] = "gpupool-agent"
    created: Json = await api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    return created


async def _forbidden(write: Any) -> str:
    with pytest.raises(ApiError) as refused:
        await write
    assert refused.value.status == 403, refused.value
    return refused.value.message


async def _refused_dry_run(api: KubeAPI, path: str, patch: Json) -> bool:
    """Whether admission refuses ``patch`` of ``path`` (a dry run: nothing is written)."""
    try:
        await api.request(
            "PATCH", path, body=patch, params={"dryRun": "All"}, content_type=MERGE_PATCH
        )
    except ApiError as error:
        return error.status == 403
    return False


def _event(node: str, namespace: str) -> tuple[str, Json]:
    pod = PodRecord(metadata=ObjectMeta(name="victim", namespace=namespace, uid="u-1"))
    return pod_event(
        pod,
        "Warning",
        "AllocationNotTrusted",
        "test",
        controller="gpupool.io/agent",
        instance=node,
        action="PreStartContainer",
    )


async def test_an_agent_token_changes_only_its_own_node(
    policies: None, control_plane: LocalControlPlane, api: KubeAPI, namespace: str
) -> None:
    node_a, node_b = (n.name for n in await make_nodes(api, namespace, 2))
    await _agent_account(api)
    bound = await _agent_pod(api, "kube-system", node_a)
    token = await service_account_token(api, "kube-system", "gpupool-agent", bound_pod=bound)
    ca = control_plane.folder / "pki" / "ca.crt"
    agent = token_api(control_plane.server, ca, token)
    unbound = token_api(
        control_plane.server,
        ca,
        await service_account_token(api, "kube-system", "gpupool-agent"),
    )
    label = {"metadata": {"labels": {"gpupool.io/probe": "1"}}}
    try:
        # node A: the agent's own publisher writes labels, annotations and allocatable
        await NodePublisher(agent, node_a, allocatable=True).publish(_publication())
        stored = await api.get(f"/api/v1/nodes/{node_a}")
        assert stored["metadata"]["labels"]["gpupool.io/gpu-model"] == "H100"
        assert stored["metadata"]["annotations"]["gpupool.io/gpu-uuids"] == "GPU-a,GPU-b"
        owned = {
            "gpupool.io/gpu-usage": "probe",
            "gpupool.io/handoff-refused": '{"share": "x"}',
            "gpupool.io/gpu-nvlink-domains": "0,1",  # its GPUs' topology, which placement reads
            "gpupool.io/gpu-numa-nodes": "0,1",
            "gpupool.io/gpu-contention": '{"sampledAt": "x", "gpus": {}}',  # what it measured
        }
        await agent.patch(f"/api/v1/nodes/{node_a}", {"metadata": {"annotations": owned}})
        # ...but nothing else of it: a label (it could select the node into a pool), a taint,
        # the cordon, another resource's allocatable, a condition
        await wait_for(
            lambda: _refused_dry_run(agent, f"/api/v1/nodes/{node_a}", label),
            30,
            "the agent's node fields to be enforced",
        )
        assert f"{OWN_FIELDS_WHY}, not metadata.labels[gpupool.io/probe]" in await _forbidden(
            agent.patch(f"/api/v1/nodes/{node_a}", label)
        )
        taint = {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
        assert f"{OWN_FIELDS_WHY}, not spec" in await _forbidden(
            agent.patch(f"/api/v1/nodes/{node_a}", taint)
        )
        cordon = {"spec": {"unschedulable": True}}
        assert f"{OWN_FIELDS_WHY}, not spec" in await _forbidden(
            agent.patch(f"/api/v1/nodes/{node_a}", cordon)
        )
        cpu = {"status": {"allocatable": {"cpu": "512"}}}
        assert "not status.allocatable[cpu]" in await _forbidden(
            agent.patch(f"/api/v1/nodes/{node_a}/status", cpu)
        )
        stored = await api.get(f"/api/v1/nodes/{node_a}")
        assert "gpupool.io/probe" not in stored["metadata"]["labels"]
        assert not stored["spec"].get("taints")
        assert not stored["spec"].get("unschedulable")
        # node B: refused, also through nodes/status and through the agent's own code; the
        # node policy is waited for as the fixture waits for the pod policy (an API server
        # enforces each newly written policy after its own delay; once, in a clean-clone run
        # where other modules had installed the policies again, node B's patch went through)
        await wait_for(
            lambda: _refused_dry_run(agent, f"/api/v1/nodes/{node_b}", label),
            30,
            "the agent node policy to be enforced",
        )
        message = await _forbidden(agent.patch(f"/api/v1/nodes/{node_b}", label))
        assert (
            f"{AGENT_WHY}: system:serviceaccount:kube-system:gpupool-agent has a token for node "
            f"{node_a} and may not write node {node_b}"
        ) in message
        status = {"status": {"allocatable": {"gpupool.io/gpu": "64"}}}
        assert AGENT_WHY in await _forbidden(agent.patch(f"/api/v1/nodes/{node_b}/status", status))
        # nor what it measured, on another node: a contention signal there would keep that
        # node's GPUs out of placement under avoidAbove for as long as the signal stays fresh
        high = {"0": {"level": "high", "score": 0.9}}
        signal = json.dumps({"sampledAt": now_rfc3339(), "gpus": high})
        measured = {"metadata": {"annotations": {"gpupool.io/gpu-contention": signal}}}
        assert AGENT_WHY in await _forbidden(agent.patch(f"/api/v1/nodes/{node_b}", measured))
        stored_b = (await api.get(f"/api/v1/nodes/{node_b}"))["metadata"].get("annotations", {})
        assert "gpupool.io/gpu-contention" not in stored_b
        publisher = NodePublisher(agent, node_b, allocatable=True)
        assert AGENT_WHY in await _forbidden(publisher.publish(_publication()))
        assert "gpupool.io/probe" not in (await api.get(f"/api/v1/nodes/{node_b}"))["metadata"].get(
            "labels", {}
        )
        # Events: only as its own node
        path, own = _event(node_a, namespace)
        await agent.create(path, own)
        path, other = _event(node_b, namespace)
        assert "may not write an event reported by node " + node_b in await _forbidden(
            agent.create(path, other)
        )
        # its ResourceSlice (DRA): its own node's, not another's, and not moved to another
        gpus = _publication_gpus()
        assert await ResourceSlicePublisher(agent, node_a).publish(gpus)
        assert AGENT_WHY in await _forbidden(ResourceSlicePublisher(agent, node_b).publish(gpus))
        await ResourceSlicePublisher(api, node_b).publish(gpus)  # the admin writes B's
        other_slice = f"{SLICES_PATH}/{slice_name(node_b)}"
        assert f"may not write ResourceSlice {slice_name(node_b)} of node {node_b}" in (
            await _forbidden(agent.delete(other_slice))
        )
        stored = await api.get(other_slice)  # nor replace it (its nodeName is immutable)
        assert AGENT_WHY in await _forbidden(agent.replace(other_slice, stored))
        await ResourceSlicePublisher(agent, node_a).withdraw()
        # a token bound to no pod speaks for no node
        assert "has a token bound to no node" in await _forbidden(
            unbound.patch(f"/api/v1/nodes/{node_a}", label)
        )
    finally:
        await agent.close()
        await unbound.close()


def _publication_gpus() -> tuple[GpuDevice, ...]:
    return tuple(
        GpuDevice(index=i, uuid=uuid, model="H100", memory_mib=81559, minor=i)
        for i, uuid in enumerate(("GPU-a", "GPU-b"))
    )


def _publication() -> NodePublication:
    return publication(_publication_gpus(), 4)
