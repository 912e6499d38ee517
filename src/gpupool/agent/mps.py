"""The MPS control daemon's limits: what a share gets even with its environment unset.

NVIDIA's MPS documentation: a client's ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` "will only further
constrain the limit set by the control daemon (via set_default_active_thread_percentage or
set_active_thread_percentage)"; if the daemon's setting is lower, the daemon's wins. So the
environment the agent puts in a share's CDI spec is a lower-only hint, and what a container gets
after ``unset`` is the daemon's setting. A server serves every client of one Linux user, so the
daemon's limit cannot be per container; the tightest sound setting is the largest share the
agent has granted (per GPU for pinned memory), never the whole GPU an unset environment would
otherwise get.

The agent writes the daemon's commands to ``<mps root>/control/limits`` (atomically) before it
writes a share's CDI spec, and again when grants end; the chart's ``mps-control`` container
feeds each new version to ``nvidia-cuda-mps-control`` as the defaults for servers started later
and, per running server, as ``set_active_thread_percentage <PID>`` /
``set_device_pinned_mem_limit <PID>`` (``deploy/helm/gpupool/templates/agent.yaml``). Device
numbers are NVML indices: the daemon runs with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, where CUDA's
order is NVML's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from gpupool.agent.cdi import write_atomically
from gpupool.agent.grants import Grant
from gpupool.agent.isolation import IsolationConfig
from gpupool.agent.nvml import GpuDevice
from gpupool.core.model import MILLI_PER_GPU

LIMITS_FILE = Path("control") / "limits"


def daemon_commands(grants: Iterable[Grant], devices: Sequence[GpuDevice]) -> str:
    """The control daemon's commands for the live ``grants`` (one per line).

    The thread percentage is the largest live share's (1 % while none is live: no share
    container can connect without a grant, and a stray client gets next to nothing); each GPU
    with shares gets the largest of their memory caps, a GPU with an uncapped share none.
    """
    index = {device.uuid: device.index for device in devices}
    percent = 1
    memory: dict[int, int] = {}
    uncapped: set[int] = set()
    for grant in grants:
        for gpu in grant.gpus:
            if gpu.exclusive or gpu.uuid not in index:
                continue
            percent = max(percent, -(-gpu.milli * 100 // MILLI_PER_GPU))
            if gpu.memory_mib:
                memory[index[gpu.uuid]] = max(memory.get(index[gpu.uuid], 0), gpu.memory_mib)
            else:
                uncapped.add(index[gpu.uuid])
    lines = [f"set_default_active_thread_percentage {min(percent, 100)}"]
    lines += [
        f"set_default_device_pinned_mem_limit {device} {mib}M"
        for device, mib in sorted(memory.items())
        if device not in uncapped
    ]
    return "\n".join(lines) + "\n"


def publish(
    config: IsolationConfig, grants: Iterable[Grant], devices: Sequence[GpuDevice]
) -> Path | None:
    """Write the daemon's commands for ``grants`` for the ``mps-control`` container.

    Only on MPS nodes (None elsewhere: nothing else reads it).
    """
    if config.mode != "mps":
        return None
    target = config.mps_root / LIMITS_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, daemon_commands(grants, devices), 0o644)
    return target
