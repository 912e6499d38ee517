"""A real node's own cgroup subtree: made before the kubelet starts, emptied and removed after.

The kubelet (``cgroupsPerQOS`` with ``cgroupRoot``) puts every pod under ``<root>/kubepods`` and
refuses to start unless ``<root>`` exists in every hierarchy it uses; runc puts each container
below its pod. Giving each real node a root of its own (``/gpupool-<node>``) keeps two nodes on
one machine, and the machine's own processes, out of each other's way, and makes cleanup exact:
everything this node created is below that one folder of each hierarchy.

Works on cgroup v1 (one mount per controller), on v2 and on the hybrid layout, by reading the
cgroup mounts from ``/proc/self/mountinfo``.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from gpupool.devcluster.processes import kill_until_gone

MOUNTINFO = Path("/proc/self/mountinfo")


def hierarchies(mountinfo: Path = MOUNTINFO) -> list[Path]:
    """Mount points of every cgroup (v1) and cgroup2 file system."""
    mounts: list[Path] = []
    for line in mountinfo.read_text().splitlines():
        before, _, after = line.partition(" - ")
        fstype = after.split(" ", 1)[0]
        if fstype in ("cgroup", "cgroup2"):
            mounts.append(Path(before.split(" ")[4]))
    return mounts


def _copy_cpuset(folder: Path) -> None:
    """A new v1 cpuset cgroup starts with no CPUs and no memory nodes: inherit the parent's.

    Without this no task can join it (``ENOSPC``), and neither can anything runc creates below.
    """
    for name in ("cpuset.cpus", "cpuset.mems"):
        own = folder / name
        if own.exists() and not own.read_text().strip():
            own.write_text((folder.parent / name).read_text())


def create_root(name: str, mounts: list[Path] | None = None) -> list[Path]:
    """Create ``/<name>`` in every hierarchy; returns the folders made (or already there)."""
    made = []
    for mount in mounts if mounts is not None else hierarchies():
        folder = mount / name
        folder.mkdir(exist_ok=True)
        _copy_cpuset(folder)
        made.append(folder)
    return made


def processes_below(folders: list[Path]) -> set[int]:
    """PIDs of every process in ``folders`` or their descendants.

    A cgroup can vanish between listing and reading (runc removes a container's as it exits):
    it then holds no process, which is what a missing file means here, and what the kernel's
    ENODEV means for one removed between opening ``cgroup.procs`` and reading it (seen when a
    node stops while its kubelet's containers are still being torn down).
    """
    pids: set[int] = set()
    for top in folders:
        for directory, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    text = (Path(directory) / "cgroup.procs").read_text()
                except OSError as error:
                    if error.errno in (errno.ENOENT, errno.ENODEV):
                        continue
                    raise
                pids.update(int(pid) for pid in text.split())
    return pids


def kill_below(folders: list[Path], timeout: float = 10.0) -> set[int]:
    """SIGKILL every process below ``folders`` until none is left; returns the PIDs killed.

    Raises:
        TimeoutError: Processes were still there after ``timeout`` seconds.
    """
    where = str(folders[0]) if folders else "no cgroup"
    return kill_until_gone(lambda: processes_below(folders), where, timeout)


def remove_tree(folders: list[Path], timeout: float = 10.0) -> None:
    """Remove ``folders`` and every cgroup below them, deepest first.

    A cgroup whose last process has just died can refuse ``rmdir`` with ``EBUSY`` for a moment,
    so each removal is retried until ``timeout``.

    Raises:
        TimeoutError: A cgroup could still not be removed (the message names it).
    """
    for top in folders:
        if not top.is_dir():
            continue
        for directory, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            _rmdir_retrying(Path(directory), time.monotonic() + timeout)


def _rmdir_retrying(folder: Path, deadline: float) -> None:
    while True:
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if time.monotonic() > deadline:
                raise TimeoutError(f"cannot remove cgroup {folder}: {error}") from None
            time.sleep(0.05)
