"""``/api/v1/contention``: the contended GPUs, the shares slowed on them, each class's part.

What the node agents measured (the ``gpupool.io/gpu-contention`` Node annotation; see
``docs/interference.md``), never what a pod says of itself. Quiet GPUs are not listed; an empty
list means no agent reports contention (or no agent is running: see ``/metrics``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from gpupool.api.view import ClusterView
from gpupool.core.contention import ContendedGpu, class_shares


class SlowedShare(BaseModel):
    """One pod's share of a contended GPU."""

    pod: str = Field(description="namespace/name of the pod (its UID when not known)")
    workload_class: str = Field(description="Its workload class as policy counts it ('': none)")
    slowdown: float = Field(description="Estimated slowdown from the contention (1: none)")


class ContendedGpuModel(BaseModel):
    """A GPU whose node agent measured contention."""

    node: str
    gpu: int = Field(description="The GPU's index on the node")
    uuid: str = Field(description="The device's UUID, or '' when the node does not report it")
    level: str = Field(description="low or high")
    score: float = Field(description="0 (none) to 1 (the worst-hit share gets almost nothing)")
    reasons: list[str] = Field(description="Why, in words")
    sm_percent: float = Field(description="SM utilisation in the sample assessed")
    memory_busy_percent: float = Field(description="Memory-controller utilisation then")
    shares: list[SlowedShare]


class Contention(BaseModel):
    """Contention across the cluster."""

    gpus: list[ContendedGpuModel] = Field(description="Contended GPUs, by node and index")
    class_share: dict[str, float] = Field(
        description="Per workload class, its fraction of the shares on contended GPUs "
        "(the classes that sit where the contention is); empty when none is contended"
    )


def contention_of(gpus: Sequence[ContendedGpu]) -> Contention:
    """The answer for ``gpus`` (a view's :meth:`contention`)."""
    return Contention(
        gpus=[
            ContendedGpuModel(
                node=gpu.node,
                gpu=gpu.gpu,
                uuid=gpu.gpu_uuid,
                level=gpu.level.value,
                score=gpu.score,
                reasons=list(gpu.reasons),
                sm_percent=gpu.sm_percent,
                memory_busy_percent=gpu.memory_busy_percent,
                shares=[
                    SlowedShare(
                        pod=share.pod, workload_class=share.workload_class, slowdown=share.slowdown
                    )
                    for share in gpu.shares
                ],
            )
            for gpu in gpus
        ],
        class_share={name: round(part, 4) for name, part in class_shares(gpus).items()},
    )


def contention(view: ClusterView) -> Contention:
    """The answer of ``/api/v1/contention`` from a (detached) view."""
    return contention_of(view.contention())
