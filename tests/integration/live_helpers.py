"""Helpers for live-scheduler tests: pod manifests, scheduler processes, waiting, invariants."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from benchlib.allocation_check import check_allocations, inventory
from cryptography import x509

from gpupool.agent.podresources import HeldDevices
from gpupool.devcluster.fakenodes import FakeGpuNode, create_nodes
from gpupool.kube.client.api import ApiError, KubeAPI

Json = dict[str, Any]


class NoKubelet:
    """The agent's kubelet port where no kubelet runs: no device is held by any pod."""

    async def held(self) -> list[HeldDevices]:
        return []


def gpu_pod(
    name: str,
    *,
    gpus: int = 1,
    memory_mib: int = 0,
    cores: int = 0,
    models: str = "",
    selector: dict[str, str] | None = None,
    finish: bool = False,
    scheduler: str = "gpupool",
) -> Json:
    limits: dict[str, str] = {"gpupool.io/gpu": str(gpus)} if gpus else {}
    if memory_mib:
        limits["gpupool.io/gpu-memory"] = str(memory_mib)
    if cores:
        limits["gpupool.io/gpu-cores"] = str(cores)
    annotations = {"gpupool.io/gpu-model": models} if models else {}
    if finish:
        annotations["gpupool.io/finish"] = "succeeded"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": selector or {},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:latest",
                    "resources": {"limits": limits, "requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }


async def create_pods(api: KubeAPI, namespace: str, pods: Iterable[Json]) -> None:
    await api.create_all(f"/api/v1/namespaces/{namespace}/pods", pods, concurrency=32)


async def list_pods(api: KubeAPI, namespace: str) -> list[Json]:
    return await api.list_items(f"/api/v1/namespaces/{namespace}/pods")


async def wait_for(
    check: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.3
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(interval)


async def make_nodes(api: KubeAPI, label: str, count: int, **shape: Any) -> list[FakeGpuNode]:
    nodes = [
        FakeGpuNode(f"{label}-n{i:03d}", labels=(("test", label),), **shape) for i in range(count)
    ]
    await create_nodes(api, nodes)
    return nodes


def pod_allocation(pod: Json) -> Json | None:
    text = pod["metadata"].get("annotations", {}).get("gpupool.io/allocation")
    return json.loads(text) if text else None


def pending_reason(pod: Json) -> str:
    for condition in pod["status"].get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return str(condition.get("message", ""))
    return ""


async def assert_no_gpu_given_twice(api: KubeAPI, pods: Iterable[Json]) -> int:
    """The shared checker's rules hold for these pods on the cluster's nodes; GPUs in use.

    See :mod:`benchlib.allocation_check`: no GPU over 1000 milli or its memory, whole GPUs
    exclusive, every bound pod with a record naming its node.
    """
    check = check_allocations(pods, inventory(await api.list_items("/api/v1/nodes")))
    assert check.ok, check.message()
    return check.gpus_used


@dataclass
class SchedulerProcesses:
    """``gpupool control-plane`` replicas started by a test; all killed at teardown."""

    kubeconfig: Path | None  # None: in-cluster, from the variables in ``env``
    lease_name: str
    log_dir: Path
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(
        self, identity: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
    ) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{identity}.log").open("ab") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpupool",
                    "control-plane",
                    *(["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []),
                    "--identity",
                    identity,
                    "--lease-name",
                    self.lease_name,
                    "--lease-duration",
                    "4",
                    "--renew-deadline",
                    "3",
                    "--retry-period",
                    "0.5",
                    "--http-address",
                    "127.0.0.1:0",  # any free port: replicas and test runs share the machine
                    *self.extra_args,
                    *args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env, **(env or {})},
            )
        self.running[identity] = process
        return process

    def kill(self, identity: str) -> None:
        process = self.running.pop(identity)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.running.values():
            process.terminate()
        for process in self.running.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()  # else the Popen is collected running: a ResourceWarning, which
                # the warnings-as-errors setting turns into an error in whichever test runs then
        self.running.clear()

    def log(self, identity: str) -> str:
        return (self.log_dir / f"{identity}.log").read_text(errors="replace")

    async def http_url(self, identity: str, timeout: float = 30) -> str:
        """Where the replica serves /healthz, /readyz and /metrics (it logs the address)."""
        marker = "/metrics on "

        async def logged() -> bool:
            return marker in self.log(identity)

        await wait_for(logged, timeout, f"{identity} to log its HTTP address")
        return self.log(identity).split(marker, 1)[1].split()[0]


async def grant_cluster_role(api: KubeAPI, manifest: Path, user: str) -> None:
    """Create the ClusterRole of ``manifest`` (named ``user``) and bind it to the user ``user``."""
    role = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "ClusterRole")
    await api.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    await api.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{user}-test"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": user,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def thirdparty_crds() -> list[dict[str, Any]]:
    """cert-manager's and the Prometheus operator's CRDs (scripts/thirdparty-crds.sh)."""
    configured = os.environ.get("GPUPOOL_THIRDPARTY_CRDS", "")
    found = sorted((Path.home() / ".cache" / "gpupool" / "thirdparty-crds").glob("*/.complete"))
    folder = Path(configured) if configured else (found[-1].parent if found else None)
    if folder is None or not (folder / ".complete").is_file():
        pytest.fail("third-party CRDs not found: run scripts/thirdparty-crds.sh (make test does)")
    return [yaml.safe_load(path.read_text()) for path in sorted(folder.glob("*.yaml"))]


async def establish_crds(api: KubeAPI, crds: list[dict[str, Any]]) -> None:
    """Create ``crds`` (if missing) and wait until they are served."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in crds:
        try:
            await api.create(path, crd)
        except ApiError as error:
            if error.status != 409:
                raise

    async def established() -> bool:
        for crd in crds:
            status = (await api.get(f"{path}/{crd['metadata']['name']}")).get("status", {})
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if conditions.get("Established") != "True":
                return False
        return True

    await wait_for(established, 30, "the third-party CRDs to be established")


async def two_bound_one_pending(
    api: KubeAPI, namespace: str, schedulers: SchedulerProcesses, identity: str = "one"
) -> str:
    """Three one-GPU pods on a two-GPU node under a fresh replica; returns its HTTP URL."""
    sel = {"test": namespace}
    await make_nodes(api, namespace, 1, gpus=2)
    await create_pods(api, namespace, [gpu_pod(name, selector=sel) for name in "abc"])
    schedulers.start(identity)
    url = await schedulers.http_url(identity)

    async def settled() -> bool:
        pods = await list_pods(api, namespace)
        bound = [p for p in pods if p["spec"].get("nodeName")]
        return len(bound) == 2 and sum(1 for p in pods if pending_reason(p)) == 1

    await wait_for(settled, 60, "two pods bound and one pending with a reason")
    return url


async def collection_path(api: KubeAPI, manifest: dict[str, Any]) -> str:
    """The collection path of the manifest's kind, from the API server's discovery."""
    version = manifest["apiVersion"]
    prefix = "/api/v1" if version == "v1" else f"/apis/{version}"
    discovery = await api.get(prefix)
    (resource,) = [
        r for r in discovery["resources"] if r["kind"] == manifest["kind"] and "/" not in r["name"]
    ]
    if resource["namespaced"]:
        return f"{prefix}/namespaces/{manifest['metadata']['namespace']}/{resource['name']}"
    return f"{prefix}/{resource['name']}"


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
"""What ``kubectl get`` asks for: the server computes the printer columns."""


async def printer_columns(api: KubeAPI, path: str) -> dict[str, dict[str, Any]]:
    """``kubectl get``'s table for a collection: per object name, column name to cell."""
    response = await api.http.get(path, headers={"Accept": TABLE})
    response.raise_for_status()
    table = response.json()
    names = [column["name"] for column in table["columnDefinitions"]]
    return {
        row["object"]["metadata"]["name"]: dict(zip(names, row["cells"], strict=True))
        for row in table["rows"]
    }


async def events_about(api: KubeAPI, namespace: str, name: str) -> list[Json]:
    """``events.k8s.io`` Events whose ``regarding`` is the pod ``namespace/name``."""
    events = await api.list_items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [e for e in events if e.get("regarding", {}).get("name") == name]


async def wait_for_events(
    api: KubeAPI,
    namespace: str,
    what: str,
    *,
    regarding: str | None = None,
    reason: str | None = None,
    until: Callable[[list[Json]], bool] = bool,
    timeout: float = 30,
) -> list[Json]:
    """The namespace's Events (about ``regarding``, of ``reason``) once ``until`` holds for them.

    Events are written asynchronously (an event recorder's queue, after the bind, the
    eviction or the pending reason they report), so a test that has already seen the effect
    must still wait for its Event; reading them once at that moment fails on a busy machine.
    By default it waits for at least one.
    """
    found: list[Json] = []

    async def arrived() -> bool:
        nonlocal found
        events = await api.list_items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        found = [
            e
            for e in events
            if (regarding is None or e.get("regarding", {}).get("name") == regarding)
            and (reason is None or e.get("reason") == reason)
        ]
        return until(found)

    await wait_for(arrived, timeout, what)
    return found


async def create_priority_class(api: KubeAPI, name: str, value: int) -> None:
    await api.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        },
    )


async def create_mig_node(api: KubeAPI, name: str, labels: dict[str, str], slices: Json) -> None:
    """A fake node whose allocatable offers MIG slices (``{"1g.10gb": 7}``) on one GPU."""
    manifest = FakeGpuNode(
        name, gpus=1, gpu_model="A100", gpu_memory_mib=81920, labels=tuple(labels.items())
    ).manifest()
    for profile, count in slices.items():
        for part in ("allocatable", "capacity"):
            manifest["status"][part][f"gpupool.io/mig-{profile}"] = str(count)
    await api.create("/api/v1/nodes", manifest)


async def service_account_token(
    api: KubeAPI,
    namespace: str,
    account: str,
    *,
    audience: str | None = None,
    bound_pod: Json | None = None,
) -> str:
    """A token from the TokenRequest API (the ServiceAccount is created if missing).

    ``audience``: the token is valid only for it (default: the API server's own);
    ``bound_pod``: bound to that pod, so it carries the pod's node as the user extra
    ``authentication.kubernetes.io/node-name``, as the kubelet's projected tokens do.
    """
    try:
        await api.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": account}}
        )
    except ApiError as error:
        if error.status != 409:
            raise
    spec: Json = {}
    if audience is not None:
        spec["audiences"] = [audience]
    if bound_pod is not None:
        meta = bound_pod["metadata"]
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "uid": meta["uid"],
        }
    answer = await api.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    token: str = answer["status"]["token"]
    return token


def token_api(server: str, ca: Path, token: str) -> KubeAPI:
    """A client of ``server`` that authenticates with ``token`` only (as a pod's would)."""
    context = ssl.create_default_context(cafile=str(ca))
    headers = {"Authorization": f"Bearer {token}"}
    return KubeAPI(httpx2.AsyncClient(base_url=server, verify=context, headers=headers))


def served_serial(url: str, ca: Path) -> int:
    """The serial of the certificate a fresh TLS handshake with ``url`` gets."""
    host, port = url.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


async def hammer_while(
    url: str, ca: Path, change: Any, seconds: float = 3.0
) -> tuple[int, list[str]]:
    """Fresh TLS connections to ``/healthz`` before, during and after ``change()``.

    Returns:
        (requests answered 200, failures).
    """
    failures: list[str] = []
    answered = [0]
    stop = asyncio.Event()

    async def one_client() -> None:
        context = ssl.create_default_context(cafile=str(ca))
        while not stop.is_set():
            # a new client per request: every request is a new handshake
            async with httpx2.AsyncClient(verify=context, timeout=5) as http:
                try:
                    answer = await http.get(f"{url}/healthz")
                    if answer.status_code != 200:
                        failures.append(f"{answer.status_code} {answer.text}")
                    else:
                        answered[0] += 1
                except httpx2.HTTPError as error:
                    failures.append(repr(error))

    clients = [asyncio.create_task(one_client()) for _ in range(4)]
    await asyncio.sleep(seconds / 3)
    change()
    await asyncio.sleep(2 * seconds / 3)
    stop.set()
    await asyncio.gather(*clients)
    return answered[0], failures


async def grant_role(api: KubeAPI, namespace: str, user: str, rules: list[Json]) -> None:
    """A Role ``<user>-pods`` with ``rules`` in ``namespace``, bound to the user ``user``."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    name = f"{user}-pods"
    await api.create(f"{rbac}/roles", {"metadata": {"name": name}, "rules": rules})
    await api.create(
        f"{rbac}/rolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


async def delete_all_pods(api: KubeAPI, *namespaces: str) -> None:
    """Delete the namespaces' pods at once (no grace) and wait until they are gone.

    A module shares its cluster: pods left pending or bound with pod rules, extra resources or
    host ports slowed every later scheduler, until the 2,000-pod burst timed out.
    """
    for namespace in namespaces:
        await api.request(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods", body={"gracePeriodSeconds": 0}
        )

    async def gone() -> bool:
        for namespace in namespaces:
            if await list_pods(api, namespace):
                return False
        return True

    await wait_for(gone, 120, "the pods deleted")
