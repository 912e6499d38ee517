"""A fake NVML with the real interface, for machines without a GPU.

It models the devices the project targets (8x H100, 8x H200, 8x A100 with MIG on half of them,
4x T4) with their real memory sizes and MIG profiles, and deterministic UUIDs
(``GPU-<node>-<index>``, as the dev cluster's fake nodes use), so the inventory, the device
plugin, the hand-off and telemetry run unchanged in tests, the dev cluster and the demo. Tests
script it: processes and their usage (memory held, SM and memory-controller utilisation, as
NVML's per-process samples carry them), XID events, GPUs appearing or breaking, clock throttling;
an agent in a pod is scripted through a file (:mod:`gpupool.agent.fakescript`).

Contention is modelled as a time-sliced or MPS GPU behaves: a scripted process's ``sm_percent``
is what it would use alone (its demand), and when the processes of one GPU ask for more than
100 % between them the GPU saturates at 100 % and each gets its proportional part (two asking
for 80 % each are measured at 50 %); the memory controller likewise. Throttling lowers the SM
clock from the board's maximum and sets NVML's clocks-event reasons.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from dataclasses import replace

from gpupool.agent.fakescript import NO_THROTTLE, ScriptFile, Throttle
from gpupool.agent.nvml import (
    APPLICATION_XIDS,
    GpuDevice,
    GpuUsage,
    MigDevice,
    ProcessUsage,
)
from gpupool.core.contention import fair_split

# model, memory MiB (what NVML reports on the real boards)
_MODELS = {
    "H100": 81559,
    "H200": 143771,
    "A100": 81920,
    "T4": 15360,
}
PRESETS = ("h100", "h100-islands", "h200", "a100-mig", "t4")
"""``h100``: eight GPUs on one NVSwitch (one NVLink domain); ``h100-islands``: eight GPUs in two
NVLink islands of four (GPUs 0-3 and 4-7 reach each other only over PCIe). Every preset is a
two-socket host: the first half of its GPUs on NUMA node 0, the second on node 1."""
# the highest SM clock, MHz (the boards' boost clocks)
_MAX_SM_CLOCK = {"H100": 1980, "H200": 1980, "A100": 1410, "T4": 1590}
# NVML's full names, and whether the board supports MIG
_PRODUCTS = {
    "H100": ("NVIDIA H100 80GB HBM3", True),
    "H200": ("NVIDIA H200", True),
    "A100": ("NVIDIA A100-SXM4-80GB", True),
    "T4": ("Tesla T4", False),
}
FAKE_DRIVER_VERSION = "570.124.06"
"""What the fake NVML reports as the driver (a real r570 version string, leading zero included)."""


def preset_devices(preset: str, node: str) -> tuple[GpuDevice, ...]:
    """The GPUs of a preset machine; UUIDs ``GPU-<node>-<index>``.

    Raises:
        ValueError: Unknown preset (the message lists the known ones).
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown fake GPU preset {preset!r}; choose one of {', '.join(PRESETS)}")
    model = {
        "h100": "H100",
        "h100-islands": "H100",
        "h200": "H200",
        "a100-mig": "A100",
        "t4": "T4",
    }[preset]
    count = 4 if preset == "t4" else 8
    devices = []
    for index in range(count):
        uuid = f"GPU-{node}-{index}"
        mig: tuple[MigDevice, ...] = ()
        if preset == "a100-mig" and index < 4:  # half the GPUs split into 7 x 1g.10gb
            mig = tuple(MigDevice(f"MIG-{node}-{index}-{s}", "1g.10gb", 9856) for s in range(7))
        product, mig_capable = _PRODUCTS[model]
        devices.append(
            GpuDevice(
                index,
                uuid,
                model,
                _MODELS[model],
                index,
                mig_enabled=bool(mig),
                mig=mig,
                product_name=product,
                mig_capable=mig_capable,
                driver_version=FAKE_DRIVER_VERSION,
                link_domain=index // 4 if preset == "h100-islands" else 0,
                numa_node=index * 2 // count,  # two sockets, half the GPUs on each
            )
        )
    return tuple(devices)


def _device_usage(
    device: GpuDevice, processes: tuple[ProcessUsage, ...], throttle: Throttle
) -> GpuUsage:
    """What NVML reports for a GPU running ``processes`` (their demands; see the module)."""
    sm = fair_split([p.sm_percent for p in processes])
    busy = fair_split([p.memory_busy_percent for p in processes])
    measured = tuple(
        replace(p, sm_percent=s, memory_busy_percent=b)
        for p, s, b in zip(processes, sm, busy, strict=True)
    )
    top = _MAX_SM_CLOCK.get(device.model, 0)
    return GpuUsage(
        gpu_uuid=device.uuid,
        memory_used_mib=sum(p.memory_mib for p in processes),
        sm_percent=min(100, sum(p.sm_percent for p in processes)),
        processes=measured,
        memory_busy_percent=min(100, sum(p.memory_busy_percent for p in processes)),
        throttle_reasons=throttle.reasons,
        sm_clock_mhz=throttle.sm_clock_mhz or top,
        max_sm_clock_mhz=top,
    )


class FakeNvml:
    """:class:`~gpupool.agent.nvml.Nvml` over scripted devices and processes (thread-safe).

    Args:
        devices: The GPUs, in index order.
    """

    def __init__(self, devices: Iterable[GpuDevice]) -> None:
        self._lock = threading.Lock()
        self._devices = tuple(devices)
        self._processes: dict[str, tuple[ProcessUsage, ...]] = {}
        self._throttles: dict[str, Throttle] = {}
        self._xids: queue.Queue[tuple[str, int]] = queue.Queue()
        self._script: ScriptFile | None = None
        self._raised = 0  # the script's XIDs already raised
        self.closed = False

    @classmethod
    def preset(cls, preset: str, node: str) -> FakeNvml:
        """A fake machine of a known preset (see :data:`PRESETS`)."""
        return cls(preset_devices(preset, node))

    def devices(self) -> tuple[GpuDevice, ...]:
        """Every GPU, in index order."""
        with self._lock:
            return self._devices

    def replace_devices(self, devices: Iterable[GpuDevice]) -> None:
        """Change the hardware (a GPU added, removed, re-partitioned)."""
        with self._lock:
            self._devices = tuple(devices)

    def set_processes(self, gpu_uuid: str, processes: Iterable[ProcessUsage]) -> None:
        """Script what runs on one GPU from now on."""
        with self._lock:
            self._processes[gpu_uuid] = tuple(processes)

    def set_throttle(self, gpu_uuid: str, throttle: Throttle) -> None:
        """Script one GPU's clock throttling from now on (:data:`NO_THROTTLE` ends it)."""
        with self._lock:
            self._throttles[gpu_uuid] = throttle

    def follow(self, script: ScriptFile) -> None:
        """Take processes and XIDs from ``script`` from now on (an agent run in a pod)."""
        self._script = script

    def _read_script(self) -> None:
        """The file's processes replace the scripted ones; its new XIDs are raised, in order."""
        if self._script is None:
            return
        script = self._script.read()
        with self._lock:
            self._processes = dict(script.processes)
            self._throttles = dict(script.throttles)
            fresh = script.xids[self._raised :]
            self._raised = len(script.xids)
        for event in fresh:
            self._xids.put(event)

    def usage(self) -> tuple[GpuUsage, ...]:
        """Device usage = the sum of the scripted processes (utilisation capped at 100 %)."""
        self._read_script()
        with self._lock:
            return tuple(
                _device_usage(
                    device,
                    self._processes.get(device.uuid, ()),
                    self._throttles.get(device.uuid, NO_THROTTLE),
                )
                for device in self._devices
            )

    def inject_xid(self, gpu_uuid: str, xid: int) -> None:
        """An XID event on a GPU, as the driver would raise it."""
        self._xids.put((gpu_uuid, xid))

    def wait_xid(self, timeout_ms: int) -> tuple[str, int] | None:
        """The next critical XID (the GPU becomes unhealthy), or None after the timeout."""
        self._read_script()
        try:
            uuid, xid = self._xids.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None
        if xid in APPLICATION_XIDS:
            return None
        with self._lock:
            self._devices = tuple(
                replace(d, healthy=False) if d.uuid == uuid else d for d in self._devices
            )
        return uuid, xid

    def close(self) -> None:
        """Nothing to release."""
        self.closed = True
