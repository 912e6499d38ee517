"""A real node's private mount namespace: the fixed node paths, each node its own.

The kubelet hard-codes some paths (``/var/lib/kubelet/device-plugins/kubelet.sock`` above all,
and ``/var/log/containers``), the gpupool agent's DaemonSet and any device plugin expect the
standard ones (``/var/lib/kubelet/pod-resources``, ``/var/run/cdi``), and containerd keeps shim
sockets in ``/run/containerd``. Two real nodes on one machine (two test sessions, or a test and a
person's ``dev-cluster up``) would share all of them. So containerd, the kubelet and everything
they start run in one mount namespace of the node's own, in which each of those paths is a bind
mount of a folder in the node's session folder. From outside, the same files are reachable
under the session folder (a test's device plugin, the agent run by hand).

It also makes cleanup exact: every mount the kubelet and the runtime make (secret tmpfs, the
containers' overlay root file systems) lives in that namespace only and goes away with it once
the last process in it exits; nothing is ever mounted on the machine itself.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpupool.devcluster.processes import ManagedProcess, kill_until_gone

NODE_PATHS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/run/containerd",
    "/run/cdi",
    "/run/gpupool",
    "/var/lib/gpupool",
)
"""The machine paths each node has its own copy of (``/var/run`` is ``/run`` on Debian)."""

READY_FILE = "namespace-ready"


def session_path(session: Path, node_path: str) -> Path:
    """Where ``node_path`` of the node lives outside the namespace."""
    return session / "node" / node_path.strip("/").replace("/", "-")


@dataclass
class NodeNamespace:
    """A mount namespace held open by a small process, with the node paths bound into it.

    Args:
        session: The node's session folder (the bind sources are made in it).
        log_dir: Where the holder's log goes.
    """

    session: Path
    log_dir: Path
    holder: ManagedProcess | None = None
    inode: int = 0

    def start(self) -> None:
        """Create the namespace and the bind mounts; wait until they are in place."""
        commands = ["set -e"]
        for node_path in NODE_PATHS:
            source = session_path(self.session, node_path)
            source.mkdir(parents=True, exist_ok=True)
            Path(node_path).mkdir(parents=True, exist_ok=True)  # the mount point (empty)
            commands.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(node_path)}")
        ready = self.session / READY_FILE
        ready.unlink(missing_ok=True)
        commands += [f"touch {shlex.quote(str(ready))}", "exec sleep infinity"]
        script = "\n".join(commands)
        self.holder = ManagedProcess(
            "node-namespace",
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script],
            self.log_dir / "node-namespace.log",
        )
        self.holder.wait_ready(ready.exists, 10.0)
        self.inode = os.stat(self._ns_file()).st_ino

    def _ns_file(self) -> Path:
        if self.holder is None:
            raise RuntimeError("the node namespace has not been started")
        return Path(f"/proc/{self.holder.process.pid}/ns/mnt")

    def enter(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (nsenter execs it: the PID is the program's)."""
        return ["nsenter", f"--mount={self._ns_file()}", "--", *argv]

    def members(self) -> set[int]:
        """PIDs of every process in the namespace, except its holder."""
        holder = self.holder.process.pid if self.holder is not None else -1
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == holder:
                continue
            try:
                if os.stat(entry / "ns" / "mnt").st_ino == self.inode:
                    found.add(int(entry.name))
            except OSError:  # gone, or a kernel thread
                continue
        return found

    def kill_members(self, timeout: float = 10.0) -> set[int]:
        """SIGKILL every process in the namespace (leftover shims); returns their PIDs.

        Raises:
            TimeoutError: Some survived ``timeout`` seconds (the message lists them).
        """
        return kill_until_gone(self.members, "the node's mount namespace", timeout)

    def stop(self) -> None:
        """End the namespace: its members, then its holder (the mounts go with it)."""
        if self.holder is None:
            return
        if self.inode:
            self.kill_members()
        self.holder.stop()
        self.holder = None
