"""Process -> cgroup -> pod, metrics and the idle signal."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.grants import ContainerGrant, GpuGrant
from gpupool.agent.nvml import ProcessUsage
from gpupool.agent.telemetry import AgentMetrics, UsageTracker, attribute, pod_uid_of

UID_A = "0f1e2d3c-4b5a-4968-8776-655443322110"
UID_B = "11111111-2222-4333-8444-555555555555"


def _proc(root: Path, pid: int, cgroup: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(cgroup)


def test_pod_uid_from_cgroupfs_and_systemd_paths(tmp_path: Path) -> None:
    _proc(tmp_path, 10, f"0::/kubepods/burstable/pod{UID_A}/abc123\n")
    _proc(tmp_path, 11, f"0::/kubepods.slice/kubepods-pod{UID_B.replace('-', '_')}.slice/cri-x\n")
    _proc(tmp_path, 12, "0::/system.slice/nvidia-mps.service\n")
    assert pod_uid_of(10, tmp_path) == UID_A
    assert pod_uid_of(11, tmp_path) == UID_B
    assert pod_uid_of(12, tmp_path) is None
    assert pod_uid_of(99, tmp_path) is None  # ended


def test_usage_is_attributed_to_the_right_pod_and_exported(tmp_path: Path) -> None:
    _proc(tmp_path, 10, f"0::/kubepods/pod{UID_A}/c1\n")
    _proc(tmp_path, 11, f"0::/kubepods/pod{UID_A}/c2\n")
    _proc(tmp_path, 20, f"0::/kubepods/pod{UID_B}/c\n")
    _proc(tmp_path, 30, "0::/system.slice/mps\n")
    nvml = FakeNvml.preset("h100", "n")
    nvml.set_processes(
        "GPU-n-0",
        [
            ProcessUsage("GPU-n-0", 10, 1000, 20),
            ProcessUsage("GPU-n-0", 11, 500, 15),
            ProcessUsage("GPU-n-0", 20, 4000, 0),
            ProcessUsage("GPU-n-0", 30, 300, 0),
        ],
    )
    pods = attribute(nvml.usage(), lambda pid: pod_uid_of(pid, tmp_path))
    by_uid = {p.pod_uid: p for p in pods}
    assert (by_uid[UID_A].memory_mib, by_uid[UID_A].sm_percent) == (1500, 35)
    assert (by_uid[UID_B].memory_mib, by_uid[UID_B].sm_percent) == (4000, 0)
    metrics = AgentMetrics()
    grants = [ContainerGrant(UID_A, "team", "trainer", "c", (GpuGrant("GPU-n-0", 0),))]
    metrics.update(nvml.devices(), nvml.usage(), pods, grants)
    text = generate_latest(metrics.registry).decode()
    assert (
        'gpupool_pod_gpu_sm_utilization_percent{gpu_uuid="GPU-n-0",namespace="team",'
        f'pod="trainer",pod_uid="{UID_A}"}} 35.0'
    ) in text
    assert 'gpupool_gpu_memory_used_bytes{gpu_uuid="GPU-n-0"} 6.0817408e+09' in text
    assert 'gpupool_gpu_healthy{gpu_uuid="GPU-n-7"} 1.0' in text


def test_idle_signal_keeps_last_active_time() -> None:
    from gpupool.agent.telemetry import PodGpuUsage

    tracker = UsageTracker()
    tracker.update({UID_A, UID_B}, [PodGpuUsage(UID_A, "g", 100, 50)], now=1_000.0)
    tracker.update({UID_A, UID_B}, [PodGpuUsage(UID_A, "g", 100, 0)], now=1_060.0)
    signal = tracker.signal()
    assert signal["sampledAt"] == "1970-01-01T00:17:40Z"
    assert signal["pods"][UID_A] == {
        "smPercent": 0,
        "memoryMib": 100,
        "lastActive": "1970-01-01T00:16:40Z",
    }
    assert signal["pods"][UID_B]["lastActive"] == "1970-01-01T00:16:40Z"  # first seen
    tracker.update({UID_B}, [], now=1_120.0)
    assert set(tracker.signal()["pods"]) == {UID_B}  # ended pods leave the signal
