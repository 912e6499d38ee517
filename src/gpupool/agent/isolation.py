"""What a container is given so that it gets exactly its GPUs and its share of them.

Three modes, the pool's choice (``gpupool agent --isolation``):

* ``mps`` (default): NVIDIA MPS. Every share is an MPS client of the node's MPS control daemon
  (pipe and shm directories mounted); ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` pins its device
  memory limit (allocations past it fail) and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` caps its SMs.
  These are per-client and can only *lower* the daemon's defaults, so a container cannot raise
  its own caps by editing them if the daemon runs with conservative defaults.
* ``hami``: HAMi-core-compatible variables (``CUDA_DEVICE_MEMORY_LIMIT_<i>``,
  ``CUDA_DEVICE_SM_LIMIT``) with ``libvgpu.so`` mounted and preloaded, for drivers without MPS.
* ``visible``: device visibility only (time slicing, no caps).

In every mode a container sees only its GPUs: the device nodes of exactly those GPUs (plus the
control nodes), and ``NVIDIA_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` set to their UUIDs.
Whole GPUs and MIG slices get no caps: they are exclusive, capping them would only waste them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpupool.agent.grants import MILLI_PER_GPU, ContainerGrant

MODES = ("mps", "hami", "visible")
CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
MPS_PIPE_IN_CONTAINER = "/var/run/gpupool/mps/pipe"
HAMI_LIBRARY_IN_CONTAINER = "/usr/local/gpupool/libvgpu.so"


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind mount into the container."""

    host_path: str
    container_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """Environment, device nodes and mounts for one container (a CDI device's edits).

    Attributes:
        env: Variables to set.
        device_nodes: Device node paths to create in the container.
        mounts: Bind mounts.
    """

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()


@dataclass(frozen=True, slots=True)
class IsolationConfig:
    """How this node isolates shares.

    Attributes:
        mode: ``mps``, ``hami`` or ``visible``.
        mps_root: Host folder of the MPS control daemon (``pipe/``, ``shm/``, ``log/``).
        hami_library: Host path of ``libvgpu.so`` (``hami`` mode).
    """

    mode: str = "mps"
    mps_root: Path = Path("/run/gpupool/mps")
    hami_library: Path = Path("/usr/local/gpupool/libvgpu.so")

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"isolation mode must be one of {', '.join(MODES)}, got {self.mode!r}")


def edits_for(grant: ContainerGrant, config: IsolationConfig) -> ContainerEdits:
    """The edits that give ``grant`` to its container and nothing else."""
    uuids = ",".join(gpu.uuid for gpu in grant.gpus)
    env = {
        "NVIDIA_VISIBLE_DEVICES": uuids,
        "CUDA_VISIBLE_DEVICES": uuids,
        "GPUPOOL_POD_UID": grant.pod_uid,
    }
    nodes = (*CONTROL_DEVICE_NODES, *sorted({f"/dev/nvidia{gpu.minor}" for gpu in grant.gpus}))
    shares = [gpu for gpu in grant.gpus if not gpu.exclusive]
    if not shares or config.mode == "visible":
        return ContainerEdits(env, nodes)
    mounts: list[Mount] = []
    if config.mode == "mps":
        memory = ",".join(
            f"{i}={gpu.memory_mib}M" for i, gpu in enumerate(grant.gpus) if gpu.memory_mib
        )
        if memory:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = memory
        milli = min(gpu.milli for gpu in shares)
        if 0 < milli < MILLI_PER_GPU:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, milli // 10))
        env["CUDA_MPS_PIPE_DIRECTORY"] = MPS_PIPE_IN_CONTAINER
        mounts.append(Mount(str(config.mps_root / "pipe"), MPS_PIPE_IN_CONTAINER))
        mounts.append(Mount(str(config.mps_root / "shm"), "/dev/shm"))
    else:
        for i, gpu in enumerate(grant.gpus):
            if gpu.memory_mib:
                env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{gpu.memory_mib}m"
        milli = min(gpu.milli for gpu in shares)
        if 0 < milli < MILLI_PER_GPU:
            env["CUDA_DEVICE_SM_LIMIT"] = str(max(1, milli // 10))
        env["LD_PRELOAD"] = HAMI_LIBRARY_IN_CONTAINER
        mounts.append(Mount(str(config.hami_library), HAMI_LIBRARY_IN_CONTAINER, read_only=True))
    return ContainerEdits(env, nodes, tuple(mounts))
