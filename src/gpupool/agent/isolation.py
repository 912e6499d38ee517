"""What a container is given so that it gets exactly its GPUs and its share of them.

Three modes, the pool's choice (``gpupool agent --isolation``, the chart's ``agent.isolation``):

* ``mps`` (default): NVIDIA MPS. Every share is an MPS client of the node's MPS control daemon
  (its pipe and shm directories mounted: only this mode shares anything between containers).
  The caps are the daemon's: the agent sets its defaults to the pool's tightest share
  (:mod:`gpupool.agent.mps`), and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` /
  ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` in the environment only lower them for this client
  (NVIDIA: a client's setting "will only further constrain the limit set by the control
  daemon"), so unsetting them gives a container nothing.
* ``hami``: HAMi-core (``libvgpu.so``) for drivers without MPS. It is loaded through a
  read-only bind mount of a per-container ``/etc/ld.so.preload`` (the dynamic loader reads it
  for every process, whatever its environment), not ``LD_PRELOAD``, which one ``unset`` removes;
  the caps are HAMi-core's variables (``CUDA_DEVICE_MEMORY_LIMIT_<i>``, ``CUDA_DEVICE_SM_LIMIT``).
* ``visible``: device visibility only (time slicing, no caps).

In the two capped modes the caps are also in a read-only file, :data:`LIMITS_IN_CONTAINER`
(``KEY=value`` lines), which the container can read and not change. In every mode a container
sees only its GPUs: the device nodes of exactly those GPUs (plus the control nodes), and
``NVIDIA_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` set to their UUIDs. Whole GPUs and MIG
slices get no caps: they are exclusive, capping them would only waste them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpupool.agent.grants import GpuGrant, Grant, NodeRefusedError
from gpupool.core.model import MILLI_PER_GPU

MODES = ("mps", "hami", "visible")
CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
MPS_PIPE_IN_CONTAINER = "/var/run/gpupool/mps/pipe"
HAMI_LIBRARY_IN_CONTAINER = "/usr/local/gpupool/libvgpu.so"
PRELOAD_IN_CONTAINER = "/etc/ld.so.preload"
LIMITS_IN_CONTAINER = "/etc/gpupool/limits"


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind mount into the container."""

    host_path: str
    container_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A device node in the container and the host file the runtime reads it from."""

    path: str
    host_path: str


@dataclass(frozen=True, slots=True)
class ContainerFile:
    """A file the agent writes for one container, bind-mounted read-only (the CDI spec's)."""

    container_path: str
    content: str


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """Environment, device nodes and mounts for one container (a CDI device's edits).

    Attributes:
        env: Variables to set.
        device_nodes: Device nodes to create in the container.
        mounts: Bind mounts.
        files: Files of this container only, mounted read-only where it cannot change them.
    """

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    files: tuple[ContainerFile, ...] = ()


@dataclass(frozen=True, slots=True)
class IsolationConfig:
    """How this node isolates shares.

    Attributes:
        mode: ``mps``, ``hami`` or ``visible``.
        mps_root: Host folder of the MPS control daemon (``pipe/``, ``shm/``, ``log/``).
        hami_library: Host path of ``libvgpu.so`` (``hami`` mode).
        device_root: Host folder of the ``nvidia*`` device nodes: ``/dev``, or the fake NVML's
            device tree (:mod:`gpupool.agent.fakedevices`).
    """

    mode: str = "mps"
    mps_root: Path = Path("/run/gpupool/mps")
    hami_library: Path = Path("/usr/local/gpupool/libvgpu.so")
    device_root: Path = Path("/dev")

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"isolation mode must be one of {', '.join(MODES)}, got {self.mode!r}")


def _device_nodes(grant: Grant, config: IsolationConfig) -> tuple[DeviceNode, ...]:
    names = (*CONTROL_DEVICE_NODES, *sorted({f"/dev/nvidia{gpu.minor}" for gpu in grant.gpus}))
    return tuple(
        DeviceNode(path, str(config.device_root / path.removeprefix("/dev/"))) for path in names
    )


def _percent(shares: list[GpuGrant]) -> int | None:
    """The compute cap in percent of the smallest share, or None for a whole GPU's worth."""
    milli = min(gpu.milli for gpu in shares)
    return max(1, milli // 10) if 0 < milli < MILLI_PER_GPU else None


def _caps(grant: Grant, shares: list[GpuGrant], mode: str) -> dict[str, str]:
    """The cap variables of ``mode`` for a grant with some shared GPUs."""
    caps: dict[str, str] = {}
    percent = _percent(shares)
    if mode == "mps":
        memory = ",".join(
            f"{i}={gpu.memory_mib}M" for i, gpu in enumerate(grant.gpus) if gpu.memory_mib
        )
        if memory:
            caps["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = memory
        if percent is not None:
            caps["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(percent)
        return caps
    for i, gpu in enumerate(grant.gpus):
        if gpu.memory_mib:
            caps[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{gpu.memory_mib}m"
    if percent is not None:
        caps["CUDA_DEVICE_SM_LIMIT"] = str(percent)
    return caps


def edits_for(grant: Grant, config: IsolationConfig) -> ContainerEdits:
    """The edits that give ``grant`` to its container and nothing else (either path's grant).

    Only an MPS share mounts anything shared with other containers (the daemon's pipe and shm
    directories, which MPS clients need); a HAMi share's mounts are read-only and its own.
    """
    uuids = ",".join(gpu.uuid for gpu in grant.gpus)
    env = {"NVIDIA_VISIBLE_DEVICES": uuids, "CUDA_VISIBLE_DEVICES": uuids, **grant.identity}
    nodes = _device_nodes(grant, config)
    shares = [gpu for gpu in grant.gpus if not gpu.exclusive]
    if not shares or config.mode == "visible":
        return ContainerEdits(env, nodes)
    caps = _caps(grant, shares, config.mode)
    env.update(caps)
    files = [ContainerFile(LIMITS_IN_CONTAINER, "".join(f"{k}={v}\n" for k, v in caps.items()))]
    mounts: tuple[Mount, ...]
    if config.mode == "mps":
        env["CUDA_MPS_PIPE_DIRECTORY"] = MPS_PIPE_IN_CONTAINER
        mounts = (
            Mount(str(config.mps_root / "pipe"), MPS_PIPE_IN_CONTAINER),
            Mount(str(config.mps_root / "shm"), "/dev/shm"),
        )
    else:
        mounts = (Mount(str(config.hami_library), HAMI_LIBRARY_IN_CONTAINER, read_only=True),)
        files.append(ContainerFile(PRELOAD_IN_CONTAINER, f"{HAMI_LIBRARY_IN_CONTAINER}\n"))
    return ContainerEdits(env, nodes, mounts, tuple(files))


def host_checked_edits(grant: Grant, config: IsolationConfig) -> ContainerEdits:
    """:func:`edits_for`, refused on an MPS node while the control daemon's folders are missing.

    Without this check the hand-off succeeds and the runtime fails every start of the
    container on the mount ("error mounting /run/gpupool/mps/shm"): a crash loop whose reason
    names neither gpupool nor the missing daemon. Refused here, the kubelet shows the pod why.
    Only the MPS root is checked: the agent sees it at the host's path (the chart mounts it
    there), while HAMi-core's library is not mounted into the agent's own container.
    """
    edits = edits_for(grant, config)
    missing = [
        mount.host_path
        for mount in edits.mounts
        if Path(mount.host_path).is_relative_to(config.mps_root)
        and not Path(mount.host_path).exists()
    ]
    if missing:
        raise NodeRefusedError(
            f"{', '.join(missing)} missing on the node: the MPS control daemon is not running "
            "on this node (chart: agent.mpsControlDaemon); refusing the hand-off"
        )
    return edits
