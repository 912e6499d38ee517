"""The agent's contention signal: the fake NVML drives contention, the agent publishes it."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpupool.agent.contention import (
    ContentionMetrics,
    ContentionTracker,
    assess_gpus,
    shares_on_gpus,
)
from gpupool.agent.fakenvml import FakeNvml
from gpupool.agent.fakescript import Throttle
from gpupool.agent.grants import ContainerGrant, GpuGrant
from gpupool.agent.nvml import GpuUsage, ProcessUsage
from gpupool.agent.telemetry import attribute
from gpupool.kube.objects.contention_signal import (
    ContentionSignalError,
    decode_contention,
    encode_contention,
)

SERVE, TRAIN = "11111111-2222-4333-8444-555555555555", "22222222-3333-4444-8555-666666666666"
PIDS = {10: SERVE, 20: TRAIN}
GPU0, GPU1 = "GPU-n-0", "GPU-n-1"


def _grant(uid: str, name: str, milli: int) -> ContainerGrant:
    return ContainerGrant(uid, "team", name, "c", (GpuGrant(GPU0, 0, milli, 0, exclusive=False),))


GRANTS = [_grant(SERVE, "serve", 500), _grant(TRAIN, "train", 500)]


def _sample(nvml: FakeNvml, tracker: ContentionTracker, now: float) -> None:
    usage = nvml.usage()
    pods = attribute(usage, PIDS.get)
    tracker.update(
        nvml.devices(), usage, assess_gpus(usage, shares_on_gpus(GRANTS, pods), pods), now
    )


def test_two_half_shares_asking_for_more_than_the_gpu_are_published_as_contended() -> None:
    nvml = FakeNvml.preset("h100", "n")
    nvml.set_processes(GPU0, [ProcessUsage(GPU0, 10, 1000, 30), ProcessUsage(GPU0, 20, 1000, 90)])
    tracker = ContentionTracker()
    _sample(nvml, tracker, 1_800_000_000.0)
    signal = decode_contention(encode_contention(tracker.signal(60.0)))
    assert list(signal.gpus) == [0]  # GPU 1 runs nothing: not listed
    entry = signal.gpus[0]
    # 30 + 90 ask for 120 %: serve gets 25 % and train 75 %; serve's cap is 50 %, so 2x
    assert (entry.level, entry.score, entry.sm_percent) == ("high", 0.5, 100.0)
    assert entry.pods == {SERVE: 2.0, TRAIN: 1.0}
    assert "SM saturated (100%) with 2 running shares" in entry.reasons[0]


def test_the_worst_sample_of_the_period_is_published_until_written() -> None:
    nvml = FakeNvml.preset("h100", "n")
    tracker = ContentionTracker()
    nvml.set_processes(GPU0, [ProcessUsage(GPU0, 10, 1000, 30), ProcessUsage(GPU0, 20, 1000, 90)])
    _sample(nvml, tracker, 1.0)
    nvml.set_processes(GPU0, [ProcessUsage(GPU0, 10, 1000, 30)])  # the fight is over
    _sample(nvml, tracker, 2.0)
    assert tracker.signal(60.0).gpus[0].level == "high"  # it happened in this period
    _sample(nvml, tracker, 3.0)
    assert tracker.signal(60.0).gpus[0].level == "high"  # that write failed: still carried
    tracker.published()
    _sample(nvml, tracker, 4.0)
    assert tracker.signal(60.0).gpus == {}


def test_a_throttled_gpu_slows_its_pods_and_is_exported() -> None:
    nvml = FakeNvml.preset("h100", "n")
    nvml.set_processes(GPU0, [ProcessUsage(GPU0, 10, 1000, 30)])
    nvml.set_throttle(GPU0, Throttle(reasons=0x40, sm_clock_mhz=990))
    usage = nvml.usage()
    pods = attribute(usage, PIDS.get)
    contention = assess_gpus(usage, shares_on_gpus(GRANTS, pods), pods)
    assert contention[GPU0].slowdown == {SERVE: 2.0, TRAIN: 1.0 * 2.0}
    registry = CollectorRegistry()
    ContentionMetrics(registry).update(contention, GRANTS)
    text = generate_latest(registry).decode()
    assert 'gpupool_gpu_sampled_contention_score{gpu_uuid="GPU-n-0"} 0.5' in text
    assert 'gpupool_gpu_sampled_contention_score{gpu_uuid="GPU-n-1"} 0.0' in text
    assert (
        'gpupool_pod_gpu_slowdown_ratio{gpu_uuid="GPU-n-0",namespace="team",pod="serve",'
        f'pod_uid="{SERVE}"}} 2.0'
    ) in text


def test_a_pod_on_a_gpu_without_a_grant_counts_as_uncapped() -> None:
    caps = shares_on_gpus(GRANTS, attribute(_usage_on(GPU1), {30: "claim-pod"}.get))
    assert caps == {GPU0: {SERVE: 50.0, TRAIN: 50.0}, GPU1: {"claim-pod": 100.0}}


def _usage_on(gpu: str) -> tuple[GpuUsage, ...]:
    nvml = FakeNvml.preset("h100", "n")
    nvml.set_processes(gpu, [ProcessUsage(gpu, 30, 1000, 10)])
    return nvml.usage()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"sampledAt": "x", "gpus": {"0": {"level": "high", "score": 1.5}}}', "score"),
        ('{"sampledAt": "x", "gpus": {"0": {"level": "dire", "score": 0.5}}}', "level"),
        (
            '{"sampledAt": "x", "gpus": {"0": {"level": "low", "score": 0.3, "pods": {"u": 0.5}}}}',
            "pods",
        ),
        ('{"sampledAt": "x", "gpus": {"-1": {"level": "low", "score": 0.3}}}', "gpus"),
        ("not json", "not JSON"),
    ],
)
def test_a_bad_annotation_names_its_field(text: str, field: str) -> None:
    with pytest.raises(ContentionSignalError, match=f"gpupool.io/gpu-contention: .*{field}"):
        decode_contention(text)
