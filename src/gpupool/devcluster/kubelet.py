"""The real kubelet of a real node: its identity, its configuration and its process.

The kubelet is ``k8s.io/kubernetes/cmd/kubelet`` at the control plane's version
(``scripts/build-kubelet.sh``), on containerd's CRI socket. It joins the dev cluster as a node
would: a client certificate for ``system:node:<name>`` in ``system:nodes``, bound to the
built-in ``system:node`` ClusterRole (the dev API server authorizes with RBAC only, and no
binding gives nodes that role by default).

Settings that differ from a production node, each for a reason:

* ``failCgroupV1: false``: since 1.35 the kubelet refuses cgroup v1 unless told otherwise, and
  CI machines (this one) still mount v1.
* ``cgroupRoot: /gpupool-<name>``: pods go to ``/gpupool-<name>/kubepods``, so two nodes on one
  machine never share a cgroup and cleanup removes exactly what this node made.
* ``port``/``healthzPort``: free ports, never the fixed 10250/10248 another kubelet may hold.
* ``failSwapOn: false``, low eviction thresholds, no image garbage collection: a shared test
  machine is not a dedicated node; the images cannot be pulled again once collected.
* ``authorization: AlwaysAllow`` with anonymous authentication on the kubelet's own port: the
  dev API server has no kubelet client certificate, and the port is for logs and exec only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpupool.devcluster.binaries import KUBELET, require
from gpupool.devcluster.controlplane import http_ok
from gpupool.devcluster.processes import ManagedProcess, free_port
from gpupool.kube.client.api import KubeAPI
from gpupool.kube.install.crds import apply_object
from gpupool.kube.install.rbac import CLUSTER_ROLE_BINDINGS, user

NODE_ROLE = "system:node"
NODES_GROUP = "system:nodes"


def node_user(name: str) -> str:
    """The user name the API server gives node ``name``'s kubelet."""
    return f"system:node:{name}"


def render_config(containerd_socket: Path, cgroup_root: str, port: int, healthz_port: int) -> str:
    """The ``KubeletConfiguration`` (JSON, which the kubelet reads as YAML)."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": True,
        "cgroupRoot": cgroup_root,
        "failCgroupV1": False,
        "failSwapOn": False,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "resolvConf": "",
        "localStorageCapacityIsolation": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "volumePluginDir": "/var/lib/kubelet/volume-plugins",
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
    }
    return json.dumps(config, indent=1)


async def grant_node_role(api: KubeAPI, name: str) -> None:
    """Bind the built-in ``system:node`` role to node ``name``'s user (idempotent)."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"gpupool-dev-node-{name}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": NODE_ROLE,
        },
        "subjects": [user(node_user(name))],
    }
    await apply_object(api, CLUSTER_ROLE_BINDINGS, binding)


@dataclass
class KubeletSettings:
    """What one node's kubelet is started with.

    Attributes:
        name: The node name (``--hostname-override``).
        kubeconfig: The node's kubeconfig (its client certificate).
        containerd_socket: containerd's CRI socket.
        cgroup_root: Its own cgroup root (made beforehand: the kubelet requires it).
        folder: Where its configuration file goes.
        labels: Node labels it registers with.
    """

    name: str
    kubeconfig: Path
    containerd_socket: Path
    cgroup_root: str
    folder: Path
    labels: dict[str, str]


class Kubelet:
    """One node's kubelet process (restartable: a fault test stops and starts it again)."""

    def __init__(self, settings: KubeletSettings, bin_dir: Path, log_dir: Path) -> None:
        self.settings = settings
        self.bin_dir = bin_dir
        self.log_dir = log_dir
        self.port = free_port()
        self.healthz_port = free_port()
        self.process: ManagedProcess | None = None

    @property
    def config_path(self) -> Path:
        """The ``KubeletConfiguration`` file."""
        return self.settings.folder / "kubelet-config.json"

    def write_config(self) -> None:
        """Write the configuration (ports fixed for the node's life, so restarts keep them)."""
        self.settings.folder.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            render_config(
                self.settings.containerd_socket,
                self.settings.cgroup_root,
                self.port,
                self.healthz_port,
            )
        )

    def argv(self) -> list[str]:
        """The command line (paths inside the node's namespace)."""
        labels = ",".join(f"{key}={value}" for key, value in sorted(self.settings.labels.items()))
        argv = [
            str(require(self.bin_dir, "kubelet", KUBELET.script)),
            f"--kubeconfig={self.settings.kubeconfig}",
            f"--config={self.config_path}",
            f"--hostname-override={self.settings.name}",
            "--v=2",
        ]
        if labels:
            argv.append(f"--node-labels={labels}")
        return argv

    def start(self, argv_prefix: list[str]) -> None:
        """Start the kubelet in the node's namespace; ready once its healthz answers."""
        self.process = ManagedProcess(
            "kubelet", [*argv_prefix, *self.argv()], self.log_dir / "kubelet.log"
        )
        self.process.wait_ready(
            lambda: http_ok(f"127.0.0.1:{self.healthz_port}", "/healthz", None), 60.0
        )

    def stop(self) -> None:
        """SIGTERM (the containers keep running: the runtime owns them)."""
        if self.process is not None:
            self.process.stop()
            self.process = None

    def kill(self) -> None:
        """SIGKILL, as a crash (no shutdown at all; the containers keep running)."""
        if self.process is not None:
            self.process.kill()
            self.process = None
