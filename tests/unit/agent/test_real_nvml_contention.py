"""RealNvml's contention readings over a stand-in ``pynvml``, guarded where drivers differ.

No GPU is needed: the stand-in module answers the calls the wrapper makes the way NVML does
(including raising ``NVMLError`` with ``NOT_SUPPORTED``), so the guards are exercised as a driver
without the calls would exercise them.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from gpupool.agent.nvml import RealNvml

NOT_SUPPORTED, NOT_FOUND = 3, 6


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


@dataclass
class _Sample:  # NVML's field names
    pid: int
    smUtil: int
    memUtil: int
    timeStamp: int


@dataclass
class _Rates:
    gpu: int
    memory: int


@dataclass
class _Memory:
    used: int
    total: int = 80 * 2**30


def _stand_in(*, event_reasons: bool, throttle_reasons: bool, samples: object) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = NVMLError  # type: ignore[attr-defined]
    nvml.NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED  # type: ignore[attr-defined]
    nvml.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
    calls = {
        "nvmlInit": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: f"h{index}",
        "nvmlDeviceGetUUID": lambda handle: "GPU-0",
        "nvmlDeviceGetComputeRunningProcesses": lambda handle: [],
        "nvmlDeviceGetMPSComputeRunningProcesses": lambda handle: [],
        "nvmlDeviceGetUtilizationRates": lambda handle: _Rates(100, 97),
        "nvmlDeviceGetMemoryInfo": lambda handle: _Memory(2**30),
        "nvmlDeviceGetClockInfo": lambda handle, clock: 1320,
        "nvmlDeviceGetMaxClockInfo": lambda handle, clock: 1980,
        "nvmlDeviceGetProcessUtilization": samples,
    }
    if event_reasons:
        calls["nvmlDeviceGetCurrentClocksEventReasons"] = lambda handle: 0x4
    if throttle_reasons:
        calls["nvmlDeviceGetCurrentClocksThrottleReasons"] = lambda handle: 0x40
    for name, call in calls.items():
        setattr(nvml, name, call)
    return nvml


Install = Callable[[types.ModuleType], RealNvml]


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Install:
    def put(module: types.ModuleType) -> RealNvml:
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return RealNvml()

    return put


def _samples(handle: str, since: int) -> list[_Sample]:
    return [_Sample(10, 25, 40, 5), _Sample(11, 75, 57, 6)]


def test_throttle_reasons_clocks_and_per_process_samples_are_read(install: Install) -> None:
    nvml = install(_stand_in(event_reasons=True, throttle_reasons=True, samples=_samples))
    (gpu,) = nvml.usage()
    assert (gpu.sm_percent, gpu.memory_busy_percent) == (100, 97)
    assert gpu.throttle_reasons == 0x4  # the r535+ name wins when both exist
    assert (gpu.sm_clock_mhz, gpu.max_sm_clock_mhz) == (1320, 1980)
    assert gpu.process_samples
    assert [(p.pid, p.sm_percent) for p in gpu.processes] == [(10, 25), (11, 75)]


def test_an_older_binding_and_a_driver_without_per_process_samples(install: Install) -> None:
    def unsupported(handle: str, since: int) -> list[_Sample]:
        raise NVMLError(NOT_SUPPORTED)

    nvml = install(_stand_in(event_reasons=False, throttle_reasons=True, samples=unsupported))
    (gpu,) = nvml.usage()
    assert gpu.throttle_reasons == 0x40  # the older name
    assert not gpu.process_samples  # every share then counts as running


def test_no_samples_yet_is_idle_not_unsupported(install: Install) -> None:
    def none_yet(handle: str, since: int) -> list[_Sample]:
        raise NVMLError(NOT_FOUND)

    nvml = install(_stand_in(event_reasons=False, throttle_reasons=False, samples=none_yet))
    (gpu,) = nvml.usage()
    assert gpu.process_samples
    assert gpu.throttle_reasons == 0  # a binding with neither call: no reasons, not an error
