"""End-to-end fixtures: the dev control plane with a real node, as ``make test-e2e`` runs them.

One cluster per test session (a real node takes seconds to become Ready and imports the
images once): etcd, kube-apiserver, kube-controller-manager and kube-scheduler
(``scripts/build-control-plane.sh``), and a real node of containerd, runc and the real kubelet
(``scripts/build-containerd.sh``, ``scripts/build-kubelet.sh``) with gpupool's images imported
(``scripts/build-images.sh``).
Each test works in a namespace of its own. Missing builds or root fail the tests loudly:
skipping would hide exactly what these tests exist to show.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.images import ImageSet, find_images
from gpupool.devcluster.realnode import RealNode, RealNodeConfig
from gpupool.kube.client.api import ApiError, KubeAPI

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]

_namespaces = itertools.count()


@dataclass(frozen=True)
class Cluster:
    """The running cluster: its control plane, its real node and the images on it."""

    plane: LocalControlPlane
    node: RealNode
    images: ImageSet


def _log_dir() -> Path:
    """``out/e2e/real-node`` (replaced each session): containerd's, the kubelet's and the
    pods' logs stay for a look after a failure, outside pytest's rotating temp folders."""
    folder = REPO / "out" / "e2e" / "real-node"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    assert os.geteuid() == 0, "the end-to-end tests need root (a real node runs containers)"
    images = find_images()
    folder: Path = tmp_path_factory.mktemp("control-plane")
    plane = LocalControlPlane(folder=folder, keep_folder=True, controllers=True)
    plane.start()
    try:
        plane.start_kube_scheduler()
        node = RealNode(plane, RealNodeConfig("e2e-node", images, log_dir=_log_dir()))
        try:
            node.start()
            yield Cluster(plane, node, images)
        finally:
            node.stop()
    finally:
        plane.stop()


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[KubeAPI]:
    client = KubeAPI.from_kubeconfig(cluster.plane.kubeconfig)
    try:
        yield client
    finally:
        await client.close()


async def wait_for(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.5)


async def create_namespace(api: KubeAPI, name: str, *, exist_ok: bool = False) -> None:
    """Create a namespace and wait for its ``default`` ServiceAccount (pods need it).

    ``exist_ok``: the release's namespace, which ``helm uninstall`` leaves behind for the next
    module (as it would for a platform team).
    """
    try:
        await api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
    except ApiError as error:
        if not (exist_ok and error.status == 409):
            raise

    async def has_default_account() -> bool:
        try:
            await api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
        except ApiError:
            return False
        return True

    await wait_for(has_default_account, 30, f"the default ServiceAccount in {name}")


@pytest.fixture
async def namespace(api: KubeAPI) -> str:
    name = f"e2e-{next(_namespaces)}"
    await create_namespace(api, name)
    return name
