"""What the agent needs from NVML, behind one small typed interface.

``pynvml`` (PyPI ``nvidia-ml-py``) is untyped ctypes over ``libnvidia-ml.so.1`` and raises for
"no samples yet" as if it were an error. Wrapping the dozen calls the agent uses in
:class:`Nvml` keeps those quirks in one place, lets :class:`~gpupool.agent.fakenvml.FakeNvml`
stand in on machines without a GPU (tests, the dev cluster, the demo), and keeps ``pynvml``
imported lazily: the scheduler and the CLI never load it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG instance of a GPU.

    Attributes:
        uuid: The MIG device UUID (``MIG-...``); the device-plugin ID of the slice.
        profile: The profile name as in ``gpupool.io/mig-<profile>`` (e.g. ``1g.10gb``).
        memory_mib: Its memory.
    """

    uuid: str
    profile: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One physical GPU as the agent sees it.

    Attributes:
        index: NVML index (the order the node's inventory and the allocation record use).
        uuid: ``GPU-...``.
        model: Short model name for the node label (``H100``, ``A100``, ``T4``).
        memory_mib: Total memory.
        minor: The ``/dev/nvidia<minor>`` device node number.
        mig_enabled: Whether MIG mode is on (then only ``mig`` devices are handed out).
        mig: The MIG instances when MIG is on.
        healthy: False after a critical XID event.
        product_name: NVML's full name (``NVIDIA H100 80GB HBM3``); empty when unknown.
        mig_capable: Whether the GPU supports MIG at all.
        driver_version: The NVIDIA driver's version (``570.124.06``); empty when unknown.
        link_domain: Its NVLink domain: GPUs joined by NVLink (directly or through an
            NVSwitch) share one; 0 for all when NVML reports no NVLink.
        numa_node: The host NUMA node it is attached to (``-1`` when NVML cannot say).
    """

    index: int
    uuid: str
    model: str
    memory_mib: int
    minor: int
    mig_enabled: bool = False
    mig: tuple[MigDevice, ...] = ()
    healthy: bool = True
    product_name: str = ""
    mig_capable: bool = False
    driver_version: str = ""
    link_domain: int = 0
    numa_node: int = -1


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """One process on one GPU at one sample.

    Attributes:
        gpu_uuid: The GPU.
        pid: Host PID.
        memory_mib: GPU memory the process holds.
        sm_percent: Its SM utilisation over the last sample period (0 when no sample).
        memory_busy_percent: Its memory-controller utilisation over the same period (NVML's
            per-process ``memUtil``, reported in the same sample as ``smUtil``): device memory
            read or written by the process's kernels and copies. NVML reports memory *held*
            and this per process, but no per-process bandwidth in bytes or PCIe traffic.
    """

    gpu_uuid: str
    pid: int
    memory_mib: int
    sm_percent: int = 0
    memory_busy_percent: int = 0


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """Device-level usage of one GPU.

    Attributes:
        gpu_uuid: The GPU.
        memory_used_mib: Memory in use on the device.
        sm_percent: Device utilisation rate (percent of time a kernel ran).
        processes: Per-process usage.
        memory_busy_percent: Device memory utilisation rate (percent of time device memory was
            read or written, by any process).
        throttle_reasons: NVML's clocks-event (throttle) reasons bitmask; 0 when none or
            unknown.
        sm_clock_mhz: The current SM clock; 0 when unknown.
        max_sm_clock_mhz: The highest SM clock; 0 when unknown.
        process_samples: Whether NVML gives per-process utilisation on this GPU (a driver or
            mode without it reports every process at 0 %, which is not idleness).
    """

    gpu_uuid: str
    memory_used_mib: int
    sm_percent: int
    processes: tuple[ProcessUsage, ...] = field(default=())
    memory_busy_percent: int = 0
    throttle_reasons: int = 0
    sm_clock_mhz: int = 0
    max_sm_clock_mhz: int = 0
    process_samples: bool = True


class Nvml(Protocol):
    """The NVML calls the agent uses; implemented by :class:`RealNvml` and ``FakeNvml``."""

    def devices(self) -> tuple[GpuDevice, ...]:
        """Every GPU, in index order, with its current health."""

    def usage(self) -> tuple[GpuUsage, ...]:
        """One usage sample per GPU."""

    def wait_xid(self, timeout_ms: int) -> tuple[str, int] | None:
        """Wait for a critical XID event: ``(gpu uuid, xid)``, or None after the timeout."""

    def close(self) -> None:
        """Release NVML."""


# XIDs that do not mean the GPU is broken (application errors), as NVIDIA's device plugin
# treats them: 13 graphics engine exception, 31 MMU fault, 43 GPU stopped processing,
# 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_MIB = 2**20


def short_model(name: str) -> str:
    """The model for the node label: ``NVIDIA H100 80GB HBM3`` -> ``H100``."""
    words = [w for w in name.replace("NVIDIA", "").replace("Tesla", "").split() if w]
    return words[0] if words else "unknown"


class RealNvml:
    """:class:`Nvml` over ``pynvml``; ``nvmlInit`` on construction.

    Raises:
        RuntimeError: NVML cannot be loaded (no driver) — with NVML's message.
    """

    def __init__(self) -> None:
        import pynvml

        self._nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise RuntimeError(f"NVML: {error}") from None
        self._unhealthy: set[str] = set()
        self._last_sample: dict[str, int] = {}
        self._events: Any = None

    def _handles(self) -> list[Any]:
        nvml = self._nvml
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]

    def devices(self) -> tuple[GpuDevice, ...]:
        """Every GPU, in index order."""
        nvml = self._nvml
        result = []
        driver = str(nvml.nvmlSystemGetDriverVersion())
        for index, handle in enumerate(self._handles()):
            uuid = nvml.nvmlDeviceGetUUID(handle)
            try:
                mig_enabled = nvml.nvmlDeviceGetMigMode(handle)[0] == nvml.NVML_DEVICE_MIG_ENABLE
                mig_capable = True
            except nvml.NVMLError:  # not MIG-capable
                mig_enabled = mig_capable = False
            name = str(nvml.nvmlDeviceGetName(handle))
            result.append(
                GpuDevice(
                    index=index,
                    uuid=uuid,
                    model=short_model(name),
                    memory_mib=nvml.nvmlDeviceGetMemoryInfo(handle).total // _MIB,
                    minor=nvml.nvmlDeviceGetMinorNumber(handle),
                    mig_enabled=mig_enabled,
                    mig=self._mig_devices(handle) if mig_enabled else (),
                    healthy=uuid not in self._unhealthy,
                    product_name=name,
                    mig_capable=mig_capable,
                    driver_version=driver,
                    numa_node=self._numa_node(handle),
                )
            )
        linked = self._nvlinked(self._handles())
        if linked is None:  # unknown: one domain, as if every GPU reached every other alike
            return tuple(result)
        domains = link_domains(len(result), linked)
        return tuple(replace(gpu, link_domain=domains[gpu.index]) for gpu in result)

    def _numa_node(self, handle: Any) -> int:
        """The GPU's NUMA node (``-1``: a driver or binding without the query, or none)."""
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetNumaNodeId(handle))
        except (AttributeError, nvml.NVMLError):
            return -1

    def _nvlinked(self, handles: list[Any]) -> set[tuple[int, int]] | None:
        """The pairs of GPU indexes NVML says are joined by NVLink (``None``: it cannot say)."""
        nvml = self._nvml
        pairs = set()
        for a, first in enumerate(handles):
            for b in range(a + 1, len(handles)):
                try:
                    status = nvml.nvmlDeviceGetP2PStatus(
                        first, handles[b], nvml.NVML_P2P_CAPS_INDEX_NVLINK
                    )
                except nvml.NVMLError:  # a driver without the query
                    return None
                if status == nvml.NVML_P2P_STATUS_OK:
                    pairs.add((a, b))
        return pairs

    def _mig_devices(self, handle: Any) -> tuple[MigDevice, ...]:
        nvml = self._nvml
        devices = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError:  # an empty slot
                continue
            memory = nvml.nvmlDeviceGetMemoryInfo(mig).total // _MIB
            attributes = nvml.nvmlDeviceGetAttributes(mig)
            profile = f"{attributes.gpuInstanceSliceCount}g.{round(memory / 1024)}gb"
            devices.append(MigDevice(nvml.nvmlDeviceGetUUID(mig), profile, memory))
        return tuple(devices)

    def usage(self) -> tuple[GpuUsage, ...]:
        """Device and per-process usage; "no samples" counts as 0 % (idle)."""
        nvml = self._nvml
        result = []
        for handle in self._handles():
            uuid = nvml.nvmlDeviceGetUUID(handle)
            memory: dict[int, int] = {}
            for getter in (
                nvml.nvmlDeviceGetComputeRunningProcesses,
                nvml.nvmlDeviceGetMPSComputeRunningProcesses,
            ):
                try:
                    for process in getter(handle):
                        used = process.usedGpuMemory or 0
                        memory[process.pid] = max(memory.get(process.pid, 0), used // _MIB)
                except nvml.NVMLError:
                    continue
            sm, busy, sampled = self._process_utilisation(handle, uuid)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            reasons, clock, top = self._clocks(handle)
            result.append(
                GpuUsage(
                    gpu_uuid=uuid,
                    memory_used_mib=nvml.nvmlDeviceGetMemoryInfo(handle).used // _MIB,
                    sm_percent=int(rates.gpu),
                    processes=tuple(
                        ProcessUsage(
                            uuid, pid, memory.get(pid, 0), sm.get(pid, 0), busy.get(pid, 0)
                        )
                        for pid in sorted(set(memory) | set(sm))
                    ),
                    memory_busy_percent=int(rates.memory),
                    throttle_reasons=reasons,
                    sm_clock_mhz=clock,
                    max_sm_clock_mhz=top,
                    process_samples=sampled,
                )
            )
        return tuple(result)

    def _clocks(self, handle: Any) -> tuple[int, int, int]:
        """The throttle reasons bitmask, the SM clock and its maximum (0 for what is unknown).

        ``nvmlDeviceGetCurrentClocksEventReasons`` is the r535+ name of
        ``...ClocksThrottleReasons``; a binding may have either, or neither.
        """
        nvml = self._nvml
        reasons_of = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        try:
            reasons = int(reasons_of(handle)) if reasons_of is not None else 0
        except nvml.NVMLError:  # not supported on this GPU
            reasons = 0
        try:
            clock = int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
            top = int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
        except (AttributeError, nvml.NVMLError):
            clock = top = 0
        return reasons, clock, top

    def _process_utilisation(
        self, handle: Any, uuid: str
    ) -> tuple[dict[int, int], dict[int, int], bool]:
        """Per PID, the highest SM and memory utilisation of the samples since the last call.

        The third value says whether NVML gives such samples on this GPU at all.
        NVML keeps one sample per process per driver sample period (1/6 s to 1 s, by product)
        and returns those newer than the timestamp passed, so nothing between two calls is
        missed and nothing is counted twice.
        """
        nvml = self._nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._last_sample.get(uuid, 0))
        except AttributeError:  # a binding without the call
            return {}, {}, False
        except nvml.NVMLError as error:  # NOT_FOUND or zero samples: idle
            if getattr(error, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
                return {}, {}, False
            samples = []
        sm: dict[int, int] = {}
        busy: dict[int, int] = {}
        for sample in samples:
            sm[sample.pid] = max(sm.get(sample.pid, 0), int(sample.smUtil))
            busy[sample.pid] = max(busy.get(sample.pid, 0), int(sample.memUtil))
            self._last_sample[uuid] = max(self._last_sample.get(uuid, 0), sample.timeStamp)
        return sm, busy, True

    def wait_xid(self, timeout_ms: int) -> tuple[str, int] | None:
        """Block up to ``timeout_ms`` for a critical XID; marks that GPU unhealthy."""
        nvml = self._nvml
        if self._events is None:
            self._events = nvml.nvmlEventSetCreate()
            for handle in self._handles():
                try:
                    nvml.nvmlDeviceRegisterEvents(
                        handle, nvml.nvmlEventTypeXidCriticalError, self._events
                    )
                except nvml.NVMLError:  # events not supported on this GPU
                    continue
        try:
            event = nvml.nvmlEventSetWait_v2(self._events, timeout_ms)
        except nvml.NVMLError:  # timeout
            return None
        xid = int(event.eventData)
        if xid in APPLICATION_XIDS:
            return None
        uuid = nvml.nvmlDeviceGetUUID(event.device)
        self._unhealthy.add(uuid)
        return uuid, xid

    def close(self) -> None:
        """Shut NVML down."""
        if self._events is not None:
            self._nvml.nvmlEventSetFree(self._events)
        self._nvml.nvmlShutdown()


def link_domains(count: int, linked: set[tuple[int, int]]) -> tuple[int, ...]:
    """Per GPU index, its NVLink domain: the connected groups of the ``linked`` pairs.

    Numbered in the order of their lowest index; an NVSwitch joins every pair: one domain.
    """
    parent = list(range(count))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in linked:
        parent[max(root(a), root(b))] = min(root(a), root(b))
    numbers: dict[int, int] = {}
    return tuple(numbers.setdefault(root(i), len(numbers)) for i in range(count))
