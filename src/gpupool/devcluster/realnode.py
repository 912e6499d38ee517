"""A real node joined to the dev control plane: containerd, runc and the real kubelet.

Where kwok fakes a node's status, this one runs containers: the kubelet
(``scripts/build-kubelet.sh``) drives containerd 2.x (``scripts/build-containerd.sh``) through
CRI, containerd resolves CDI devices from ``/var/run/cdi`` and starts containers with runc, in
the node's own cgroup subtree. Pods use ``hostNetwork`` (the only CNI network is loopback), and
images come from OCI archives imported at start (``scripts/build-images.sh``), since no
registry can be reached.

Everything the node makes is its own (see :mod:`.nodens` and :mod:`.cgroups`), so two nodes on
one machine do not collide, and :meth:`RealNode.stop` leaves nothing behind: the kubelet stops
first (so it restarts nothing), then every pod's processes are killed through the node's
cgroups, containerd stops, leftover shims are killed through the node's mount namespace (which
takes every mount with it), and the cgroups and the session folder are removed.

Needs root (mount namespaces, cgroups, runc).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.devcluster import cgroups
from gpupool.devcluster.binaries import CONTAINERD, KUBELET, MissingBinariesError, find
from gpupool.devcluster.containerd import Containerd, ContainerdPaths
from gpupool.devcluster.controlplane import LocalControlPlane
from gpupool.devcluster.images import ImageSet
from gpupool.devcluster.kubelet import (
    NODES_GROUP,
    Kubelet,
    KubeletSettings,
    grant_node_role,
    node_user,
)
from gpupool.devcluster.nodens import NodeNamespace, session_path
from gpupool.devcluster.processes import ManagedProcess, StartsAndStops
from gpupool.devcluster.session import node_is_ready
from gpupool.kube.client.api import KubeAPI

READY_TIMEOUT = 120.0
DEFAULT_LABELS = {"gpupool.io/gpu-node": "true"}
"""What the chart's agent DaemonSet selects (``agent.nodeSelector``)."""


class RealNodeError(RuntimeError):
    """The real node could not start; the message says why (and what to run)."""


@dataclass(frozen=True, slots=True)
class RealNodeConfig:
    """What the real node is.

    Attributes:
        name: The Node's name.
        images: The images to import (``scripts/build-images.sh``); their pause image is the
            pod sandbox.
        labels: Node labels it registers with.
        log_dir: Where containerd's and the kubelet's logs go (kept); ``None``: in the session
            folder, removed with it.
    """

    name: str
    images: ImageSet
    labels: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_LABELS))
    log_dir: Path | None = None


def find_runc() -> Path:
    """The runc on ``PATH`` (Debian's package; ``scripts/build-containerd.sh`` installs it)."""
    found = shutil.which("runc")
    if found is None:
        raise MissingBinariesError("runc is missing: run scripts/build-containerd.sh as root")
    return Path(found)


class RealNode(StartsAndStops):
    """One real node of ``plane``; use as a context manager or call start and stop.

    Args:
        plane: The running control plane it joins.
        config: Name, images, labels.
    """

    def __init__(self, plane: LocalControlPlane, config: RealNodeConfig) -> None:
        if os.geteuid() != 0:
            raise RealNodeError("a real node needs root (mount namespaces, cgroups, runc)")
        self.plane = plane
        self.config = config
        containerd_bin, kubelet_bin, runc = find(CONTAINERD), find(KUBELET), find_runc()
        # short: unix socket paths under it must stay below 108 bytes
        self.session = Path(tempfile.mkdtemp(prefix="gpn-", dir="/tmp"))
        self.logs = config.log_dir or self.session / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.namespace = NodeNamespace(self.session, self.logs)
        self.cgroup_root = f"gpupool-{self.session.name}"
        self.cgroup_folders: list[Path] = []
        self.containerd = Containerd(
            ContainerdPaths(self.session / "containerd"),
            containerd_bin,
            runc,
            config.images.pause,
            self.logs,
        )
        self.kubelet = Kubelet(
            KubeletSettings(
                name=config.name,
                kubeconfig=self.session / "node.kubeconfig",
                containerd_socket=self.containerd.paths.socket,
                cgroup_root=f"/{self.cgroup_root}",
                folder=self.session / "kubelet-config",
                labels=config.labels,
            ),
            kubelet_bin,
            self.logs,
        )

    @property
    def name(self) -> str:
        """The Node's name."""
        return self.config.name

    @property
    def cdi_dir(self) -> Path:
        """``/var/run/cdi`` of the node, as seen from outside it (where CDI specs go)."""
        return session_path(self.session, "/run/cdi")

    @property
    def kubelet_dir(self) -> Path:
        """``/var/lib/kubelet`` of the node, as seen from outside it."""
        return session_path(self.session, "/var/lib/kubelet")

    @property
    def device_plugin_dir(self) -> Path:
        """The kubelet's device-plugin folder (its ``kubelet.sock``), from outside the node."""
        return self.kubelet_dir / "device-plugins"

    @property
    def pod_resources_socket(self) -> Path:
        """The kubelet's PodResources socket, from outside the node."""
        return self.kubelet_dir / "pod-resources" / "kubelet.sock"

    def processes(self) -> dict[str, ManagedProcess]:
        """The node's long-running processes (for a session to notice one dying)."""
        running = {"containerd": self.containerd.process, "kubelet": self.kubelet.process}
        return {name: process for name, process in running.items() if process is not None}

    def usage_text(self) -> str:
        """What to tell a person about the node once it is Ready."""
        images = self.config.images
        return (
            f"real node: {self.name} (containerd {self.containerd.paths.socket}, kubelet, runc)\n"
            f"  images imported: {', '.join(sorted(images.names.values()))}\n"
            f"  CDI specs: {self.cdi_dir}   device plugins: {self.device_plugin_dir}\n"
            f"  logs: {self.logs}\n"
            "  pods run here with hostNetwork: true and an imported image, e.g.\n"
            f"    image: {images.test_workload}   command: [sleep, '3600']\n"
            "  the chart: helm install gpupool deploy/helm/gpupool -n gpupool-system "
            "--create-namespace \\\n"
            f"    --set hostNetwork=true,apiServer.host=127.0.0.1,"
            f"apiServer.port={self.plane.api_port},image.pullPolicy=Never \\\n"
            "    --set agent.fakeGpus=h100,agent.mpsControlDaemon=false,agent.isolation=visible,"
            "controlPlane.replicas=1,webhook.replicas=1\n"
        )

    def start(self) -> None:
        """Namespace, cgroups, containerd (with the images), kubelet; wait until Ready.

        Raises:
            StartError: containerd or the kubelet exited or did not answer.
            TimeoutError: The Node was not Ready in time (the kubelet's log is in the message).
        """
        self.namespace.start()
        self.cgroup_folders = cgroups.create_root(self.cgroup_root)
        self.containerd.write_config()
        self.start_containerd()
        for image in self.config.images.archives:
            self.containerd.import_image(image)
        node_kubeconfig = self.plane.user_kubeconfig(node_user(self.name), NODES_GROUP)
        shutil.copyfile(node_kubeconfig, self.kubelet.settings.kubeconfig)
        asyncio.run(self._grant_node_role())
        self.kubelet.write_config()
        self.start_kubelet()
        asyncio.run(self.wait_ready())

    async def _grant_node_role(self) -> None:
        api = KubeAPI.from_kubeconfig(self.plane.kubeconfig)
        try:
            await grant_node_role(api, self.name)
        finally:
            await api.close()

    def start_containerd(self) -> None:
        """Start (or restart) containerd in the node's namespace."""
        self.containerd.start(self.namespace.enter([]))

    def start_kubelet(self) -> None:
        """Start (or restart) the kubelet in the node's namespace."""
        self.kubelet.start(self.namespace.enter([]))

    async def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Poll the Node until its Ready condition is True.

        Raises:
            TimeoutError: Not Ready after ``timeout`` seconds; the message ends with the
                kubelet's log.
        """
        api = KubeAPI.from_kubeconfig(self.plane.kubeconfig)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                listing = await api.get(
                    "/api/v1/nodes", {"fieldSelector": f"metadata.name={self.name}"}
                )
                if any(node_is_ready(node) for node in listing["items"]):
                    return
                await asyncio.sleep(0.5)
        finally:
            await api.close()
        tail = self.kubelet.process.log_tail(30) if self.kubelet.process else ""
        raise TimeoutError(f"node {self.name} not Ready after {timeout:.0f} s:\n{tail}")

    def _keep_pod_logs(self) -> None:
        """Copy the pods' logs (``/var/log/pods``) to a log folder that outlives the session."""
        if self.config.log_dir is not None:
            source = session_path(self.session, "/var/log/pods")
            shutil.copytree(source, self.logs / "pods", dirs_exist_ok=True)

    def stop(self) -> None:
        """Stop everything and remove what the node made (see the module's docstring).

        Every step runs even when an earlier one failed (a half-stopped node would leave
        cgroups or a namespace behind); the first failure is raised at the end.
        """
        steps = (
            self.kubelet.stop,
            lambda: cgroups.kill_below(self.cgroup_folders),
            self.containerd.stop,
            self.namespace.stop,
            lambda: cgroups.remove_tree(self.cgroup_folders),
            self._keep_pod_logs,
            lambda: shutil.rmtree(self.session, ignore_errors=True),
        )
        failures: list[Exception] = []
        for step in steps:
            try:
                step()
            except Exception as error:  # collected: the first one is raised at the end
                failures.append(error)
        if failures:
            raise failures[0]
