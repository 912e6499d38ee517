"""Fixtures for tests against a real local control plane (etcd + kube-apiserver + kwok).

The binaries come from ``scripts/build-control-plane.sh`` (``make test`` builds them and exports
``GPUPOOL_CONTROLPLANE_BIN``). A missing binary fails the tests loudly: skipping would hide
exactly the gap these tests exist to close.

One control plane per test module (starting one takes about 3 s); each test works in its own
namespace and on its own nodes, so tests in a module do not see each other's pods.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from gpupool.devcluster.certs import write_serving_cert
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.kube.client.api import KubeAPI

from .live_helpers import SchedulerProcesses
from .webhook_helpers import WebhookProcess

pytestmark = pytest.mark.integration

_namespaces = itertools.count()


@pytest.fixture(scope="module")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LocalControlPlane]:
    """etcd, kube-apiserver and kwok (with gpupool's stages) for one test module.

    A module that sets ``CONTROLLERS = True`` gets kube-controller-manager too.
    """
    folder: Path = tmp_path_factory.mktemp("control-plane")
    controllers = getattr(request.module, "CONTROLLERS", False)
    plane = LocalControlPlane(folder=folder, keep_folder=True, controllers=controllers)
    plane.start()
    try:
        plane.start_kwok()
        yield plane
    finally:
        plane.stop()


@pytest.fixture
async def api(control_plane: LocalControlPlane) -> AsyncIterator[KubeAPI]:
    """An admin client for the test's control plane."""
    client = KubeAPI.from_kubeconfig(control_plane.kubeconfig)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def namespace(api: KubeAPI) -> str:
    """A fresh namespace for one test."""
    name = f"t{next(_namespaces)}-{asyncio.get_running_loop().time():.0f}"
    await api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test item, for fixtures that say more on a failure."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


REPLICA_LOG_LINES = 60


@pytest.fixture
def schedulers(
    control_plane: LocalControlPlane, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[SchedulerProcesses]:
    """``gpupool control-plane`` replicas for one test, on a Lease of the test's own.

    When the test failed, the end of each replica's log is printed (pytest shows it under the
    failure): the temporary folder holding the logs is gone by the time anyone looks, and a
    replica that stalled says why only there.
    """
    processes = SchedulerProcesses(control_plane.kubeconfig, f"lease-{namespace}", tmp_path)
    try:
        yield processes
    finally:
        processes.stop_all()
        called = getattr(request.node, "report_call", None)
        if called is not None and called.failed:
            for log in sorted(tmp_path.glob("*.log")):
                tail = log.read_text(errors="replace").splitlines()[-REPLICA_LOG_LINES:]
                print(f"--- {log.name} (last {len(tail)} lines) ---", *tail, sep="\n")


@pytest.fixture(scope="module")
def webhook_tls(control_plane: LocalControlPlane) -> tuple[Path, Path, Path]:
    """(CA, certificate, key) for a webhook at 127.0.0.1, signed by the cluster's test CA."""
    pki = control_plane.folder / "pki"
    cert, key = write_serving_cert(pki, "webhook", ["127.0.0.1"])
    return pki / "ca.crt", cert, key


@pytest.fixture
def start_webhook(
    control_plane: LocalControlPlane, webhook_tls: tuple[Path, Path, Path], tmp_path: Path
) -> Iterator[Callable[..., WebhookProcess]]:
    """Starts ``gpupool webhook`` processes (ready: caches synced); all stop after the test.

    Each runs as the admin unless given another ``kubeconfig``.
    """
    ca, cert, key = webhook_tls
    started: list[WebhookProcess] = []

    def start(kubeconfig: Path | None = None) -> WebhookProcess:
        log = tmp_path / f"webhook-{len(started)}.log"
        process = WebhookProcess(kubeconfig or control_plane.kubeconfig, cert, key, ca, log)
        started.append(process)
        process.wait_ready()
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()
