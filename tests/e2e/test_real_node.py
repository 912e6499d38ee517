"""A real node runs real containers, and containerd applies CDI specs on the agent's path.

Pods run the test-workload image on containerd and runc under the real kubelet. A device
plugin that speaks the agent's protocol (:mod:`.device_plugin`) hands out one fake device: a
real character device with a major no driver owns. What the container sees is read from its
log through the API server and the kubelet, as a user would with ``kubectl logs``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpupool.agent.cdi import device_name, spec_path
from gpupool.agent.fakedevices import make_char_device, unused_char_major
from gpupool.kube.client.api import KubeAPI

from .conftest import Cluster, wait_for
from .device_plugin import (
    CONTAINER_DEVICE,
    ENV_TOKEN,
    FakeDevicePlugin,
)

pytestmark = pytest.mark.e2e

RESOURCE = "e2e.gpupool.io/fake"
MINOR = 7


def _inspect(major: int) -> str:
    """What the container reports about its device, as ``key=value`` lines."""
    return f"""
echo "device=$(stat -c '%F %t:%T' {CONTAINER_DEVICE})"
echo "token=${ENV_TOKEN}"
grep -q 'c {major}:{MINOR} rwm' /sys/fs/cgroup/devices/devices.list && echo cgroup=allowed
cat {CONTAINER_DEVICE} 2>&1 | sed 's/^/open=/'
echo "pid1=$(tr '\\0' ' ' < /proc/1/cmdline)"
"""


def _pod(name: str, image: str, command: str, limits: dict[str, str] | None = None) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": "e2e-node",
            "hostNetwork": True,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", command],
                    "resources": {"limits": limits or {}},
                }
            ],
        },
    }


async def _finished(api: KubeAPI, path: str, timeout: float = 90) -> Any:
    """The pod once it Succeeded or Failed."""

    async def done() -> bool:
        phase = (await api.get(path)).get("status", {}).get("phase")
        return phase in ("Succeeded", "Failed")

    await wait_for(done, timeout, f"{path} to finish")
    return await api.get(path)


async def _log(api: KubeAPI, path: str) -> dict[str, str]:
    text = (await api.request("GET", f"{path}/log")).decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


async def test_a_pod_of_the_workload_image_runs_to_completion(
    cluster: Cluster, api: KubeAPI, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods/hello"
    command = "echo uid=$(id -u); echo kernel=$(uname -s); echo shm=$(stat -f -c %T /dev/shm)"
    await api.create(
        f"/api/v1/namespaces/{namespace}/pods", _pod("hello", cluster.images.test_workload, command)
    )
    pod = await _finished(api, path)
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert terminated["containerID"].startswith("containerd://")
    seen = await _log(api, path)
    assert seen == {"uid": "0", "kernel": "Linux", "shm": "tmpfs"}


@pytest.fixture
async def plugin(cluster: Cluster, api: KubeAPI) -> AsyncIterator[FakeDevicePlugin]:
    node = cluster.node
    major = unused_char_major()
    host_device = node.session / "fake-dev" / "fake0"
    make_char_device(host_device, major, MINOR)
    served = FakeDevicePlugin(RESOURCE, node.device_plugin_dir, node.cdi_dir, host_device)
    await served.start()

    async def listed() -> bool:
        node_object = await api.get(f"/api/v1/nodes/{node.name}")
        return node_object["status"].get("allocatable", {}).get(RESOURCE) == "1"

    try:
        await wait_for(listed, 60, f"the kubelet to list {RESOURCE}")
        yield served
    finally:
        await served.stop()


async def test_containerd_injects_the_cdi_device_the_plugin_named(
    cluster: Cluster, api: KubeAPI, namespace: str, plugin: FakeDevicePlugin
) -> None:
    major = os.major(plugin.host_device.stat().st_rdev)
    path = f"/api/v1/namespaces/{namespace}/pods/cdi"
    await api.create(
        f"/api/v1/namespaces/{namespace}/pods",
        _pod("cdi", cluster.images.test_workload, _inspect(major), {RESOURCE: "1"}),
    )
    pod = await _finished(api, path)
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    seen = await _log(api, path)
    token = plugin.prestarted[-1]
    assert spec_path(cluster.node.cdi_dir, token).is_file()
    # the node, with the host device's major and minor (stat prints them in hex)
    assert seen["device"] == f"character special file {major:x}:{MINOR:x}"
    assert seen["token"] == token  # the spec's environment edit
    assert seen["cgroup"] == "allowed"  # runc wrote the device rule
    # the cgroup let open() reach the kernel, which has no driver for the major: ENXIO, not EPERM
    assert seen["open"] == f"cat: can't open '{CONTAINER_DEVICE}': No such device or address"
    assert seen["pid1"].startswith("/bin/sh -c")


async def test_a_cdi_device_without_a_spec_fails_the_container(
    cluster: Cluster, api: KubeAPI, namespace: str, plugin: FakeDevicePlugin
) -> None:
    """A refused pod's token has no spec: containerd must fail it, never start it without."""
    plugin.write_specs = False
    await api.create(
        f"/api/v1/namespaces/{namespace}/pods",
        _pod("refused", cluster.images.test_workload, "echo started", {RESOURCE: "1"}),
    )
    path = f"/api/v1/namespaces/{namespace}/pods/refused"

    def waiting(pod: Any) -> Any:
        statuses = pod.get("status", {}).get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("waiting", {})

    async def failed_to_create() -> bool:
        return bool(waiting(await api.get(path)).get("reason") == "CreateContainerError")

    # the sandbox comes first; on a busy two-core machine it took more than a minute once
    await wait_for(failed_to_create, 120, "CreateContainerError for the pod without a spec")
    pod = await api.get(path)
    message = waiting(pod)["message"]
    token = plugin.prestarted[-1]
    assert device_name(token) in message
    assert "unresolvable CDI devices" in message
    assert pod["status"]["phase"] == "Pending"
