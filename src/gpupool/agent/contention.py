"""Per-GPU contention on this node: assessed every sample, published on the Node, exported.

Every usage sample (5 s) each GPU is assessed (:func:`gpupool.core.contention.assess`) from
NVML's readings and the shares on it: the pods the device plugin granted it, with their compute
caps, and pods NVML shows running on it with no grant here (a DRA claim's: counted as uncapped).
The per-process utilisation is a share's measured part, where NVML gives it.

What is published (``gpupool.io/gpu-contention``, with the usage signal) is each GPU's worst
assessment since the previous publication, for the reason the usage signal carries the period's
peak: a minute in which two shares fought for 20 s is a minute with contention, and the latest
sample alone would miss it when the fight ended before the write.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpupool.agent.grants import ContainerGrant
from gpupool.agent.nvml import GpuDevice, GpuUsage
from gpupool.agent.telemetry import PodGpuUsage
from gpupool.core.contention import (
    Contention,
    ContentionLevel,
    GpuReadings,
    ShareOnGpu,
    assess,
)
from gpupool.core.model import MILLI_PER_GPU
from gpupool.kube.objects.contention_signal import ContentionSignal, GpuContentionEntry
from gpupool.kube.objects.timestamps import format_time

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


def shares_on_gpus(
    grants: Iterable[ContainerGrant], samples: Iterable[PodGpuUsage]
) -> dict[str, dict[str, float]]:
    """Per GPU UUID, per pod UID on it, its compute cap in percent.

    A pod's containers on one GPU add up (at most the whole GPU); a pod seen on a GPU it holds
    no grant of (a DRA claim's) counts as uncapped.
    """
    caps: dict[str, dict[str, float]] = {}
    for grant in grants:
        for gpu in grant.gpus:
            cap = 100.0 if gpu.exclusive else gpu.milli * 100 / MILLI_PER_GPU
            pods = caps.setdefault(gpu.uuid, {})
            pods[grant.pod_uid] = min(100.0, pods.get(grant.pod_uid, 0.0) + cap)
    for sample in samples:
        caps.setdefault(sample.gpu_uuid, {}).setdefault(sample.pod_uid, 100.0)
    return caps


def assess_gpus(
    usage: Iterable[GpuUsage], caps: dict[str, dict[str, float]], samples: Iterable[PodGpuUsage]
) -> dict[str, Contention]:
    """Per GPU UUID, its contention in this sample."""
    measured = {(s.gpu_uuid, s.pod_uid): float(s.sm_percent) for s in samples}
    result = {}
    for gpu in usage:
        readings = GpuReadings(
            gpu.sm_percent,
            gpu.memory_busy_percent,
            gpu.throttle_reasons,
            gpu.sm_clock_mhz,
            gpu.max_sm_clock_mhz,
        )
        shares = [
            ShareOnGpu(
                uid,
                cap,
                measured.get((gpu.gpu_uuid, uid), 0.0) if gpu.process_samples else None,
            )
            for uid, cap in sorted(caps.get(gpu.gpu_uuid, {}).items())
        ]
        result[gpu.gpu_uuid] = assess(readings, shares)
    return result


@dataclass(frozen=True, slots=True)
class _Assessed:
    """A GPU's assessment with the utilisation it was made from."""

    contention: Contention
    sm_percent: float
    memory_busy_percent: float

    def entry(self) -> GpuContentionEntry:
        return GpuContentionEntry(
            level=self.contention.level.value,
            score=self.contention.score,
            reasons=self.contention.reasons,
            sm_percent=self.sm_percent,
            memory_busy_percent=self.memory_busy_percent,
            pods=dict(self.contention.slowdown),
        )


def _worse(a: _Assessed | None, b: _Assessed) -> _Assessed:
    return b if a is None or b.contention.score > a.contention.score else a


class ContentionTracker:
    """Each GPU's worst assessment since the last publication (as the usage tracker does)."""

    def __init__(self) -> None:
        self._worst: dict[int, _Assessed] = {}
        self._unsent: dict[int, _Assessed] = {}
        self._sampled_at = 0.0

    def update(
        self,
        devices: Iterable[GpuDevice],
        usage: Iterable[GpuUsage],
        contention: dict[str, Contention],
        now: float,
    ) -> None:
        """Record one sample's assessments (:func:`assess_gpus`)."""
        rates = {gpu.gpu_uuid: gpu for gpu in usage}
        for device in devices:
            found, gpu = contention.get(device.uuid), rates.get(device.uuid)
            if found is None or gpu is None:
                continue
            seen = _Assessed(found, gpu.sm_percent, gpu.memory_busy_percent)
            self._worst[device.index] = _worse(self._worst.get(device.index), seen)
        self._sampled_at = now

    def signal(self, period: float) -> ContentionSignal:
        """The annotation value: the contended GPUs of every sample not yet published."""
        for index, seen in self._worst.items():
            self._unsent[index] = _worse(self._unsent.get(index), seen)
        self._worst = {}
        gpus = {
            index: seen.entry()
            for index, seen in sorted(self._unsent.items())
            if seen.contention.level is not ContentionLevel.NONE
        }
        return ContentionSignal(format_time(self._sampled_at), gpus, period)

    def published(self) -> None:
        """The last :meth:`signal` was written: the next one covers the samples after it."""
        self._unsent.clear()


class ContentionMetrics:
    """The agent's contention series, on its registry: every sample's, per GPU and pod.

    Named apart from the control plane's ``gpupool_gpu_contention_score{node,gpu}`` (the worst of
    each publication period, contended GPUs only), so a query never mixes the two.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Gauge

        self.score = Gauge(
            "gpupool_gpu_sampled_contention_score",
            "Contention of the GPU in the last sample: 0 none, 1 a share gets almost nothing.",
            ("gpu_uuid",),
            registry=registry,
        )
        self.slowdown = Gauge(
            "gpupool_pod_gpu_slowdown_ratio",
            "Estimated slowdown of the pod on the GPU from contention (1: none).",
            ("namespace", "pod", "pod_uid", "gpu_uuid"),
            registry=registry,
        )

    def update(self, contention: dict[str, Contention], grants: Iterable[ContainerGrant]) -> None:
        """Replace every series with this sample's."""
        names = {grant.pod_uid: (grant.namespace, grant.pod) for grant in grants}
        self.score.clear()
        self.slowdown.clear()
        for uuid, found in sorted(contention.items()):
            self.score.labels(uuid).set(found.score)
            for uid, ratio in sorted(found.slowdown.items()):
                namespace, name = names.get(uid, ("", ""))
                self.slowdown.labels(namespace, name, uid, uuid).set(ratio)
