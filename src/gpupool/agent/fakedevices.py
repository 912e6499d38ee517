"""The fake NVML's device tree: character devices where a GPU node has ``/dev/nvidia*``.

A container gets its GPUs as device nodes (``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
``/dev/nvidia-uvm-tools`` and one ``/dev/nvidia<minor>`` per GPU), and the container runtime
reads each node's type and numbers from the host file the CDI spec names. Without a GPU those
files do not exist, so a fake-GPU agent that named ``/dev/nvidia3`` would have every container
fail at creation (the runtime cannot stat it), and nothing on a machine without GPUs could show
that a pod sees exactly its GPUs. So with ``--fake-gpus`` the agent makes the tree itself: real
character devices, with a major no driver on the machine registered (open() fails with ENXIO
as on a node whose driver is unloaded) and the minors the NVIDIA driver uses (the GPU's minor,
255 for ``nvidiactl``). The runtime, the device cgroup and ``stat`` in the container treat them
exactly as they would treat a GPU's.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from gpupool.agent.isolation import CONTROL_DEVICE_NODES
from gpupool.agent.nvml import GpuDevice

EXPERIMENTAL_MAJORS = range(240, 255)
"""Character majors for "local/experimental use" (the kernel's Documentation/devices.txt)."""
CONTROL_MINORS = dict(zip(CONTROL_DEVICE_NODES, (255, 254, 253), strict=True))
"""The control nodes, with minors the GPUs' (0..) never reach."""


def unused_char_major(devices: Path = Path("/proc/devices")) -> int:
    """A character major no driver on this machine registered (so open() says ENXIO).

    Raises:
        RuntimeError: Every experimental major is taken.
    """
    used: set[int] = set()
    section = ""
    for line in devices.read_text().splitlines():
        if line.endswith(":"):
            section = line
        elif section.startswith("Character") and line.strip():
            used.add(int(line.split()[0]))
    for major in EXPERIMENTAL_MAJORS:
        if major not in used:
            return major
    raise RuntimeError("no free experimental character major for the fake GPU devices")


def make_char_device(path: Path, major: int, minor: int) -> None:
    """``mknod path c major minor`` (root only), replacing what was there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def device_file_names(gpus: Iterable[GpuDevice]) -> dict[str, int]:
    """Every device node a node with ``gpus`` has, by file name (below ``/dev``), with its minor."""
    names = {path.removeprefix("/dev/"): minor for path, minor in CONTROL_MINORS.items()}
    names.update({f"nvidia{gpu.minor}": gpu.minor for gpu in gpus})
    return names


def create_tree(root: Path, gpus: Iterable[GpuDevice]) -> int:
    """Make the fake ``/dev`` of ``gpus`` under ``root`` (replacing an older one); its major."""
    major = unused_char_major()
    for name, minor in device_file_names(gpus).items():
        make_char_device(root / name, major, minor)
    return major
