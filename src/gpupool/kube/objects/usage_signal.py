"""The node agent's usage signal: the ``gpupool.io/gpu-usage`` Node annotation, one definition.

The agent writes it (:mod:`gpupool.agent.telemetry`) and the governance controller reads it
(:mod:`gpupool.kube.governance.facts`); both go through these types, so a field the idle rule
needs cannot be renamed, dropped or given another unit on one side only, as two hand-written
dictionaries, one per side, would allow.

Every utilisation is the **highest** 5-second NVML sample since the agent's previous
publication, not the latest one: a burst that ended before the publication is still work.
Ranges are checked on decode, with the field named in the error; an entry an older agent
wrote without ``memoryBusyPercent`` reads as 0 (the rule then has SM and memory held only).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from gpupool.governance.freshness import DEFAULT_PUBLICATION_PERIOD
from gpupool.kube.objects.annotation_json import decode_annotation
from gpupool.kube.objects.vocabulary import ANNOTATION_GPU_USAGE

MAX_PERCENT = 100 * 64
"""The largest utilisation an entry may carry (percent summed over a node's GPUs at most)."""

Percent = Annotated[float, msgspec.Meta(ge=0, le=MAX_PERCENT)]
MiB = Annotated[float, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]


class PodUsageEntry(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=False):
    """One pod's entry (over its GPUs on the node).

    Attributes:
        sm_percent: Highest SM utilisation of the period, of its busiest GPU.
        memory_busy_percent: Highest memory-controller utilisation of the period (NVML's
            per-process ``memUtil``): copies and kernels reading or writing device memory.
        memory_mib: GPU memory its processes hold, at the latest sample.
        last_active: RFC 3339 time of the last sample with SM above 0 (the first sample of the
            pod until then); empty if unknown.
    """

    sm_percent: Percent
    memory_busy_percent: Percent = 0.0
    memory_mib: MiB = 0.0
    last_active: str = ""


class UsageSignal(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=False):
    """The annotation value.

    Attributes:
        sampled_at: RFC 3339 time of the latest sample it covers.
        pods: Per pod UID, its entry.
        period_seconds: How often the agent publishes (an agent that does not say: the
            default), which decides when its samples are stale
            (:mod:`gpupool.governance.freshness`).
    """

    sampled_at: str
    pods: dict[str, PodUsageEntry]
    period_seconds: Seconds = DEFAULT_PUBLICATION_PERIOD


class UsageSignalError(ValueError):
    """The annotation is not a usage signal; the message names the field."""


def encode_usage(signal: UsageSignal) -> str:
    """The annotation value (compact JSON, pods in UID order as the struct holds them)."""
    return msgspec.json.encode(signal).decode()


def decode_usage(text: str) -> UsageSignal:
    """Read an annotation value.

    Raises:
        UsageSignalError: Not JSON, a field missing, of the wrong type or out of range.
    """
    return decode_annotation(text, UsageSignal, ANNOTATION_GPU_USAGE, UsageSignalError)
