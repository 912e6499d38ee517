"""The scheduler runs with only the permissions of deploy/scheduler-rbac.yaml.

It also creates its key pair with them (replacing a key of the retired HMAC scheme) and
publishes the public key, which the agent's Role of deploy/agent-rbac.yaml can read, and
nothing else of the scheduler's namespace.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
import yaml

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.client.signing_key import (
    SigningKeyMissingError,
    load_signing_key,
    load_verifier,
)
from gpupool.kube.install.rbac import grant_scheduler_role
from gpupool.kube.objects import allocation
from gpupool.kube.objects.signing import (
    KEY_SECRET_NAME,
    PRIVATE_KEY_FIELD,
    PUBLIC_KEY_CONFIGMAP,
    PUBLIC_KEY_FIELD,
    RecordSigner,
)

from .live_helpers import (
    SchedulerProcesses,
    create_pods,
    gpu_pod,
    list_pods,
    make_nodes,
    pending_reason,
    pod_allocation,
    service_account_token,
    token_api,
    wait_for,
    wait_for_events,
)

USER = "gpupool-scheduler"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


async def test_scheduler_works_with_exactly_its_role(
    control_plane: LocalControlPlane, api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = control_plane.user_kubeconfig(USER)
    as_user = KubeAPI.from_kubeconfig(kubeconfig)
    try:
        with pytest.raises(ApiError) as refused:  # RBAC is real: nothing before the role
            await as_user.get("/api/v1/pods")
        assert refused.value.status == 403
    finally:
        await as_user.close()

    await grant_scheduler_role(api, USER)
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=2)
    # "fits" is older by more than the API's one-second timestamps, so it is served first
    # (pods of equal priority and age are served in an order of their uids)
    await create_pods(api, namespace, [gpu_pod("fits", gpus=2, selector=sel)])
    await asyncio.sleep(1.1)
    await create_pods(api, namespace, [gpu_pod("waits", selector=sel)])
    schedulers = SchedulerProcesses(kubeconfig, f"lease-{namespace}", tmp_path)
    try:
        schedulers.start("restricted")

        async def settled() -> bool:
            pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
            return bool(pods["fits"]["spec"].get("nodeName")) and bool(
                pending_reason(pods["waits"])
            )

        await wait_for(settled, 30, "a bind and a pending reason written as the restricted user")
        pods = {p["metadata"]["name"]: p for p in await list_pods(api, namespace)}
        record = pod_allocation(pods["fits"])
        assert record is not None
        assert record["scheduler"] == "restricted"
        assert "Insufficient gpupool.io/gpu" in pending_reason(pods["waits"])
        expected = {("fits", "Scheduled"), ("waits", "FailedScheduling")}
        await wait_for_events(  # written after the bind and the reason, asynchronously
            api,
            namespace,
            "the Scheduled and FailedScheduling Events written as the restricted user",
            until=lambda events: (
                expected <= {(e["regarding"]["name"], e["reason"]) for e in events}
            ),
        )
        log = schedulers.log("restricted")
        # a refused request is logged as "403 Forbidden: ..." (ApiError's words); "403" alone
        # also matched a timestamp's milliseconds (",403 INFO") and failed a clean run
        assert "Forbidden" not in log
    finally:
        schedulers.stop_all()


async def _agent_reader(api: KubeAPI, namespace: str) -> None:
    """The agent's ServiceAccount with the key Role of deploy/agent-rbac.yaml, in ``namespace``."""
    documents = [d for d in yaml.safe_load_all((DEPLOY / "agent-rbac.yaml").read_text()) if d]
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces"
    for kind, plural in (("Role", "roles"), ("RoleBinding", "rolebindings")):
        (document,) = [d for d in documents if d["kind"] == kind]
        document["metadata"]["namespace"] = namespace
        await api.create(f"{rbac}/{namespace}/{plural}", document)


async def test_an_hmac_key_is_replaced_and_agents_read_only_the_public_key(
    control_plane: LocalControlPlane, api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    secrets = f"/api/v1/namespaces/{namespace}/secrets"
    config_maps = f"/api/v1/namespaces/{namespace}/configmaps"
    retired = {"metadata": {"name": KEY_SECRET_NAME}, "data": {"key": "a2V5" * 8}}
    await api.create(secrets, retired)  # what a cluster of the HMAC scheme holds
    await grant_scheduler_role(api, USER, namespace)
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=2)
    await create_pods(api, namespace, [gpu_pod("bound", selector=sel)])
    schedulers = SchedulerProcesses(
        control_plane.user_kubeconfig(USER),
        f"lease-{namespace}",
        tmp_path,
        extra_args=("--lease-namespace", namespace),
    )
    try:
        schedulers.start("one")

        async def bound() -> bool:
            pods = await list_pods(api, namespace)
            return any(pod_allocation(p) for p in pods)

        await wait_for(bound, 60, "a bind signed with the new key")
        secret = await api.get(f"{secrets}/{KEY_SECRET_NAME}")
        assert set(secret["data"]) == {PRIVATE_KEY_FIELD}  # the HMAC key is gone
        private = RecordSigner.from_private_pem(base64.b64decode(secret["data"][PRIVATE_KEY_FIELD]))

        # the agent reads the public key, and nothing else of the scheduler's namespace
        await _agent_reader(api, namespace)
        token = await service_account_token(api, "kube-system", "gpupool-agent")
        agent = token_api(control_plane.server, control_plane.folder / "pki" / "ca.crt", token)
        try:
            verifier = await load_verifier(agent, namespace)
            assert verifier.public_pem() == private.public_pem()
            (pod,) = await list_pods(api, namespace)
            record = allocation.decode(pod["metadata"]["annotations"]["gpupool.io/allocation"])
            assert verifier.verify(record, pod["metadata"]["uid"])
            for forbidden in (f"{secrets}/{KEY_SECRET_NAME}", f"{config_maps}/other"):
                with pytest.raises(ApiError) as refused:
                    await agent.get(forbidden)
                assert refused.value.status == 403
        finally:
            await agent.close()

        # a public key someone replaced is put back by the next replica that starts
        forged = RecordSigner.generate().public_pem().decode()
        await api.patch(
            f"{config_maps}/{PUBLIC_KEY_CONFIGMAP}", {"data": {PUBLIC_KEY_FIELD: forged}}
        )
        schedulers.start("two")

        async def corrected() -> bool:
            stored = await api.get(f"{config_maps}/{PUBLIC_KEY_CONFIGMAP}")
            return bool(stored["data"][PUBLIC_KEY_FIELD] == private.public_pem().decode())

        await wait_for(corrected, 60, "the second replica to correct the public key")
        assert "Forbidden" not in schedulers.log("one") + schedulers.log("two")
    finally:
        schedulers.stop_all()


async def test_a_replica_told_not_to_create_the_key_waits_for_the_installers(
    api: KubeAPI, namespace: str
) -> None:
    """As the chart runs it: no key pair appears outside the release, however often it starts."""
    secret = f"/api/v1/namespaces/{namespace}/secrets/{KEY_SECRET_NAME}"
    configmap = f"/api/v1/namespaces/{namespace}/configmaps/{PUBLIC_KEY_CONFIGMAP}"
    with pytest.raises(SigningKeyMissingError, match="made by the installer"):
        await load_signing_key(api, namespace, create=False)
    for path in (secret, configmap):
        with pytest.raises(ApiError) as missing:
            await api.get(path)
        assert missing.value.status == 404, path  # nothing was made
    made = await load_signing_key(api, namespace)  # the installer's pair (as the chart makes it)
    await api.delete(configmap)
    with pytest.raises(SigningKeyMissingError, match=f"configmap {namespace}"):
        await load_signing_key(api, namespace, create=False)
    # the chart's ConfigMap: its ownership labels, no data; the replica fills the data only
    owned = {"app.kubernetes.io/managed-by": "Helm"}
    await api.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": PUBLIC_KEY_CONFIGMAP, "labels": owned}},
    )
    read = await load_signing_key(api, namespace, create=False)  # both there: read, not made
    assert read.public_pem() == made.public_pem()
    stored = await api.get(configmap)
    assert stored["metadata"]["labels"] == owned  # helm still owns it, so uninstall removes it
    assert stored["data"][PUBLIC_KEY_FIELD] == made.public_pem().decode()
