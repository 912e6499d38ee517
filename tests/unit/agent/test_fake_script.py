"""The fake NVML scripted through its file, as an agent in a pod of the real node is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.fakescript import ScriptError, ScriptFile, parse_script
from gpupool.agent.nvml import ProcessUsage

GPU0, GPU1 = "GPU-n-0", "GPU-n-1"


def _write(path: Path, document: object) -> None:
    """Write and move the mtime on: two writes within the clock's tick must both be seen."""
    path.write_text(json.dumps(document))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


@pytest.fixture
def scripted(tmp_path: Path) -> tuple[FakeNvml, Path]:
    nvml = FakeNvml.preset("h100", "n")
    path = tmp_path / "fake-nvml.json"
    nvml.follow(ScriptFile(path))
    return nvml, path


def test_processes_in_the_file_are_what_nvml_reports(scripted: tuple[FakeNvml, Path]) -> None:
    nvml, path = scripted
    assert all(not gpu.processes for gpu in nvml.usage())  # no file yet: nothing runs
    process = {"pid": 4242, "memory_mib": 2048, "sm_percent": 60, "memory_busy_percent": 10}
    _write(path, {"processes": {GPU0: [process]}})
    usage = {gpu.gpu_uuid: gpu for gpu in nvml.usage()}
    assert usage[GPU0].processes == (ProcessUsage(GPU0, 4242, 2048, 60, 10),)
    assert (usage[GPU0].memory_used_mib, usage[GPU0].sm_percent) == (2048, 60)
    assert not usage[GPU1].processes
    _write(path, {"processes": {GPU1: [process]}})  # the process moved: GPU0 runs nothing now
    usage = {gpu.gpu_uuid: gpu for gpu in nvml.usage()}
    assert (bool(usage[GPU0].processes), bool(usage[GPU1].processes)) == (False, True)


def test_each_xid_is_raised_once_in_order(scripted: tuple[FakeNvml, Path]) -> None:
    nvml, path = scripted
    _write(path, {"xids": [{"gpu": GPU1, "xid": 79}]})
    assert nvml.wait_xid(10) == (GPU1, 79)
    assert nvml.wait_xid(10) is None  # read again, not raised again
    _write(
        path,
        {"xids": [{"gpu": GPU1, "xid": 79}, {"gpu": GPU0, "xid": 13}, {"gpu": GPU0, "xid": 48}]},
    )
    assert nvml.wait_xid(10) is None  # 13 is the application's fault: the GPU stays healthy
    assert nvml.wait_xid(10) == (GPU0, 48)
    healthy = {gpu.uuid: gpu.healthy for gpu in nvml.devices()}
    assert (healthy[GPU0], healthy[GPU1], healthy["GPU-n-2"]) == (False, False, True)


def test_a_restarted_agent_sees_the_broken_gpu_again(tmp_path: Path) -> None:
    path = tmp_path / "fake-nvml.json"
    _write(path, {"xids": [{"gpu": GPU1, "xid": 79}]})
    restarted = FakeNvml.preset("h100", "n")
    restarted.follow(ScriptFile(path))
    assert restarted.wait_xid(10) == (GPU1, 79)


def test_a_bad_file_keeps_the_last_good_script(
    scripted: tuple[FakeNvml, Path], caplog: pytest.LogCaptureFixture
) -> None:
    nvml, path = scripted
    _write(path, {"processes": {GPU0: [{"pid": 7, "memory_mib": 100, "sm_percent": 90}]}})
    assert nvml.usage()[0].sm_percent == 90
    _write(path, {"processes": {GPU0: [{"pid": 7, "sm_percent": 190}]}})
    assert nvml.usage()[0].sm_percent == 90  # not every GPU idle because of a typo
    assert "processes.GPU-n-0[0].sm_percent: 190 is not 0..100" in caplog.text


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ("{", "not JSON"),
        ("[]", "expected an object"),
        ('{"procs": {}}', "unknown field(s) procs"),
        ('{"processes": []}', "processes: expected an object"),
        ('{"processes": {"G": {}}}', "processes.G: expected a list"),
        ('{"processes": {"G": [{"memory_mib": 1}]}}', "processes.G[0].pid: missing"),
        ('{"processes": {"G": [{"pid": -1}]}}', "processes.G[0].pid: -1"),
        ('{"processes": {"G": [{"pid": 1, "cores": 5}]}}', "unknown field(s) cores"),
        ('{"processes": {"G": [{"pid": true}]}}', "processes.G[0].pid: True"),
        ('{"xids": {}}', "xids: expected a list"),
        ('{"xids": [{"xid": 79}]}', "xids[0].gpu: expected a GPU UUID"),
        ('{"xids": [{"gpu": "G", "xid": "79"}]}', "xids[0].xid: '79'"),
    ],
)
def test_bad_scripts_name_the_field(document: str, field: str) -> None:
    with pytest.raises(ScriptError) as raised:
        parse_script(document)
    assert field in str(raised.value)


def test_an_empty_file_scripts_nothing() -> None:
    script = parse_script("")
    assert (script.processes, script.xids) == ({}, ())


def test_processes_asking_for_more_than_the_gpu_each_get_their_part(
    scripted: tuple[FakeNvml, Path],
) -> None:
    nvml, path = scripted
    hungry = [
        {"pid": 1, "sm_percent": 80, "memory_busy_percent": 90},
        {"pid": 2, "sm_percent": 40, "memory_busy_percent": 30},
    ]
    _write(path, {"processes": {GPU0: hungry}, "throttles": {GPU1: {"reasons": 4}}})
    gpu0, gpu1 = nvml.usage()[:2]
    assert (gpu0.sm_percent, gpu0.memory_busy_percent) == (100, 100)  # saturated
    assert [(p.sm_percent, p.memory_busy_percent) for p in gpu0.processes] == [(66, 75), (33, 25)]
    assert (gpu0.throttle_reasons, gpu0.sm_clock_mhz, gpu0.max_sm_clock_mhz) == (0, 1980, 1980)
    assert gpu1.throttle_reasons == 4  # power capped, at the board's clock until told otherwise
    _write(path, {"throttles": {GPU1: {"reasons": 64, "sm_clock_mhz": 990}}})
    gpu0, gpu1 = nvml.usage()[:2]
    assert not gpu0.processes
    assert (gpu1.throttle_reasons, gpu1.sm_clock_mhz) == (64, 990)


def test_a_bad_throttle_entry_names_its_field() -> None:
    with pytest.raises(ScriptError, match=r"throttles.GPU-n-0.sm_clock_mhz: -1 is not"):
        parse_script(json.dumps({"throttles": {GPU0: {"reasons": 4, "sm_clock_mhz": -1}}}))
    with pytest.raises(ScriptError, match=r"throttles.GPU-n-0: unknown field\(s\) clock"):
        parse_script(json.dumps({"throttles": {GPU0: {"clock": 1}}}))
