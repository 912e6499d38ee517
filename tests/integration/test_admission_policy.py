"""Only the scheduler writes gpupool.io/allocation: the ValidatingAdmissionPolicy, for real.

A tenant with the pod rights of the ``edit`` role, a binder with pods/binding, and an admin in
system:masters each try to set, change or remove the allocation (on create, update, patch,
pods/status, pods/binding and the older bindings resource); the API server refuses them all and
says why, while ``gpupool control-plane`` running as the scheduler user binds with its allocation.
The module has its own control plane (conftest), so the policy does not reach other modules.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import MERGE_PATCH, ApiError, KubeAPI
from gpupool.kube.install.admission_policy import POLICY_NAME, POLICY_PATH
from gpupool.kube.install.crds import install_crds
from gpupool.kube.install.rbac import grant_scheduler_role

from .live_helpers import (
    SchedulerProcesses,
    gpu_pod,
    grant_role,
    make_nodes,
    pod_allocation,
    wait_for,
)

SCHEDULER = "gpupool-scheduler"
TENANT = "tenant"
BINDER = "binder"
ADMIN = "gpupool-admin"  # the control plane's admin certificate, in system:masters
WHY = "gpupool.io/allocation is written only by the gpupool scheduler"
FORGED = json.dumps({"node": "x", "kind": "whole", "gpus": [], "scheduler": "me", "time": "t"})

# The pod rights of the built-in `edit` role (bootstrappolicy editRules: pods, pods/attach,
# pods/exec, pods/portforward, pods/proxy writable, pods/eviction create, no pods/binding and no
# pods/status), written out because a bare API server has no controller-manager to aggregate it.
EDIT_POD_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
        "verbs": ["create", "delete", "deletecollection", "patch", "update"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
]
BINDER_RULES = [
    {"apiGroups": [""], "resources": ["pods/binding", "bindings"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create"]},
]


def _with_allocation(pod: dict[str, Any], value: str = FORGED) -> dict[str, Any]:
    pod["metadata"]["annotations"]["gpupool.io/allocation"] = value
    return pod


async def _wait_enforced(api: KubeAPI, namespace: str, *, allowed: bool) -> None:
    """Until the API server applies the policy as installed (a dry run as the admin)."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    probe = _with_allocation(gpu_pod("probe"))

    async def enforced() -> bool:
        try:
            await api.request("POST", path, body=probe, params={"dryRun": "All"})
        except ApiError as error:
            if WHY not in error.message:
                raise
            return not allowed
        return allowed

    await wait_for(enforced, 30, f"the policy to {'allow' if allowed else 'deny'} the admin")


async def _install(api: KubeAPI, namespace: str, identities: tuple[str, ...]) -> None:
    await install_crds(api, scheduler_identities=identities)
    await _wait_enforced(api, namespace, allowed=ADMIN in identities)


@pytest.fixture(scope="module")
def users(control_plane: LocalControlPlane) -> dict[str, Path]:
    """Kubeconfigs of the scheduler, the tenant and the binder; the policy installed."""

    async def setup() -> None:
        api = KubeAPI.from_kubeconfig(control_plane.kubeconfig)
        try:
            await api.create("/api/v1/namespaces", {"metadata": {"name": "policy-probe"}})
            await grant_scheduler_role(api, SCHEDULER)
            await _install(api, "policy-probe", (SCHEDULER,))
        finally:
            await api.close()

    asyncio.run(setup())
    return {user: control_plane.user_kubeconfig(user) for user in (SCHEDULER, TENANT, BINDER)}


def _denied(error: ApiError, user: str) -> None:
    assert error.status == 403, error
    assert WHY in error.message, error.message
    assert f"{user} may not set, change or remove it" in error.message


async def test_the_policy_type_checks_with_the_identities_installed(
    users: dict[str, Path], api: KubeAPI
) -> None:
    stored = await api.get(f"{POLICY_PATH}/{POLICY_NAME}")
    assert stored["status"].get("typeChecking", {}).get("expressionWarnings") is None
    assert f'["{SCHEDULER}"]' in stored["spec"]["matchConditions"][0]["expression"]


async def test_a_tenant_cannot_create_a_pod_with_an_allocation(
    users: dict[str, Path], api: KubeAPI, namespace: str
) -> None:
    await grant_role(api, namespace, TENANT, EDIT_POD_RULES)
    tenant = KubeAPI.from_kubeconfig(users[TENANT])
    path = f"/api/v1/namespaces/{namespace}/pods"
    try:
        with pytest.raises(ApiError) as refused:
            await tenant.create(path, _with_allocation(gpu_pod("forged")))
        _denied(refused.value, TENANT)
        with pytest.raises(ApiError) as empty:  # an empty value is a value too
            await tenant.create(path, _with_allocation(gpu_pod("empty"), ""))
        _denied(empty.value, TENANT)
        created = await tenant.create(path, gpu_pod("honest"))  # the tenant may create pods
        assert "gpupool.io/allocation" not in created["metadata"].get("annotations", {})
        with pytest.raises(ApiError) as added:  # nor add it afterwards
            await tenant.patch(
                f"{path}/honest", {"metadata": {"annotations": {"gpupool.io/allocation": FORGED}}}
            )
        _denied(added.value, TENANT)
    finally:
        await tenant.close()


async def test_only_the_scheduler_binds_with_an_allocation_and_nobody_changes_it(
    users: dict[str, Path],
    api: KubeAPI,
    namespace: str,
    tmp_path: Path,
) -> None:
    await grant_role(api, namespace, TENANT, EDIT_POD_RULES)
    await make_nodes(api, namespace, 1, gpus=2)
    tenant = KubeAPI.from_kubeconfig(users[TENANT])
    pod_path = f"/api/v1/namespaces/{namespace}/pods/job"
    schedulers = SchedulerProcesses(users[SCHEDULER], f"lease-{namespace}", tmp_path)
    try:
        await tenant.create(
            f"/api/v1/namespaces/{namespace}/pods", gpu_pod("job", selector={"test": namespace})
        )
        schedulers.start("scheduler")

        async def bound() -> bool:
            return bool((await api.get(pod_path))["spec"].get("nodeName"))

        await wait_for(bound, 60, "the scheduler user to bind the pod")
        pod = await api.get(pod_path)
        record = pod_allocation(pod)
        assert record is not None
        assert record["node"] == pod["spec"]["nodeName"]
        assert record["scheduler"] == "scheduler"
        original = pod["metadata"]["annotations"]["gpupool.io/allocation"]

        for user, client in ((TENANT, tenant), (ADMIN, api)):
            changes = [  # change, remove (merge patch), remove (replace), change via status
                ("PATCH", pod_path, {"metadata": {"annotations": {"gpupool.io/allocation": "{}"}}}),
                ("PATCH", pod_path, {"metadata": {"annotations": {"gpupool.io/allocation": None}}}),
            ]
            if client is api:  # the tenant has no pods/status
                changes.append(
                    (
                        "PATCH",
                        f"{pod_path}/status",
                        {"metadata": {"annotations": {"gpupool.io/allocation": "{}"}}},
                    )
                )
            for method, path, body in changes:
                with pytest.raises(ApiError) as refused:
                    await client.request(method, path, body=body, content_type=MERGE_PATCH)
                _denied(refused.value, user)
            current = await client.get(pod_path)
            del current["metadata"]["annotations"]["gpupool.io/allocation"]
            with pytest.raises(ApiError) as replaced:
                await client.replace(pod_path, current)
            _denied(replaced.value, user)
            # other annotations stay the tenant's to write
            await client.patch(pod_path, {"metadata": {"annotations": {f"note-{user}": "ok"}}})
        after = await api.get(pod_path)
        assert after["metadata"]["annotations"]["gpupool.io/allocation"] == original
        assert after["metadata"]["annotations"][f"note-{TENANT}"] == "ok"
        assert "Forbidden" not in schedulers.log("scheduler")
    finally:
        schedulers.stop_all()
        await tenant.close()


async def test_a_binding_cannot_carry_an_allocation_for_anyone_else(
    users: dict[str, Path], api: KubeAPI, namespace: str
) -> None:
    await grant_role(api, namespace, BINDER, BINDER_RULES)
    (node,) = await make_nodes(api, namespace, 1, gpus=2)
    binder = KubeAPI.from_kubeconfig(users[BINDER])
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def binding(name: str, annotations: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": annotations},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node.name},
        }

    try:
        await api.create_all(pods, [gpu_pod(f"p{i}", scheduler="other") for i in range(3)])
        forged = {"gpupool.io/allocation": FORGED}
        for user, client in ((BINDER, binder), (ADMIN, api)):
            for path in (f"{pods}/p0/binding", f"/api/v1/namespaces/{namespace}/bindings"):
                with pytest.raises(ApiError) as refused:
                    await client.create(path, binding("p0", forged))
                _denied(refused.value, user)
        assert not (await api.get(f"{pods}/p0"))["spec"].get("nodeName")
        # a Binding without the annotation is the binder's right (RBAC), and stays allowed
        await binder.request("POST", f"{pods}/p1/binding", body=binding("p1", {"team": "a"}))
        bound = await api.get(f"{pods}/p1")
        assert bound["spec"]["nodeName"] == node.name
        assert "gpupool.io/allocation" not in bound["metadata"]["annotations"]
    finally:
        await binder.close()


async def test_a_listed_identity_may_write_and_the_policy_applies_to_admins_otherwise(
    users: dict[str, Path], api: KubeAPI, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods"
    with pytest.raises(ApiError) as refused:
        await api.create(path, _with_allocation(gpu_pod("before")))
    _denied(refused.value, ADMIN)
    await _install(api, namespace, (SCHEDULER, ADMIN))
    try:
        created = await api.create(path, _with_allocation(gpu_pod("listed")))
        assert created["metadata"]["annotations"]["gpupool.io/allocation"] == FORGED
    finally:
        await _install(api, namespace, (SCHEDULER,))


async def test_install_crds_installs_the_policy_for_the_identities_given(
    users: dict[str, Path], control_plane: LocalControlPlane, api: KubeAPI
) -> None:
    def install(*identities: str) -> subprocess.CompletedProcess[str]:
        options = [arg for identity in identities for arg in ("--scheduler-identity", identity)]
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "gpupool",
                "install-crds",
                "--kubeconfig",
                str(control_plane.kubeconfig),
                *options,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    bad = await asyncio.to_thread(install, 'evil"]) || true || (["')
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: --scheduler-identity: "), bad.stderr
    done = await asyncio.to_thread(install, SCHEDULER, "system:serviceaccount:ops:binder")
    assert done.returncode == 0, done.stderr
    assert f"only {SCHEDULER}, system:serviceaccount:ops:binder may write" in done.stdout
    stored = await api.get(f"{POLICY_PATH}/{POLICY_NAME}")
    expression = stored["spec"]["matchConditions"][0]["expression"]
    assert expression == (
        f'!(request.userInfo.username in ["{SCHEDULER}", "system:serviceaccount:ops:binder"])'
    )


async def test_a_control_plane_the_policy_refuses_says_so_once_and_is_not_ready(
    users: dict[str, Path],
    control_plane: LocalControlPlane,
    api: KubeAPI,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Started with the admin kubeconfig, as a new user would: one error with the fix, 503."""
    await make_nodes(api, namespace, 1, gpus=2)
    pod_path = f"/api/v1/namespaces/{namespace}/pods/job"
    job = gpu_pod("job", selector={"test": namespace})
    await api.create(f"/api/v1/namespaces/{namespace}/pods", job)
    schedulers = SchedulerProcesses(control_plane.kubeconfig, f"lease-{namespace}", tmp_path)
    try:
        schedulers.start("admin")
        url = await schedulers.http_url("admin")
        async with httpx2.AsyncClient(base_url=url) as client:

            async def refused() -> bool:
                answer = await client.get("/readyz")
                return answer.status_code == 503 and "admission policy" in answer.text

            await wait_for(refused, 30, "/readyz to say the policy refuses this identity")
            reason = (await client.get("/readyz")).text
            assert f"does not let {ADMIN} write gpupool.io/allocation" in reason
            assert f"install-crds --scheduler-identity {ADMIN}" in reason
            await asyncio.sleep(3)  # long enough for many cycles: nothing is bound, nothing logged
            assert not (await api.get(pod_path))["spec"].get("nodeName")
            log = schedulers.log("admin")
            assert log.count("not ready: the admission policy") == 1, log
            assert "Forbidden" not in log, log
            assert f"bind {namespace}/job" not in log, log  # no 403 per bind

            await _install(api, namespace, (SCHEDULER, ADMIN))  # the fix the message gives

            async def ready() -> bool:
                return (await client.get("/readyz")).status_code == 200

            await wait_for(ready, 60, "/readyz once the identity is listed (no restart)")

            async def bound() -> bool:
                return bool((await api.get(pod_path))["spec"].get("nodeName"))

            await wait_for(bound, 30, "the pod to be bound once allowed")
    finally:
        schedulers.stop_all()
        await _install(api, namespace, (SCHEDULER,))
