"""``gpupool control-plane`` in a pod: a ServiceAccount token from the TokenRequest API, rotated.

The scheduler gets only what a pod gets: ``KUBERNETES_SERVICE_HOST``/``PORT`` and a folder with
``token`` and ``ca.crt`` (``GPUPOOL_SERVICEACCOUNT_DIR`` stands for the kubelet's mount). Its
ServiceAccount is bound to exactly the role of deploy/scheduler-rbac.yaml. Then the token is
made invalid (the ServiceAccount deleted and created again, which changes its uid) and a fresh
one is written the way the kubelet does it (an atomic rename): the scheduler must pick the new
token up and keep binding.
"""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path

import httpx2

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import ApiError, KubeAPI
from gpupool.kube.install.rbac import grant_scheduler_role

from .live_helpers import SchedulerProcesses, create_pods, gpu_pod, make_nodes, wait_for

ACCOUNT = "gpupool-scheduler"


async def _token(api: KubeAPI, namespace: str) -> str:
    """A fresh token of the ServiceAccount from the TokenRequest API."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{ACCOUNT}/token"
    answer = await api.create(path, request)
    token: str = answer["status"]["token"]
    return token


def _write_token(folder: Path, token: str) -> None:
    """Replace the token file atomically, as the kubelet's projected volume does."""
    fresh = folder / ".token.new"
    fresh.write_text(token)
    os.replace(fresh, folder / "token")


async def _service_account(api: KubeAPI, namespace: str) -> None:
    await api.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": ACCOUNT}}
    )


async def test_scheduler_runs_in_cluster_and_survives_token_rotation(
    control_plane: LocalControlPlane, api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    await grant_scheduler_role(
        api, {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}
    )
    await _service_account(api, namespace)
    mount = tmp_path / "serviceaccount"
    mount.mkdir()
    assert control_plane.certs is not None
    shutil.copy(control_plane.certs.ca_cert, mount / "ca.crt")
    old_token = await _token(api, namespace)
    _write_token(mount, old_token)

    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=4)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    await create_pods(api, namespace, [gpu_pod("first", selector=sel)])
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(control_plane.api_port),
        "GPUPOOL_SERVICEACCOUNT_DIR": str(mount),
    }
    schedulers = SchedulerProcesses(None, f"lease-{namespace}", tmp_path, env=env)

    async def bound(name: str) -> bool:
        return bool((await api.get(f"{pods}/{name}"))["spec"].get("nodeName"))

    try:
        schedulers.start("in-pod")
        await wait_for(lambda: bound("first"), 60, "the in-cluster scheduler to bind a pod")
        assert "Forbidden" not in schedulers.log("in-pod")

        # the old token dies with its ServiceAccount's uid
        await api.delete(f"/api/v1/namespaces/{namespace}/serviceaccounts/{ACCOUNT}")
        await _service_account(api, namespace)
        probe = KubeAPI(
            httpx2.AsyncClient(
                base_url=control_plane.server,
                verify=ssl.create_default_context(cafile=str(mount / "ca.crt")),
                headers={"Authorization": f"Bearer {old_token}"},
            )
        )

        async def old_token_refused() -> bool:
            try:
                await probe.get("/api/v1/nodes")
            except ApiError as error:
                if error.status != 401:
                    raise
                return True
            return False

        try:  # the API server caches a token's review for about 10 s
            await wait_for(old_token_refused, 60, "the old token to be refused")
        finally:
            await probe.close()

        _write_token(mount, await _token(api, namespace))
        await create_pods(api, namespace, [gpu_pod("second", selector=sel)])
        await wait_for(lambda: bound("second"), 60, "a bind with the rotated token")
    finally:
        schedulers.stop_all()
