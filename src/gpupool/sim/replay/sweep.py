"""The placement benchmark: one policy, one trace, many seeds, the published protocol.

Each seed is an independent run (shuffle, inflation to 130%, per-seed node order, replay), so
seeds run in parallel worker processes when more than one core is free. The report holds the
unallocated GPU share and the fragmentation at the arrived loads the paper reports, as mean,
sample standard deviation and per-seed values, plus the full curves for plotting and the wall
time of every run. At arrived = 100% it also splits the unallocated share by cause
(:mod:`gpupool.sim.replay.unallocated`) next to the LP floor of the shares the run placed
(:mod:`gpupool.sim.replay.packing_lp`), so that policy work aims at the part that is really lost.
"""

from __future__ import annotations

import multiprocessing
import queue
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.scheduling.workload import TargetWorkload
from gpupool.sim.provenance import provenance
from gpupool.sim.replay.metrics import REPORTED_ARRIVED_PCT, bin_by_arrival
from gpupool.sim.replay.packing_lp import placed_share_floor_milli
from gpupool.sim.replay.protocol import DEFAULT_TUNE_RATIO, seeded_run
from gpupool.sim.replay.run import ReplayResult, replay
from gpupool.sim.replay.unallocated import split_at_mark
from gpupool.sim.trace import read_trace

ProgressSink = Callable[[int, float], None]
"""Receives ``(seed, fraction_done)``."""


@dataclass(frozen=True, slots=True)
class PlacementJob:
    """One seeded run of one policy on one trace."""

    nodes_path: Path
    pods_path: Path
    policy: str
    seed: int
    tune_ratio: float = DEFAULT_TUNE_RATIO
    breakdown: bool = True


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    """What one seeded run produced, reduced to what the report needs."""

    seed: int
    pods: int
    failed: int
    unallocated_pct: list[float | None]
    frag_amount_pct: list[float | None]
    frag_ratio_pct: list[float | None]
    wall_seconds: float
    breakdown: dict[str, Any] | None = None
    cpu_seconds: float = 0.0
    """CPU time of the replay loop: steadier than wall time when other work shares the cores."""


def run_job(job: PlacementJob, progress: ProgressSink | None = None) -> SeedOutcome:
    """Run one seed; the reading of the trace is not timed, the replay is."""
    trace = read_trace(job.nodes_path, job.pods_path)
    run = seeded_run(trace.nodes, trace.pods, job.seed, job.tune_ratio)
    policy = build_policy(job.policy, PolicyContext(rng=run.policy_rng, trace_pods=trace.pods))
    metric_workload = TargetWorkload.from_pods(trace.pods)

    def report(done: int, total: int) -> None:
        if progress is not None:
            progress(job.seed, done / total)

    result = replay(
        trace.nodes,
        run.arrivals,
        policy,
        metric_workload,
        tie_rank=run.tie_rank,
        progress=report,
    )
    capacity = result.total_gpus * 1000
    idle = capacity - result.used_milli
    frag_ratio = np.divide(
        result.frag_milli, idle, out=np.zeros_like(result.frag_milli), where=idle > 0
    )

    def curve(values: np.ndarray[Any, np.dtype[np.float64]]) -> list[float | None]:
        binned = bin_by_arrival(result.arrived_milli, values, result.total_gpus)
        return [None if np.isnan(v) else round(float(v), 4) for v in binned]

    return SeedOutcome(
        seed=job.seed,
        pods=len(run.arrivals),
        failed=result.failed,
        unallocated_pct=curve(100.0 - result.used_milli / capacity * 100.0),
        frag_amount_pct=curve(result.frag_milli / capacity * 100.0),
        frag_ratio_pct=curve(frag_ratio * 100.0),
        wall_seconds=round(result.wall_seconds, 4),
        cpu_seconds=round(result.cpu_seconds, 4),
        breakdown=breakdown_at_100(result, run.arrivals) if job.breakdown else None,
    )


BREAKDOWN_PARTS = (
    "share_gpu_free",
    "share_gpu_free_on_short",
    "share_floor",
    "short_node_free",
    "other_free",
    "unallocated",
    "failed_share",
    "failed_gpu",
)
"""Parts in % of capacity; share_gpu_free + short_node_free + other_free = unallocated."""


def breakdown_at_100(result: ReplayResult, arrivals: Sequence[PodSpec]) -> dict[str, Any]:
    """Split one run's unallocated capacity when the arrived demand reached 100% of capacity.

    Values are in milli-GPU (exact integers but for the LP floor) and the split's own wall time.
    """
    started = time.perf_counter()
    at = split_at_mark(result.snapshot, arrivals, result.total_gpus * MILLI_PER_GPU)
    split = at.breakdown
    floor = placed_share_floor_milli(Counter(at.placed_shares))
    return {
        "arrived_pods": at.arrived,
        "capacity_milli": split.capacity_milli,
        "milli": {
            "share_gpu_free": split.share_gpu_free_milli,
            "share_gpu_free_on_short": split.share_gpu_free_on_short_milli,
            "share_floor": round(floor, 3),
            "short_node_free": split.short_node_free_milli,
            "other_free": split.other_free_milli,
            "unallocated": split.unallocated_milli,
            "failed_share": split.failed_share_milli,
            "failed_gpu": split.failed_gpu_milli,
        },
        "failed_shares": split.failed_shares,
        "short_nodes": split.short_nodes,
        "seconds": round(time.perf_counter() - started, 4),
    }


def _cell(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean, sample sd and per-seed values; ``None`` values are left out of the mean and sd."""
    present = [value for value in values if value is not None]
    return {
        "mean": round(statistics.fmean(present), 4) if present else None,
        "sd": round(statistics.stdev(present), 4) if len(present) > 1 else 0.0,
        "per_seed": list(values),
    }


def _summary(per_seed: Sequence[Sequence[float | None]]) -> dict[str, dict[str, Any]]:
    """Mean, sample sd and per-seed values at each reported load.

    A seed whose run never came near a load contributes ``None`` there and is left out of the
    mean and sd.
    """
    return {str(pct): _cell([run[pct] for run in per_seed]) for pct in REPORTED_ARRIVED_PCT}


def breakdown_summary(outcomes: Sequence[SeedOutcome]) -> dict[str, Any] | None:
    """The ``unallocated_breakdown_at_100`` section, or ``None`` when no run computed it."""
    runs = [outcome.breakdown for outcome in outcomes if outcome.breakdown is not None]
    if not runs:
        return None
    out: dict[str, Any] = {
        "mark": "right after the last arrival whose cumulative GPU milli is <= capacity",
        "definitions": {
            "share_gpu_free_pct": "(a) free compute on GPUs that host at least one share",
            "share_gpu_free_on_short_pct": "the part of (a) on nodes short of CPU or memory",
            "share_floor_pct": "LP floor of (a) for the shares this run placed by the mark",
            "short_node_free_pct": "(b) whole free GPUs on nodes whose free CPU and memory "
            "fit no GPU pod that arrived by the mark",
            "other_free_pct": "(c) whole free GPUs on the other nodes",
            "unallocated_pct": "(a) + (b) + (c), exact in milli",
            "failed_share_pct": "(d) compute asked by shares that failed by the mark",
            "failed_gpu_pct": "compute asked by every GPU pod that failed by the mark",
        },
    }
    for part in BREAKDOWN_PARTS:
        out[f"{part}_pct"] = _cell(
            [round(run["milli"][part] / run["capacity_milli"] * 100.0, 4) for run in runs]
        )
    for count in ("failed_shares", "short_nodes", "arrived_pods"):
        out[count] = _cell([run[count] for run in runs])
    out["per_seed_milli"] = [run["milli"] for run in runs]
    out["seconds_per_run"] = [run["seconds"] for run in runs]
    return out


def _queue_progress(sink: Any) -> ProgressSink:
    def put(seed: int, fraction: float) -> None:
        sink.put((seed, fraction))

    return put


def _run_in_worker(job: PlacementJob, sink: Any) -> SeedOutcome:
    return run_job(job, _queue_progress(sink))


def run_seeds(
    jobs: Sequence[PlacementJob], workers: int, progress: ProgressSink | None = None
) -> list[SeedOutcome]:
    """Run seeded jobs, in ``workers`` processes when that is more than one; keeps job order."""
    if workers <= 1 or len(jobs) <= 1:
        return [run_job(job, progress) for job in jobs]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(workers, mp_context=context) as pool:
        sink = manager.Queue()
        futures = [pool.submit(_run_in_worker, job, sink) for job in jobs]
        pending: set[Future[SeedOutcome]] = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            while True:
                try:
                    seed, fraction = sink.get_nowait()
                except queue.Empty:
                    break
                if progress is not None:
                    progress(seed, fraction)
        return [future.result() for future in futures]


def placement_report(
    jobs: Sequence[PlacementJob], outcomes: Sequence[SeedOutcome]
) -> dict[str, Any]:
    """The benchmark JSON: summary at the reported loads, curves, timings and provenance."""
    first = jobs[0]
    return {
        "policy": first.policy,
        "trace": first.pods_path.stem.removeprefix("openb_pod_list_"),
        "nodes_path": str(first.nodes_path),
        "pods_path": str(first.pods_path),
        "tune_ratio": first.tune_ratio,
        "seeds": [outcome.seed for outcome in outcomes],
        "pods_per_run": [outcome.pods for outcome in outcomes],
        "failed_pods_per_run": [outcome.failed for outcome in outcomes],
        "unallocated_pct": _summary([outcome.unallocated_pct for outcome in outcomes]),
        "frag_amount_pct": _summary([outcome.frag_amount_pct for outcome in outcomes]),
        "frag_ratio_pct": _summary([outcome.frag_ratio_pct for outcome in outcomes]),
        "curves": {
            "arrived_pct": list(range(len(outcomes[0].unallocated_pct))),
            "unallocated_pct": [outcome.unallocated_pct for outcome in outcomes],
            "frag_amount_pct": [outcome.frag_amount_pct for outcome in outcomes],
        },
        "wall_seconds_per_run": [outcome.wall_seconds for outcome in outcomes],
        "cpu_seconds_per_run": [outcome.cpu_seconds for outcome in outcomes],
        "unallocated_breakdown_at_100": breakdown_summary(outcomes),
        **provenance(),
    }
