"""containerd for a real node: its configuration, its process, and images imported into it.

containerd 2.x (``scripts/build-containerd.sh``) with the CRI plugin, runc through the runc v2
shim, and CDI (always on in 2.x) reading specs from ``/var/run/cdi`` of the node's namespace,
the folder the gpupool agent writes to. The only CNI network is the ``loopback`` plugin: the
runtime reports its network ready, and no pod gets an address that could send traffic off the
machine (pods use ``hostNetwork``). Root, state, socket and the CNI files are in the node's
session folder, so two nodes on one machine never share a file; NRI, whose socket path is fixed,
is disabled for the same reason.

No registry is reachable, so every image comes from an OCI archive imported with ``ctr`` (see
``scripts/build-images.sh``), the pause image included (``sandbox_image``).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpupool.devcluster.binaries import CONTAINERD, require
from gpupool.devcluster.processes import ManagedProcess

K8S_NAMESPACE = "k8s.io"
"""containerd's namespace for the CRI plugin's containers and images."""
CDI_DIR = "/var/run/cdi"
START_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class ContainerdPaths:
    """Where one node's containerd keeps everything (all below ``base``)."""

    base: Path

    @property
    def socket(self) -> Path:
        """The gRPC (and CRI) socket."""
        return self.base / "containerd.sock"

    @property
    def config(self) -> Path:
        """The configuration file."""
        return self.base / "config.toml"

    @property
    def cni_conf_dir(self) -> Path:
        """The CNI configuration folder (the loopback-only list)."""
        return self.base / "net.d"


def _toml_string(value: str | Path) -> str:
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


CAP_SYS_RESOURCE = 24


def has_capability(bit: int, status: Path = Path("/proc/self/status")) -> bool:
    """Whether this process holds capability ``bit`` in its effective set."""
    for line in status.read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def render_config(
    paths: ContainerdPaths,
    bin_dir: Path,
    runc: Path,
    sandbox_image: str,
    *,
    restrict_oom_score_adj: bool,
    cdi_dir: str = CDI_DIR,
) -> str:
    """The ``config.toml`` of containerd (version 3, containerd 2.x plugin IDs).

    ``restrict_oom_score_adj``: without ``CAP_SYS_RESOURCE`` (nested containers, some CI
    machines, this one) no process may lower its ``oom_score_adj``, so runc fails every
    sandbox containerd asks to run at -998 ("can't get final child's PID from pipe");
    restricted, containerd raises such scores to its own.
    """
    cri = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 3
root = {_toml_string(paths.base / "root")}
state = {_toml_string(paths.base / "state")}
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = {_toml_string(paths.socket)}

[ttrpc]
  address = {_toml_string(paths.base / "containerd.sock.ttrpc")}

[debug]
  address = {_toml_string(paths.base / "debug.sock")}

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = {_toml_string(sandbox_image)}

[{cri}]
  cdi_spec_dirs = [{_toml_string(cdi_dir)}]
  enable_unprivileged_ports = false
  enable_unprivileged_icmp = false
  restrict_oom_score_adj = {str(restrict_oom_score_adj).lower()}

[{cri}.containerd]
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = {_toml_string(runc)}
  SystemdCgroup = false

[{cri}.cni]
  bin_dirs = [{_toml_string(bin_dir)}]
  conf_dir = {_toml_string(paths.cni_conf_dir)}
  max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


LOOPBACK_CONFLIST = {
    "cniVersion": "1.0.0",
    "name": "gpupool-loopback",
    "plugins": [{"type": "loopback"}],
}


class Containerd:
    """One node's containerd process.

    Args:
        paths: Its folders.
        bin_dir: The folder ``scripts/build-containerd.sh`` printed.
        runc: The runc binary.
        sandbox_image: The pause image (imported, never pulled).
        log_dir: Where ``containerd.log`` goes.
    """

    def __init__(
        self, paths: ContainerdPaths, bin_dir: Path, runc: Path, sandbox_image: str, log_dir: Path
    ) -> None:
        self.paths = paths
        self.bin_dir = bin_dir
        self.runc = runc
        self.sandbox_image = sandbox_image
        self.log_dir = log_dir
        self.process: ManagedProcess | None = None

    def write_config(self) -> None:
        """The config file and the loopback-only CNI network."""
        self.paths.base.mkdir(parents=True, exist_ok=True)
        self.paths.config.write_text(
            render_config(
                self.paths,
                self.bin_dir,
                self.runc,
                self.sandbox_image,
                restrict_oom_score_adj=not has_capability(CAP_SYS_RESOURCE),
            )
        )
        self.paths.cni_conf_dir.mkdir(exist_ok=True)
        (self.paths.cni_conf_dir / "10-gpupool-loopback.conflist").write_text(
            json.dumps(LOOPBACK_CONFLIST, indent=1)
        )

    def start(self, argv_prefix: list[str]) -> None:
        """Start containerd (``argv_prefix`` enters the node's namespace); wait for its socket.

        The shim is found on containerd's ``PATH``, so the build folder leads it.
        """
        binary = require(self.bin_dir, "containerd", CONTAINERD.script)
        self.process = ManagedProcess(
            "containerd",
            [
                *argv_prefix,
                "env",
                f"PATH={self.bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                str(binary),
                f"--config={self.paths.config}",
            ],
            self.log_dir / "containerd.log",
        )
        self.process.wait_ready(self._answers, START_TIMEOUT)

    def _answers(self) -> bool:
        if not self.paths.socket.exists():
            return False
        return self.ctr("version", check=False).returncode == 0

    def stop(self) -> None:
        """SIGTERM (running containers keep running under their shims)."""
        if self.process is not None:
            self.process.stop()
            self.process = None

    def kill(self) -> None:
        """SIGKILL, as a crash: no cleanup, its sockets left behind; the shims live on."""
        if self.process is not None:
            self.process.kill()
            self.process = None

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``ctr`` against this containerd in the CRI plugin's namespace."""
        return subprocess.run(
            [
                str(require(self.bin_dir, "ctr", CONTAINERD.script)),
                f"--address={self.paths.socket}",
                f"--namespace={K8S_NAMESPACE}",
                *args,
            ],
            capture_output=True,
            text=True,
            check=check,
            timeout=300,
        )

    def import_image(self, archive: Path) -> None:
        """Import an OCI archive (the name comes from its ``io.containerd.image.name``).

        Raises:
            RuntimeError: ``ctr`` failed; the message holds its output.
        """
        result = self.ctr("images", "import", "--local", str(archive), check=False)
        if result.returncode != 0:
            raise RuntimeError(f"ctr images import {archive}: {result.stderr or result.stdout}")

    def images(self) -> set[str]:
        """Names of the images this containerd has."""
        listing = self.ctr("images", "list", "--quiet").stdout
        return {line for line in listing.splitlines() if line}
