"""The node agent's contention signal: the ``gpupool.io/gpu-contention`` Node annotation.

The agent writes it (:mod:`gpupool.agent.contention`) and the control plane reads it (metrics,
the API, the report, placement's ``spec.contention``); both go through these types, one
definition. Only the GPUs with contention (a level other than ``none``) are listed, so the value
stays small on a quiet node and an empty ``gpus`` says every GPU is quiet. It is on the Node,
which tenants cannot write: no pod can make its neighbours' GPU look quiet or busy.

Ranges are checked on decode, with the field named in the error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Literal

import msgspec

from gpupool.governance.freshness import DEFAULT_PUBLICATION_PERIOD
from gpupool.kube.objects.annotation_json import decode_annotation
from gpupool.kube.objects.vocabulary import ANNOTATION_GPU_CONTENTION

log = logging.getLogger(__name__)

Score = Annotated[float, msgspec.Meta(ge=0, le=1)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
Slowdown = Annotated[float, msgspec.Meta(ge=1, le=1000)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, le=1023)]


class GpuContentionEntry(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=False):
    """One contended GPU (:func:`gpupool.core.contention.assess`).

    Attributes:
        level: ``low`` or ``high``.
        score: 0 to 1: the fraction of time the worst-hit share loses, or the bandwidth or
            throttle part when higher.
        reasons: Why, in words.
        sm_percent: The GPU's SM utilisation in the sample assessed.
        memory_busy_percent: Its memory-controller utilisation in that sample.
        pods: Per pod UID on the GPU, its estimated slowdown (1.0: none).
    """

    level: Literal["none", "low", "high"]
    score: Score
    reasons: tuple[str, ...] = ()
    sm_percent: Percent = 0.0
    memory_busy_percent: Percent = 0.0
    pods: dict[str, Slowdown] = msgspec.field(default_factory=dict)


class ContentionSignal(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=False):
    """The annotation value.

    Attributes:
        sampled_at: RFC 3339 time of the latest sample it covers.
        gpus: Per GPU index (NVML's, as ``gpupool.io/gpu-uuids`` lists them), the worst
            assessment of the period; a GPU left out is not contended.
        period_seconds: How often the agent publishes.
    """

    sampled_at: str
    gpus: dict[GpuIndex, GpuContentionEntry]
    period_seconds: Seconds = DEFAULT_PUBLICATION_PERIOD


class ContentionSignalError(ValueError):
    """The annotation is not a contention signal; the message names the field."""


def encode_contention(signal: ContentionSignal) -> str:
    """The annotation value (compact JSON)."""
    return msgspec.json.encode(signal).decode()


def decode_contention(text: str) -> ContentionSignal:
    """Read an annotation value.

    Raises:
        ContentionSignalError: Not JSON, a field missing, of the wrong type or out of range.
    """
    return decode_annotation(
        text, ContentionSignal, ANNOTATION_GPU_CONTENTION, ContentionSignalError
    )


def read_contention(annotations: Mapping[str, str], node: str) -> ContentionSignal | None:
    """The signal a node's agent published (None: none, or unreadable: logged, naming the field).

    An unreadable value counts as no contention: the annotation is the agent's, and a node is
    better shown and placed on without it than not at all.
    """
    text = annotations.get(ANNOTATION_GPU_CONTENTION)
    if not text:
        return None
    try:
        return decode_contention(text)
    except ContentionSignalError as error:
        log.warning("node %s: %s", node, error)
        return None


def published_scores(annotations: Mapping[str, str], node: str) -> tuple[tuple[int, float], ...]:
    """The contended GPUs' ``(index, score)``, in index order, scores rounded to 0.01.

    Rounded because the agent republishes every period, and a score moving in its third decimal
    must not make the scheduler rebuild the node each time (nor its ``sampledAt``: placement
    reads only this).
    """
    signal = read_contention(annotations, node)
    if signal is None:
        return ()
    return tuple((index, round(entry.score, 2)) for index, entry in sorted(signal.gpus.items()))


def contention_scores(annotations: Mapping[str, str], node: str, count: int) -> tuple[float, ...]:
    """Each of the node's ``count`` GPUs' published score, for placement (empty: none contended).

    A GPU index the node does not have is ignored (the annotation is the agent's; placement is
    better off without it than refusing the node).
    """
    scores = [0.0] * count
    for index, score in published_scores(annotations, node):
        if index < count:
            scores[index] = score
    return tuple(scores) if any(scores) else ()
