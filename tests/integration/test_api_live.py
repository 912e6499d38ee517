"""The REST API of a running ``gpupool control-plane`` on a real kube-apiserver, over real TLS.

* Live: the leader's API (HTTPS, its certificate from the cluster's test CA) shows the nodes,
  every bound pod's share by namespace/name, and the pending pod with the reason the scheduler
  wrote into its condition; ``gpupool explain`` reads it with a token and the CA; a standby says
  it has no snapshot.
* Access, with real tokens from the TokenRequest API reviewed by the real API server: no token,
  or a token for the API server's own audience, is a 401; a tenant whose ServiceAccount may list
  pods in its namespace sees its namespace's pending pods, audit and cost and nothing of the
  other tenant's, gets a 403 asking for the other namespace or for a cluster-wide view; a reader
  that may list pods everywhere sees everything.
* A renewed certificate (the mounted Secret's files swapped) is served from the next handshake
  on, by the same process, while requests keep succeeding.
* schemathesis, from the OpenAPI document the process serves, over TLS with a real token: no
  answer is a server error or differs from its documented schema.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import requests
import schemathesis
from cryptography import x509
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.api.auth import API_AUDIENCE
from gpupool.devcluster.certs import SecretVolume, write_serving_cert
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.install.crds import install_crds

from .live_helpers import (
    SchedulerProcesses,
    create_pods,
    gpu_pod,
    hammer_while,
    list_pods,
    make_nodes,
    pending_reason,
    served_serial,
    service_account_token,
    two_bound_one_pending,
    wait_for,
)

Json = dict[str, Any]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
LIST_PODS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]


def _ca(control_plane: LocalControlPlane) -> Path:
    return control_plane.folder / "pki" / "ca.crt"


def _serving(control_plane: LocalControlPlane, volume: SecretVolume, name: str) -> None:
    """A serving certificate for 127.0.0.1 from the cluster's CA, published in ``volume``."""
    cert, key = write_serving_cert(control_plane.folder / "pki", name, ["127.0.0.1"])
    volume.write({"tls.crt": cert.read_bytes(), "tls.key": key.read_bytes()})


def _tls_args(volume: SecretVolume) -> tuple[str, ...]:
    return ("--tls-cert", str(volume.path("tls.crt")), "--tls-key", str(volume.path("tls.key")))


def _client(url: str, control_plane: LocalControlPlane, token: str = "") -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = ssl.create_default_context(cafile=str(_ca(control_plane)))
    return httpx2.AsyncClient(base_url=url, verify=context, headers=headers, timeout=10)


async def reader_token(api: KubeAPI, namespace: str, account: str, *, everywhere: bool) -> str:
    """A gpupool-audience token of a ServiceAccount that may list pods (in ``namespace`` or all)."""
    name = f"{namespace}-{account}"
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    if everywhere:
        await api.create(f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": LIST_PODS})
        binding = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
        await api.create(
            f"{RBAC}/clusterrolebindings",
            {"metadata": {"name": name}, "roleRef": binding, "subjects": subject},
        )
    else:
        base = f"{RBAC}/namespaces/{namespace}"
        await api.create(f"{base}/roles", {"metadata": {"name": name}, "rules": LIST_PODS})
        binding = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
        await api.create(
            f"{base}/rolebindings",
            {"metadata": {"name": name}, "roleRef": binding, "subjects": subject},
        )
    return await service_account_token(api, namespace, account, audience=API_AUDIENCE)


@pytest.fixture
def tls_schedulers(
    control_plane: LocalControlPlane, namespace: str, tmp_path: Path, secret_volume: SecretVolume
) -> Iterator[SchedulerProcesses]:
    """Replicas serving HTTPS with a certificate (``api-old``) from ``secret_volume``."""
    _serving(control_plane, secret_volume, "api-old")
    schedulers = SchedulerProcesses(
        control_plane.kubeconfig, f"lease-{namespace}", tmp_path, _tls_args(secret_volume)
    )
    try:
        yield schedulers
    finally:
        schedulers.stop_all()


async def test_live_api_shows_shares_and_the_pending_reason(
    api: KubeAPI,
    namespace: str,
    control_plane: LocalControlPlane,
    tls_schedulers: SchedulerProcesses,
) -> None:
    schedulers = tls_schedulers
    url = await two_bound_one_pending(api, namespace, schedulers)
    assert url.startswith("https://127.0.0.1:")
    token = await reader_token(api, namespace, "admin-reader", everywhere=True)
    pods = await list_pods(api, namespace)
    waiting = next(p for p in pods if pending_reason(p))
    key = f"{namespace}/{waiting['metadata']['name']}"
    async with _client(url, control_plane, token) as http:
        ours = [
            n for n in (await http.get("/api/v1/nodes")).json() if n["name"].startswith(namespace)
        ]
        assert len(ours) == 1
        shares = [s for gpu in ours[0]["gpus"] for s in gpu["shares"]]
        bound = {f"{namespace}/{p['metadata']['name']}" for p in pods if p["spec"].get("nodeName")}
        assert {s["pod"] for s in shares} == bound
        # a team is the queue its pods are charged to: no GPUQueue serves the namespace here
        assert {s["team"] for s in shares} == {"default"}
        pending = {p["pod"]: p for p in (await http.get("/api/v1/pending")).json()}
        assert pending[key]["reason"] == pending_reason(waiting)
        assert pending[key]["category"] == "insufficient_resources"
        assert (await http.get("/api/v1/cluster")).json()["source"] == "live"
        explained = await http.get(f"/api/v1/pending/{key}")
        assert explained.status_code == 200
        assert explained.json()["closest"][0]["node"] == ours[0]["name"]
        page = await http.get("/")
        assert page.status_code == 200
        assert key in page.text
        assert (await http.get("/metrics")).status_code == 200  # probes and scrapes: open

    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "gpupool", "explain", key, "--server", url, "--token", token],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GPUPOOL_CA_FILE": str(_ca(control_plane))},
    )
    assert done.returncode == 0, done.stderr
    assert "Insufficient" in done.stdout

    schedulers.start("two")
    standby = await schedulers.http_url("two")
    async with _client(standby, control_plane, token) as http:
        cluster = (await http.get("/api/v1/cluster")).json()
        assert cluster["source"].startswith("live (standby")
        assert cluster["nodes"] == 0


async def _tenant(api: KubeAPI, namespace: str, node_gpus: int) -> None:
    """A namespace with its own queue and node: two one-GPU pods bound, one pending."""
    await api.create(
        "/apis/gpupool.io/v1alpha1/gpuqueues",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GPUQueue",
            "metadata": {"name": namespace},
            "spec": {"namespaces": [namespace]},
        },
    )
    await make_nodes(api, namespace, 1, gpus=node_gpus)
    sel = {"test": namespace}
    await create_pods(api, namespace, [gpu_pod(n, selector=sel) for n in ("a", "b", "c")])


async def test_tenants_see_only_their_namespaces_with_real_tokens(
    api: KubeAPI, namespace: str, control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    await install_crds(api)
    mine, other = namespace, f"{namespace}-other"
    await api.create("/api/v1/namespaces", {"metadata": {"name": other}})
    for tenant in (mine, other):
        await _tenant(api, tenant, node_gpus=2)
    store = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
    schedulers = SchedulerProcesses(
        control_plane.kubeconfig, f"lease-{namespace}", tmp_path, ("--db", store)
    )
    try:
        schedulers.start("one")
        url = await schedulers.http_url("one")  # plain HTTP: loopback, and no --insecure-local
        tenant = await reader_token(api, mine, "reader", everywhere=False)
        everyone = await reader_token(api, mine, "admin-reader", everywhere=True)
        elsewhere = await service_account_token(api, mine, "reader")  # the API server's audience

        async def settled() -> bool:
            pods = await list_pods(api, mine) + await list_pods(api, other)
            return sum(1 for p in pods if p["spec"].get("nodeName")) == 4

        await wait_for(settled, 60, "two pods bound in each namespace")
        async with httpx2.AsyncClient(base_url=url, timeout=10) as http:
            await _check_refusals(http, tenant, elsewhere, mine, other)
            await _check_tenant_view(http, tenant, everyone, mine, other)
    finally:
        schedulers.stop_all()


async def _check_refusals(
    http: httpx2.AsyncClient, tenant: str, elsewhere: str, mine: str, other: str
) -> None:
    missing = await http.get("/api/v1/pending")
    assert missing.status_code == 401  # loopback is no identity
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = await http.get("/api/v1/pending", headers={"Authorization": f"Bearer {elsewhere}"})
    assert wrong.status_code == 401, wrong.text  # a token for the API server is not for us
    assert f"audience {API_AUDIENCE}" in wrong.text
    bearer = {"Authorization": f"Bearer {tenant}"}
    for path in (f"/api/v1/pending?namespace={other}", f"/api/v1/audit?namespace={other}"):
        refused = await http.get(path, headers=bearer)
        assert refused.status_code == 403, path
        assert f"may not list pods in namespace {other}" in refused.text
    for name in "abc":  # whichever of them waits: 403 before the view is read
        assert (
            await http.get(f"/api/v1/pending/{other}/{name}", headers=bearer)
        ).status_code == 403
    for path in ("/api/v1/cluster", "/api/v1/nodes", "/"):
        refused = await http.get(path, headers=bearer)
        assert refused.status_code == 403, path
        assert f"system:serviceaccount:{mine}:reader may not list pods in all" in refused.text


async def _check_tenant_view(
    http: httpx2.AsyncClient, tenant: str, everyone: str, mine: str, other: str
) -> None:
    def get(path: str, token: str) -> Any:
        return http.get(path, headers={"Authorization": f"Bearer {token}"})

    own = [p["pod"] for p in (await get("/api/v1/pending", tenant)).json()]
    assert len(own) == 1
    assert own[0].startswith(f"{mine}/")
    every = {p["pod"].split("/")[0] for p in (await get("/api/v1/pending", everyone)).json()}
    assert {mine, other} <= every
    assert (await get(f"/api/v1/pending/{own[0]}", tenant)).status_code == 200

    async def audited() -> bool:
        items = (await get("/api/v1/audit", everyone)).json()["items"]
        return {i["subject"].split("/")[0] for i in items if i["kind"] == "bind"} >= {mine, other}

    await wait_for(audited, 30, "both namespaces' binds in the audit store")
    audit = (await get("/api/v1/audit", tenant)).json()
    assert audit["configured"] is True
    assert audit["items"]
    assert {item["subject"].split("/")[0] for item in audit["items"]} == {mine}

    async def billed() -> bool:
        teams = {line["team"] for line in (await get("/api/v1/cost", everyone)).json()["teams"]}
        return {mine, other} <= teams

    await wait_for(billed, 30, "both queues' allocations in the store")
    cost = (await get("/api/v1/cost", tenant)).json()
    assert [line["team"] for line in cost["teams"]] == [mine]


async def test_a_renewed_certificate_is_served_without_a_restart(
    control_plane: LocalControlPlane,
    secret_volume: SecretVolume,
    tls_schedulers: SchedulerProcesses,
) -> None:
    schedulers = tls_schedulers
    process = schedulers.start("one")
    url = await schedulers.http_url("one")
    ca = _ca(control_plane)
    old = await asyncio.to_thread(served_serial, url, ca)
    answered, failures = await hammer_while(
        url, ca, lambda: _serving(control_plane, secret_volume, "api-new")
    )
    assert failures == []
    assert answered > 10
    new = await asyncio.to_thread(served_serial, url, ca)
    assert new != old
    assert (
        x509.load_pem_x509_certificate(secret_volume.path("tls.crt").read_bytes()).serial_number
        == new
    )
    assert process.poll() is None  # the same process, never restarted


@pytest.fixture(scope="module")
def live_over_tls(
    control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Path]]:
    """A leader serving its API over TLS, with pods to show; (URL, cluster-wide token, CA)."""
    folder = tmp_path_factory.mktemp("schemathesis")
    volume = SecretVolume(folder / "tls")
    _serving(control_plane, volume, "api-fuzz")
    schedulers = SchedulerProcesses(
        control_plane.kubeconfig, "lease-fuzz", folder, _tls_args(volume)
    )

    async def setup() -> tuple[str, str]:
        api = KubeAPI.from_kubeconfig(control_plane.kubeconfig)
        try:
            await api.create("/api/v1/namespaces", {"metadata": {"name": "fuzz"}})
            url = await two_bound_one_pending(api, "fuzz", schedulers)
            return url, await reader_token(api, "fuzz", "fuzzer", everywhere=True)
        finally:
            await api.close()

    try:
        url, token = asyncio.run(setup())
        yield url, token, _ca(control_plane)
    finally:
        schedulers.stop_all()


@pytest.fixture(scope="module")
def live_session(live_over_tls: tuple[str, str, Path]) -> Iterator[requests.Session]:
    """One keep-alive HTTPS session with the token, verifying the server against the CA."""
    _, token, ca = live_over_tls
    with requests.Session() as session:
        session.trust_env = False  # REQUESTS_CA_BUNDLE would replace the cluster's CA
        session.headers["Authorization"] = f"Bearer {token}"
        session.verify = str(ca)
        yield session


@pytest.fixture(scope="module")
def live_schema(
    live_over_tls: tuple[str, str, Path], live_session: requests.Session
) -> schemathesis.schemas.BaseSchema:
    """The OpenAPI document the process serves, read over TLS with the token."""
    answer = live_session.get(f"{live_over_tls[0]}/api/openapi.json", timeout=10)
    assert answer.status_code == 200, answer.text
    return schemathesis.openapi.from_dict(answer.json())


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_schemathesis_over_tls_with_a_real_token(
    live_over_tls: tuple[str, str, Path],
    live_session: requests.Session,
    live_schema: Any,
    data: st.DataObject,
) -> None:
    url, _, ca = live_over_tls
    case = data.draw(live_schema.as_strategy())
    case.call_and_validate(base_url=url, session=live_session, verify=str(ca))
