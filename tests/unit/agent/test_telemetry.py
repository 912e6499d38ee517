"""Process -> cgroup -> pod, metrics and the idle signal."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import generate_latest

from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.grants import ContainerGrant, GpuGrant
from gpupool.agent.nvml import ProcessUsage
from gpupool.agent.telemetry import (
    AgentMetrics,
    PodGpuUsage,
    UsageTracker,
    attribute,
    pod_uid_of,
    tracked_pods,
)
from gpupool.kube.objects.usage_signal import encode_usage

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
            ProcessUsage("GPU-n-0", 10, 1000, 20, 70),
            ProcessUsage("GPU-n-0", 11, 500, 15, 40),
            ProcessUsage("GPU-n-0", 20, 4000, 0, 9),
            ProcessUsage("GPU-n-0", 30, 300, 0),
        ],
    )
    pods = attribute(nvml.usage(), lambda pid: pod_uid_of(pid, tmp_path))
    by_uid = {p.pod_uid: p for p in pods}
    assert (by_uid[UID_A].memory_mib, by_uid[UID_A].sm_percent) == (1500, 35)
    # 70 + 40 + 9 ask the memory bus for 119 %: each process gets its part (58 + 33, and 7)
    assert by_uid[UID_A].memory_busy_percent == 91
    assert (by_uid[UID_B].memory_mib, by_uid[UID_B].sm_percent) == (4000, 0)
    assert by_uid[UID_B].memory_busy_percent == 7  # copying without compute
    metrics = AgentMetrics()
    grants = [ContainerGrant(UID_A, "team", "trainer", "c", (GpuGrant("GPU-n-0", 0),))]
    metrics.update(nvml.devices(), nvml.usage(), pods, grants)
    text = generate_latest(metrics.registry).decode()
    assert (
        'gpupool_pod_gpu_sm_utilization_percent{gpu_uuid="GPU-n-0",namespace="team",'
        f'pod="trainer",pod_uid="{UID_A}"}} 35.0'
    ) in text
    assert (
        'gpupool_pod_gpu_memory_utilization_percent{gpu_uuid="GPU-n-0",namespace="team",'
        f'pod="trainer",pod_uid="{UID_A}"}} 91.0'
    ) in text
    assert 'gpupool_gpu_memory_used_bytes{gpu_uuid="GPU-n-0"} 6.0817408e+09' in text
    assert 'gpupool_gpu_memory_utilization_percent{gpu_uuid="GPU-n-0"} 100.0' in text
    assert 'gpupool_gpu_healthy{gpu_uuid="GPU-n-7"} 1.0' in text


def test_idle_signal_keeps_last_active_time() -> None:
    tracker = UsageTracker()
    tracker.update({UID_A, UID_B}, [PodGpuUsage(UID_A, "g", 100, 50)], now=1_000.0)
    tracker.update({UID_A, UID_B}, [PodGpuUsage(UID_A, "g", 100, 0)], now=1_060.0)
    signal = json.loads(encode_usage(tracker.signal(60.0)))  # as written on the Node
    assert signal["sampledAt"] == "1970-01-01T00:17:40Z"
    assert signal["periodSeconds"] == 60.0
    assert signal["pods"][UID_A] == {
        "smPercent": 50,  # the burst of the first sample, though the latest one is 0
        "memoryBusyPercent": 0,
        "memoryMib": 100,
        "lastActive": "1970-01-01T00:16:40Z",
    }
    assert signal["pods"][UID_B]["lastActive"] == "1970-01-01T00:16:40Z"  # first seen
    tracker.update({UID_B}, [], now=1_120.0)
    assert set(tracker.signal(60.0).pods) == {UID_B}  # ended pods leave the signal


def test_idle_signal_carries_the_periods_highest_sample_until_published() -> None:
    tracker = UsageTracker()
    pods = {UID_A}
    for t, sm, busy in ((0, 0, 0), (5, 30, 0), (10, 0, 0), (15, 0, 25), (20, 0, 0)):
        tracker.update(pods, [PodGpuUsage(UID_A, "g", 800, sm, busy)], now=float(t))
    entry = tracker.signal(60.0).pods[UID_A]
    assert (entry.sm_percent, entry.memory_busy_percent) == (30, 25)
    assert entry.last_active == "1970-01-01T00:00:05Z"
    tracker.published()
    tracker.update(pods, [PodGpuUsage(UID_A, "g", 800, 0, 3)], now=25.0)
    entry = tracker.signal(60.0).pods[UID_A]
    assert (entry.sm_percent, entry.memory_busy_percent) == (0, 3)  # a new period
    tracker.update(pods, [PodGpuUsage(UID_A, "g", 800, 0, 0)], now=30.0)
    assert tracker.signal(60.0).pods[UID_A].memory_busy_percent == 3  # not published: kept


def test_a_burst_sampled_while_the_signal_is_written_goes_in_the_next_one() -> None:
    tracker = UsageTracker()
    pods = {UID_A}
    tracker.update(pods, [PodGpuUsage(UID_A, "g", 800, 0, 0)], now=0.0)
    assert tracker.signal(60.0).pods[UID_A].sm_percent == 0  # being written
    tracker.update(pods, [PodGpuUsage(UID_A, "g", 800, 40, 10)], now=5.0)  # during the write
    tracker.published()
    tracker.update(pods, [PodGpuUsage(UID_A, "g", 800, 0, 0)], now=10.0)
    entry = tracker.signal(60.0).pods[UID_A]
    assert (entry.sm_percent, entry.memory_busy_percent) == (40, 10)
    tracker.update(pods, [PodGpuUsage(UID_A, "g", 800, 0, 0)], now=15.0)
    assert tracker.signal(60.0).pods[UID_A].sm_percent == 40  # that write failed: still carried


def test_claim_pods_are_reported_by_their_processes_on_the_claims_gpus() -> None:
    """A claim names no pod: its pods are the ones running on its GPUs (idle ones at 0 %)."""
    granted, on_claim, elsewhere, quiet = "pod-granted", "pod-claim", "pod-other", "pod-quiet"
    samples = [
        PodGpuUsage(on_claim, "GPU-claimed", 2048, 0),  # a CUDA context held, nothing running
        PodGpuUsage(elsewhere, "GPU-unclaimed", 512, 40),  # no grant, no claim on its GPU
    ]
    tracked = tracked_pods([granted], ["GPU-claimed"], samples)
    assert tracked == {granted, on_claim}  # quiet's claim pod has no process: not reported
    assert quiet not in tracked
    tracker = UsageTracker()
    tracker.update(tracked, samples, now=1_000.0)
    signal = tracker.signal(60.0)
    assert signal.pods[on_claim].sm_percent == 0
    assert signal.pods[on_claim].memory_mib == 2048
    assert set(signal.pods) == {granted, on_claim}
