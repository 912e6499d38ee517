"""GPU contention: how hard the shares of one GPU get in each other's way, from what NVML measured.

Why measure and not predict: co-locating work on one GPU under MPS or time-slicing can cost an
inference service an order of magnitude in tail latency when its neighbour is memory-bound, and
static interference predictors built from profiles of the workloads alone err by more than 60 %
on unseen pairs. So the agent reads what the GPU is doing now and this module turns the readings
into a level and a per-share slowdown estimate; placement and the people running the pool act
on that, not on a guess made before the pods ran.

The model, from what NVML gives:

* **Compute over capacity.** A GPU whose SM is busy (at least :data:`SATURATED_PERCENT`) while
  two or more shares run has no idle cycles to give: a share that is promised ``cap`` percent
  (its compute share; a whole GPU is 100) but measured at ``used`` percent is held back by its
  neighbours, an estimated slowdown of ``cap / used`` (at most :data:`MAX_SLOWDOWN`). Without
  per-process samples (NVML gives them only on some drivers and modes) each running share is
  estimated at the sum of the running shares' caps over 100: time-slicing shares the GPU in
  proportion.
* **Memory bandwidth.** Device memory busy at or above :data:`SATURATED_PERCENT` with two or more
  shares running is the interference MPS co-location suffers most; NVML does not say whose
  bytes wait, so it raises the level (:data:`BANDWIDTH_WEIGHT` at full saturation) and is named
  in the reasons, but no share's slowdown.
* **Throttling.** A power or thermal throttle reason slows every share alike, by the ratio of
  the maximum SM clock to the current one when NVML reports both.

The score is ``1 - 1 / worst slowdown`` (the fraction of time the worst-hit share loses: 2x is
0.5), or the bandwidth or throttle part when higher; :data:`LOW_AT` and :data:`HIGH_AT` cut it
into the level. Pure: no I/O, so the agent, the control plane and the simulator share it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

SATURATED_PERCENT = 90.0
"""SM or memory-controller utilisation from which the GPU has no spare capacity to give."""
MAX_SLOWDOWN = 16.0
"""The largest slowdown estimated: a share measured near 0 % is waiting, not 100x slower."""
BANDWIDTH_WEIGHT = 0.6
"""The score of a fully saturated memory bus shared by running shares (a high level)."""
LOW_AT = 0.2
"""Score from which contention is ``low`` (a share loses a fifth of its time)."""
HIGH_AT = 0.5
"""Score from which contention is ``high`` (a share runs at half speed or less)."""

# NVML's clocks-event (throttle) reasons that slow the GPU down, by bit
_HARMFUL_THROTTLES = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "power brake",
}
_UNKNOWN_CLOCK_THROTTLE_SCORE = LOW_AT
"""A harmful throttle reason with no clocks to size it: low at least, never nothing."""


class ContentionLevel(enum.StrEnum):
    """How contended a GPU is."""

    NONE = "none"
    LOW = "low"
    HIGH = "high"


def level_of(score: float) -> ContentionLevel:
    """The level of a score (:data:`LOW_AT`, :data:`HIGH_AT`)."""
    if score >= HIGH_AT:
        return ContentionLevel.HIGH
    return ContentionLevel.LOW if score >= LOW_AT else ContentionLevel.NONE


@dataclass(frozen=True, slots=True)
class GpuReadings:
    """One GPU's NVML sample.

    Attributes:
        sm_percent: Device utilisation (percent of time a kernel ran).
        memory_busy_percent: Percent of time device memory was read or written.
        throttle_reasons: NVML's clocks-event reasons bitmask (0: none, or unknown).
        sm_clock_mhz: Current SM clock; 0 when unknown.
        max_sm_clock_mhz: Maximum SM clock; 0 when unknown.
    """

    sm_percent: float
    memory_busy_percent: float = 0.0
    throttle_reasons: int = 0
    sm_clock_mhz: int = 0
    max_sm_clock_mhz: int = 0


@dataclass(frozen=True, slots=True)
class ShareOnGpu:
    """One share (a pod's hold) of the GPU.

    Attributes:
        key: Who it is (a pod UID).
        cap_percent: Its compute share in percent of the GPU (100: the whole GPU, or no cap).
        sm_percent: Its measured SM utilisation; ``None`` when NVML gives no per-process
            samples (then a share counts as running).
    """

    key: str
    cap_percent: float = 100.0
    sm_percent: float | None = None

    @property
    def running(self) -> bool:
        """Whether it used the GPU in the sample (or might have: no per-process sample)."""
        return self.sm_percent is None or self.sm_percent > 0


@dataclass(frozen=True, slots=True)
class Contention:
    """The assessment of one GPU.

    Attributes:
        level: The level of ``score``.
        score: 0 (none) to 1 (a share gets almost nothing).
        reasons: Why, in words (empty when there is no contention).
        slowdown: Per share key, its estimated slowdown (1.0: none).
    """

    level: ContentionLevel
    score: float
    reasons: tuple[str, ...] = ()
    slowdown: Mapping[str, float] = field(default_factory=dict)


def _throttle(readings: GpuReadings) -> tuple[float, list[str]]:
    """The clock slowdown factor and the harmful throttle reasons named."""
    named = [why for bit, why in _HARMFUL_THROTTLES.items() if readings.throttle_reasons & bit]
    if not named:
        return 1.0, []
    clock, top = readings.sm_clock_mhz, readings.max_sm_clock_mhz
    factor = top / clock if 0 < clock < top else 1.0
    return min(MAX_SLOWDOWN, factor), [f"throttled: {', '.join(named)}"]


def _time_sliced(shares: list[ShareOnGpu], sm_percent: float) -> dict[str, float]:
    """Per running share, its compute slowdown when the SM is saturated (1.0 otherwise)."""
    running = [share for share in shares if share.running]
    if sm_percent < SATURATED_PERCENT or len(running) < 2:
        return {}
    committed = sum(min(100.0, share.cap_percent) for share in running)
    slowdown = {}
    for share in running:
        if share.sm_percent is None:
            ratio = committed / 100
        else:
            ratio = min(100.0, share.cap_percent) / share.sm_percent
        slowdown[share.key] = min(MAX_SLOWDOWN, max(1.0, ratio))
    return slowdown


def fair_split(demands: Sequence[int]) -> list[int]:
    """What each demand (percent of a GPU) is measured at when they share one GPU.

    All of it while they fit; beyond 100 % each its proportional part, as a time-sliced or MPS
    GPU shares a saturated SM or memory bus (the fake NVML and the simulator model NVML so).
    """
    total = sum(demands)
    return list(demands) if total <= 100 else [demand * 100 // total for demand in demands]


def assess(readings: GpuReadings, shares: Iterable[ShareOnGpu]) -> Contention:
    """The contention of one GPU and each share's slowdown (see the module docstring)."""
    listed = list(shares)
    clock, throttled = _throttle(readings)
    reasons = list(throttled)
    compute = _time_sliced(listed, readings.sm_percent)
    slowdown = {share.key: round(compute.get(share.key, 1.0) * clock, 3) for share in listed}
    worst = max(compute.values(), default=1.0)
    if worst > 1.0:
        reasons.insert(
            0,
            f"SM saturated ({readings.sm_percent:.0f}%) with {len(compute)} running shares: "
            f"up to {worst:.1f}x slower",
        )
    parts = [1 - 1 / (worst * clock)]
    if throttled and clock == 1.0:
        parts.append(_UNKNOWN_CLOCK_THROTTLE_SCORE)
    running = sum(1 for share in listed if share.running)
    if readings.memory_busy_percent >= SATURATED_PERCENT and running >= 2:
        spare = (100 - readings.memory_busy_percent) / (100 - SATURATED_PERCENT)
        parts.append(BANDWIDTH_WEIGHT * min(1.0, 1 - spare / 2))
        reasons.append(
            f"memory bandwidth saturated ({readings.memory_busy_percent:.0f}%) "
            f"with {running} running shares"
        )
    score = round(min(1.0, max(parts)), 3)
    return Contention(level_of(score), score, tuple(reasons), slowdown)


def contention_share_by_class(
    placements: Iterable[tuple[str, float]], *, contended_at: float = LOW_AT
) -> dict[str, float]:
    """Per workload class, its share of contention.

    Of every share sitting on a GPU whose score is at least ``contended_at``, the fraction that
    are the class's: which classes sit where the contention is.

    Args:
        placements: One ``(workload class, its GPU's contention score)`` per share placed;
            a share on two GPUs counts once per GPU.
        contended_at: The score from which a GPU counts as contended (default: ``low``).

    Returns:
        The fractions, summing to 1, of the classes with a contended share (sorted by class);
        empty when no GPU is contended.
    """
    counts: dict[str, int] = {}
    for workload_class, score in placements:
        if score >= contended_at:
            counts[workload_class] = counts.get(workload_class, 0) + 1
    total = sum(counts.values())
    return {name: counts[name] / total for name in sorted(counts)}


@dataclass(frozen=True, slots=True)
class AffectedShare:
    """A share on a contended GPU, as the control plane reports it.

    Attributes:
        pod: ``namespace/name`` (the pod UID when the pod is not known).
        workload_class: Its class as policy counts it ("" for none).
        slowdown: Its estimated slowdown (1.0: none).
    """

    pod: str
    workload_class: str
    slowdown: float


@dataclass(frozen=True, slots=True)
class ContendedGpu:
    """A GPU whose agent published contention, with the shares on it.

    Attributes:
        node: The node.
        gpu: The GPU's index on the node.
        level: Its level (never ``none``: quiet GPUs are not listed).
        score: Its score.
        reasons: Why.
        shares: The shares on it, in pod order.
        gpu_uuid: Its UUID ("" when unknown, as in the simulator).
        sm_percent: Its SM utilisation in the sample assessed.
        memory_busy_percent: Its memory-controller utilisation then.
    """

    node: str
    gpu: int
    level: ContentionLevel
    score: float
    reasons: tuple[str, ...]
    shares: tuple[AffectedShare, ...]
    gpu_uuid: str = ""
    sm_percent: float = 0.0
    memory_busy_percent: float = 0.0


def class_shares(gpus: Iterable[ContendedGpu]) -> dict[str, float]:
    """Each class's share of contention over ``gpus`` (:func:`contention_share_by_class`)."""
    return contention_share_by_class(
        (share.workload_class, gpu.score) for gpu in gpus for share in gpu.shares
    )
