"""The chart as the end-to-end tests install it on the real node: helm and its values.

The node has no pod network (loopback CNI only) and no kube-proxy, so the chart's
``hostNetwork`` and ``apiServer`` settings are on, every port is a free one of this machine (one
network namespace for every pod), and the agent runs on the fake NVML (``agent.fakeGpus``)
without the MPS control daemon (no GPU).
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Iterator
from typing import Any

from gpupool.devcluster.binaries import find_helm
from gpupool.devcluster.nodens import session_path
from gpupool.devcluster.processes import free_port
from gpupool.kube.client.api import KubeAPI

from .conftest import Cluster, wait_for

CHART = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "helm", "gpupool")
RELEASE = "gpupool"
NAMESPACE = "gpupool-system"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
STANDBY = "gpupool-scheduler-standby"
STANDBY_LABEL = "gpupool.io/e2e-standby"
HAMI_LIBRARY = "/var/lib/gpupool/libvgpu.so"  # a node path: each real node has its own

FAKE_GPUS = "h100-islands"
"""The node's fake GPUs: eight H100s in two NVLink islands of four."""


def helm(cluster: Cluster, *args: str, timeout: float = 600) -> str:
    command = [str(find_helm()), *args, f"--kubeconfig={cluster.plane.kubeconfig}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"helm {args[0]}: {done.stderr}\n{done.stdout}"
    return done.stdout


def chart_values(cluster: Cluster, extra: dict[str, str] | None = None) -> list[str]:
    """``--set`` arguments for the real node, with ``extra`` settings on top."""
    repository, tag = cluster.images.gpupool.rsplit(":", 1)
    settings = {
        "image.repository": repository,
        "image.tag": tag,
        "image.pullPolicy": "Never",
        "hostNetwork": "true",
        "apiServer.host": "127.0.0.1",
        "apiServer.port": str(cluster.plane.api_port),
        "controlPlane.port": str(free_port()),
        "webhook.port": str(free_port()),
        "agent.metricsPort": str(free_port()),
        "agent.fakeGpus": FAKE_GPUS,
        "agent.mpsControlDaemon": "false",
        # one node, one network namespace: a second replica could not bind the same port
        "controlPlane.replicas": "1",
        "webhook.replicas": "1",
        **(extra or {}),
    }
    return [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]


async def ready_pods(api: KubeAPI, namespace: str, name: str) -> list[dict[str, Any]]:
    listing = await api.get(
        f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": f"app.kubernetes.io/name={name}"}
    )
    return [
        pod
        for pod in listing["items"]
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod.get("status", {}).get("conditions", [])
        )
        and not pod["metadata"].get("deletionTimestamp")
    ]


def installed_with_hami(cluster: Cluster, extra: dict[str, str] | None = None) -> Iterator[Cluster]:
    """The chart installed with HAMi isolation (no GPUPool), for a module-scoped fixture to
    ``yield from``; uninstalled afterwards.

    HAMi-core needs a GPU, so the node gets a stand-in file at the path the chart names: what
    the tests check is how it is loaded, not what it does.
    """
    stand_in = session_path(cluster.node.session, "/var/lib/gpupool") / "libvgpu.so"
    stand_in.write_bytes(b"")
    hami = {"agent.isolation": "hami", "agent.hamiLibrary": HAMI_LIBRARY, **(extra or {})}
    helm(
        cluster,
        "install",
        RELEASE,
        CHART,
        "-n",
        NAMESPACE,
        "--create-namespace",
        *chart_values(cluster, hami),
        "--wait",
        "--timeout=10m",
        timeout=900,
    )
    try:
        yield cluster
    finally:
        helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=5m")


def standby_of(deployment: dict[str, Any], port: int) -> dict[str, Any]:
    """The chart's control-plane Deployment under another name, on ``port``, one replica.

    A second replica of the chart's Deployment cannot run on the one node: with hostNetwork it
    would bind the first one's port. This one is what a replica on a second node would run
    (same image, arguments, ServiceAccount, Lease and probes), with one more label so that the
    two Deployments' selectors do not overlap.
    """
    spec = deployment["spec"]
    template = copy.deepcopy(spec["template"])
    template["metadata"]["labels"][STANDBY_LABEL] = "true"
    (container,) = template["spec"]["containers"]
    address = [i for i, arg in enumerate(container["args"]) if arg.startswith("--http-address=")]
    assert len(address) == 1, container["args"]
    container["args"][address[0]] = f"--http-address=0.0.0.0:{port}"
    (exposed,) = container["ports"]
    exposed["containerPort"] = port
    labels = {**spec["selector"]["matchLabels"], STANDBY_LABEL: "true"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": STANDBY, "namespace": NAMESPACE},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }


async def remove_standby(api: KubeAPI) -> None:
    """Delete the standby and wait until its pods are gone: one left running after the
    chart's uninstall would create the release's Lease again, outside the release."""
    await api.request(
        "DELETE", f"{DEPLOYMENTS}/{STANDBY}", body={"propagationPolicy": "Foreground"}
    )

    async def gone() -> bool:
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        return not (await api.get(pods, {"labelSelector": STANDBY_LABEL}))["items"]

    await wait_for(gone, 120, "the standby's pods gone")
