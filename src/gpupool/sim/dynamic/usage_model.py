"""Bursty GPU usage of working pods, and what the node agent publishes of it.

Real GPU work alternates bursts and quiet phases; a model in which every working pod runs at a
constant SM utilisation makes any idle rule look perfect (no working pod is ever quiet). Each
pod here is one of three kinds, drawn by :attr:`UsageModel.mix`, and its usage is a sequence of
phases, each with an SM utilisation, a memory-controller utilisation ("memory busy": copies and
kernels reading or writing device memory) and the memory it holds.

Every pod starts by **loading** (weights or data copied in: SM 0, memory busy 10-40 %, memory
held growing in four steps to its resident size, 4-40 GiB; lognormal, median 60 s, sigma 0.7,
10 s to 10 min). Then, by kind (durations in seconds; LN(m, s): lognormal with median m and
log-sigma s; U(a, b): uniform):

* **training**: compute for Exp(mean 900) (SM U(50, 95) %, memory busy U(20, 60) %, per pod),
  then one pause: 75 % a data-loading stall (LN(30, 1.0), at most 480: SM 0, nothing moving;
  Mohan et al., "Analyzing and Mitigating Data Stalls in DNN Training", VLDB 2021, and Gao et
  al., "An Empirical Study on Low GPU Utilization of Deep Learning Jobs", ICSE 2024, which
  attributes 46 % of low-utilisation issues to data operations), 20 % a checkpoint (a copy to
  the host, LN(20, 0.5) with memory busy U(5, 30) %, then the write to storage with the GPU
  silent, the pod's own write time LN(90, 0.8) capped at 600, jittered LN(1, 0.25) per
  checkpoint, at most 780), 5 % a checkpoint streamed from device memory while it is written
  (LN(480, 0.6), at most 2,400: SM 0, memory busy U(2, 20) %; writing a 70B model's
  checkpoint to network storage is reported to take 15-30 minutes).
* **inference**: bursts of requests, LN(240, 1.0) from 5 s to 2 h (SM U(10, 60) %, memory busy
  U(5, 40) %), and gaps with no request (SM 0, memory resident, nothing moving) of the pod's
  gap scale times U(0.5, 1.5). A pod's gap scale is LN(240, 0.9) from 30 s to 1,200 s, so
  gaps run from seconds to 30 minutes.
* **notebook**: cells, LN(45, 1.2) from 2 s to 30 min (SM U(20, 90) %; one in five cells moves
  data without compute: SM 0, memory busy U(10, 50) %), and human think time between them
  (SM 0, nothing moving) of the pod's think scale times U(0.5, 1.5); the think scale is
  LN(300, 0.7) from 30 s to 1,200 s. Sessions are long-running with sporadic GPU use (Carver
  et al., "NotebookOS", ASPLOS 2026, on production notebook traces).

A bursty pod's (inference, notebook) quiet phases do not start at their full length: its
scale grows from one minute to its own over :attr:`UsageModel.ramp` seconds of its life (an
endpoint just deployed takes the traffic it was deployed for, a session starts with quick
iterations). This is an assumption, not a measurement, and it is the one the idle rule's
quiet-phase history needs: with ``ramp=0`` a pod's first quiet phase can be its longest, and
no rule reading GPU signals can tell a first 25-minute silence from abandonment.

A **truly idle** pod (the notebook left open, a job waiting on nothing) behaves like its kind
while it works, then holds its GPUs at 0 % SM with nothing moving until it ends.

The phase lengths are drawn to fall in the ranges the cited studies report (seconds to
minutes of stalls, minutes of checkpoints, minutes to tens of minutes between requests or
cells); none is fitted to a trace: Philly (Jeon et al., ATC 2019) and Alibaba PAI (Weng et al.,
NSDI 2022) publish per-minute or per-job utilisation, not phase lengths.

**The agent's view** (:class:`AgentView`): it samples NVML every 5 s; each sample is the highest
of NVML's per-process samples since the previous one (each an average over the driver's 1/6 s to
1 s sample period, below this model's resolution: a phase in progress during a sample shows its
level). It publishes every 60 s, at its own phase relative to the pod's start, the highest SM and
memory busy of the samples since the previous publication, the memory held at the last sample
and the last sample with SM above 0; the controller sees a publication from the moment it is
written. ``latest`` publication (the agent before it published memory busy) carries the last
sample's SM only.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpupool.governance.usage import UsagePoint

KINDS = ("training", "inference", "notebook")
SAMPLE_PERIOD = 5.0
"""Seconds between the agent's NVML samples (``AgentConfig.sample_period``)."""
PUBLISH_PERIOD = 60.0
"""Seconds between the agent's publications (``AgentConfig.usage_period``)."""

Phase = tuple[float, float, float, float]
"""Seconds, SM %, memory busy %, memory held MiB."""


@dataclass(frozen=True, slots=True)
class UsageModel:
    """The kinds of pods and how a bursty pod's quiet phases grow (the rest is in the docstring).

    Attributes:
        mix: Shares of training, inference and notebook pods.
        ramp: Seconds over which a bursty pod's quiet scale grows from 60 s to its own.
    """

    mix: tuple[float, float, float] = (0.6, 0.25, 0.15)
    ramp: float = 7200.0

    def __post_init__(self) -> None:
        if len(self.mix) != len(KINDS) or min(self.mix) < 0 or not math.isclose(sum(self.mix), 1):
            raise ValueError(f"mix: three shares >= 0 adding up to 1, got {self.mix}")
        if not (math.isfinite(self.ramp) and self.ramp >= 0):
            raise ValueError(f"ramp: must be >= 0 seconds, got {self.ramp}")

    def kind(self, draw: float) -> str:
        """The kind of a pod whose uniform draw is ``draw``."""
        total = 0.0
        for kind, share in zip(KINDS, self.mix, strict=True):
            total += share
            if draw < total:
                return kind
        return KINDS[-1]


def _ln(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, median * math.exp(rng.gauss(0.0, sigma))))


def _loading(rng: random.Random, resident: float) -> Iterator[Phase]:
    seconds = _ln(rng, 60.0, 0.7, 10.0, 600.0)
    busy = rng.uniform(10.0, 40.0)
    for step in range(1, 5):
        yield seconds / 4, 0.0, busy, resident * step / 4


def _training(rng: random.Random, resident: float) -> Iterator[Phase]:
    sm, busy = rng.uniform(50.0, 95.0), rng.uniform(20.0, 60.0)
    write = _ln(rng, 90.0, 0.8, 1.0, 600.0)
    while True:
        yield max(30.0, rng.expovariate(1 / 900.0)), sm, busy, resident
        pause = rng.random()
        if pause < 0.75:
            yield _ln(rng, 30.0, 1.0, 2.0, 480.0), 0.0, 0.0, resident
        elif pause < 0.95:
            yield _ln(rng, 20.0, 0.5, 2.0, 120.0), 0.0, rng.uniform(5.0, 30.0), resident
            yield _ln(rng, write, 0.25, 1.0, 780.0), 0.0, 0.0, resident
        else:
            yield _ln(rng, 480.0, 0.6, 30.0, 2400.0), 0.0, rng.uniform(2.0, 20.0), resident


def _scale(own: float, age: float, ramp: float) -> float:
    """A bursty pod's quiet scale at ``age``: from 60 s (or less) to ``own`` over ``ramp``."""
    first = min(60.0, own)
    progress = 1.0 if ramp <= 0 else min(1.0, age / ramp)
    return first * math.exp(progress * math.log(own / first))


def _bursty(rng: random.Random, resident: float, kind: str, ramp: float) -> Iterator[Phase]:
    if kind == "inference":
        sm, busy = rng.uniform(10.0, 60.0), rng.uniform(5.0, 40.0)
        own = _ln(rng, 240.0, 0.9, 30.0, 1200.0)
    else:
        sm, busy = rng.uniform(20.0, 90.0), rng.uniform(10.0, 50.0)
        own = _ln(rng, 300.0, 0.7, 30.0, 1200.0)
    age = 0.0
    while True:
        if kind == "inference":
            burst: Phase = (_ln(rng, 240.0, 1.0, 5.0, 7200.0), sm, busy, resident)
        elif rng.random() < 0.2:  # a cell that moves data without compute
            burst = (_ln(rng, 45.0, 1.2, 2.0, 1800.0), 0.0, rng.uniform(10.0, 50.0), resident)
        else:
            burst = (_ln(rng, 45.0, 1.2, 2.0, 1800.0), sm, busy, resident)
        quiet = _scale(own, age, ramp) * rng.uniform(0.5, 1.5)
        age += burst[0] + quiet
        yield burst
        yield quiet, 0.0, 0.0, resident


def phases(kind: str, rng: random.Random, ramp: float) -> Iterator[Phase]:
    """A pod's phases from its start, loading first, for as long as it works."""
    resident = rng.uniform(4096.0, 40960.0)
    yield from _loading(rng, resident)
    if kind == "training":
        yield from _training(rng, resident)
    else:
        yield from _bursty(rng, resident, kind, ramp)


@dataclass(frozen=True, slots=True)
class Window:
    """What a stretch of a pod's timeline looked like to the agent's samples."""

    sm_percent: float
    memory_busy_percent: float
    memory_mib: float
    sm_until: float | None
    """End of the last phase with SM above 0 in the stretch (``None``: none)."""


@dataclass
class Timeline:
    """One pod's usage from ``start``: contiguous phases, drawn as far as they are asked for.

    After ``work_end`` the pod holds its GPUs at 0 % SM with nothing moving (a truly idle pod;
    a working pod has ended by then).
    """

    start: float
    work_end: float
    _phases: Iterator[Phase]
    ends: list[float] = field(default_factory=list)
    _levels: list[tuple[float, float, float]] = field(default_factory=list)

    def _cover(self, until: float) -> None:
        last = self.ends[-1] if self.ends else self.start
        while last < until:
            if last >= self.work_end:
                resident = self._levels[-1][2] if self._levels else 0.0
                self.ends.append(math.inf)
                self._levels.append((0.0, 0.0, resident))
                return
            seconds, sm, busy, memory = next(self._phases)
            last = min(last + seconds, self.work_end)
            self.ends.append(last)
            self._levels.append((sm, busy, memory))

    def window(self, low: float, high: float) -> Window:
        """The highest SM and memory busy of the phases in progress in ``(low, high]``."""
        self._cover(high)
        first = bisect_right(self.ends, low)
        last = bisect_left(self.ends, high)
        sm = busy = 0.0
        sm_until = None
        for index in range(first, last + 1):
            level_sm, level_busy, _ = self._levels[index]
            sm, busy = max(sm, level_sm), max(busy, level_busy)
            if level_sm > 0:
                sm_until = min(self.ends[index], high)
        return Window(sm, busy, self._levels[last][2], sm_until)


@dataclass
class AgentView:
    """The node agent's publications about one pod, in the order the controller sees them.

    Args:
        timeline: The pod's usage.
        sample_phase: Seconds after the pod's start of the agent's first sample (0-5).
        publish_phase: Seconds after the pod's start of the agent's first publication (0-60).
        publication: ``peak`` or ``latest`` (see the module docstring).
    """

    timeline: Timeline
    sample_phase: float
    publish_phase: float
    publication: str = "peak"
    last_active: float | None = None
    _published: int = 0
    _last_sample: float | None = None

    def _sample_before(self, moment: float) -> float | None:
        """The agent's last sample of this pod at or before ``moment``."""
        first = self.timeline.start + self.sample_phase
        if moment < first:
            return None
        return first + math.floor((moment - first) / SAMPLE_PERIOD) * SAMPLE_PERIOD

    @property
    def next_publication(self) -> float:
        """When the agent next publishes."""
        return self.timeline.start + self.publish_phase + self._published * PUBLISH_PERIOD

    def due(self, now: float) -> Iterator[UsagePoint]:
        """The publications written by ``now`` that have not been returned yet."""
        start = self.timeline.start
        while (moment := self.next_publication) <= now:
            self._published += 1
            sample = self._sample_before(moment)
            if sample is None:
                continue  # the agent has not sampled the pod yet: it is not in the annotation
            previous = start if self._last_sample is None else self._last_sample
            self._last_sample = sample
            period = self.timeline.window(previous, sample)
            if self.last_active is None:
                self.last_active = start + self.sample_phase
            if period.sm_until is not None:
                self.last_active = min(sample, self._sample_at_or_after(period.sm_until))
            if self.publication == "latest":
                latest = self.timeline.window(max(start, sample - SAMPLE_PERIOD), sample)
                yield UsagePoint(sample, latest.sm_percent, latest.memory_mib)
            else:
                yield UsagePoint(
                    sample, period.sm_percent, period.memory_mib, period.memory_busy_percent
                )

    def _sample_at_or_after(self, moment: float) -> float:
        first = self.timeline.start + self.sample_phase
        return first + math.ceil(max(0.0, moment - first) / SAMPLE_PERIOD) * SAMPLE_PERIOD
