"""What each term of gpupool's ``default`` policy buys: the published protocol, one step at a time.

Each step adds one thing to the step before it:

* ``previous``: the online workload and the tie-breaks on FGD's own fragmentation measure (the
  ``default`` policy before the terms below; the same placements, seed for seed);
* ``cpu``: a node's free CPU caps the GPU a shape can use
  (:class:`~gpupool.scheduling.fragmentation.ResourceAwareIndex` without memory);
* ``cpu-memory``: its free memory too;
* ``hole``: a share's delta also counts the expected leftover of its GPU's hole, every hole
  counted as fillable (:mod:`gpupool.scheduling.hole_value` without the CPU/memory check);
* ``default``: a hole whose node cannot feed a pod that fits it is kept for good: the policy as
  shipped (``gpupool bench placement --policy default`` gives the same numbers).

For each step and seed it reports unallocated GPU % at arrived 100 and 130, the breakdown at
100 (:mod:`gpupool.sim.replay.unallocated`) and the wall and CPU time of the replay, and writes JSON
with the commit. ``--hole-weight`` and ``--fill-share`` change the hole term of the steps
that have it, for sweeps.

    .venv/bin/python bench/placement_ablation.py --steps cpu-memory,hole --seeds 42-51
        --json out/bench/ablation.json    (one command line)
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.cli.options import parse_seeds
from gpupool.core.snapshot import ClusterSnapshot
from gpupool.scheduling.fragmentation import FragmentationIndex, ResourceAwareIndex
from gpupool.scheduling.hole_value import FILL_SHARE, HoleTable
from gpupool.scheduling.policies.gpupool_default import HOLE_WEIGHT, GpupoolPolicy
from gpupool.scheduling.workload import TargetWorkload
from gpupool.sim.machine import usable_cores
from gpupool.sim.provenance import provenance
from gpupool.sim.replay.metrics import bin_by_arrival
from gpupool.sim.replay.protocol import seeded_run
from gpupool.sim.replay.run import replay
from gpupool.sim.replay.sweep import breakdown_at_100
from gpupool.sim.trace import read_trace


class PreviousDefault(GpupoolPolicy):
    """FGD's own measure, no hole term: the ``default`` policy before its resource terms."""

    def new_index(self, snapshot: ClusterSnapshot) -> FragmentationIndex:
        """FGD's measure."""
        return FragmentationIndex(snapshot, self.workload)


class CpuOnly(GpupoolPolicy):
    """Free CPU caps what a shape can use; memory does not."""

    def new_index(self, snapshot: ClusterSnapshot) -> FragmentationIndex:
        """The resource-aware measure with memory left out."""
        return ResourceAwareIndex(snapshot, self.workload, use_memory=False)


class EveryHoleFillable(GpupoolPolicy):
    """The hole term without the check that a pod fitting the hole finds CPU and memory."""

    _blind: tuple[HoleTable, HoleTable] | None = None

    def holes(self, snapshot: ClusterSnapshot) -> HoleTable:
        """The policy's table with no CPU or memory needed to fill any hole."""
        table = super().holes(snapshot)
        if self._blind is None or self._blind[0] is not table:
            needs = np.zeros_like(table.cpu_need)
            self._blind = (table, replace(table, cpu_need=needs, memory_need=needs))
        return self._blind[1]


StepFactory = Callable[[float, float], GpupoolPolicy]
STEPS: dict[str, StepFactory] = {
    "previous": lambda weight, share: PreviousDefault(hole_weight=0.0),
    "cpu": lambda weight, share: CpuOnly(hole_weight=0.0),
    "cpu-memory": lambda weight, share: GpupoolPolicy(hole_weight=0.0),
    "hole": lambda weight, share: EveryHoleFillable(hole_weight=weight, fill_share=share),
    "default": lambda weight, share: GpupoolPolicy(hole_weight=weight, fill_share=share),
}


def run_one(task: tuple[str, str, str, int, float, float]) -> dict[str, Any]:
    """One step on one seed: the protocol's replay, its unallocated curve and breakdown."""
    nodes_path, pods_path, step, seed, weight, share = task
    trace = read_trace(Path(nodes_path), Path(pods_path))
    run = seeded_run(trace.nodes, trace.pods, seed)
    policy = STEPS[step](weight, share)
    result = replay(
        trace.nodes, run.arrivals, policy, TargetWorkload.from_pods(trace.pods), run.tie_rank
    )
    capacity = result.total_gpus * 1000
    used_pct = result.used_milli / capacity * 100.0
    curve = 100.0 - bin_by_arrival(result.arrived_milli, used_pct, result.total_gpus)
    split = breakdown_at_100(result, run.arrivals)
    return {
        "step": step,
        "seed": seed,
        "unallocated_100": round(float(curve[100]), 4),
        "unallocated_130": round(float(curve[130]), 4),
        "breakdown_pct": {
            part: round(value / split["capacity_milli"] * 100.0, 4)
            for part, value in split["milli"].items()
        },
        "failed_shares": split["failed_shares"],
        "wall_seconds": round(result.wall_seconds, 3),
        "cpu_seconds": round(result.cpu_seconds, 3),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean, sample sd and per-seed values of one step."""

    def cell(values: list[float]) -> dict[str, Any]:
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return {"mean": round(statistics.fmean(values), 4), "sd": round(sd, 4), "per_seed": values}

    parts = runs[0]["breakdown_pct"]
    return {
        "seeds": [run["seed"] for run in runs],
        "unallocated_100": cell([run["unallocated_100"] for run in runs]),
        "unallocated_130": cell([run["unallocated_130"] for run in runs]),
        "breakdown_pct": {p: cell([run["breakdown_pct"][p] for run in runs]) for p in parts},
        "failed_shares": cell([run["failed_shares"] for run in runs]),
        "median_wall_seconds": statistics.median(run["wall_seconds"] for run in runs),
        "median_cpu_seconds": statistics.median(run["cpu_seconds"] for run in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=Path("../shared/data/openb"))
    parser.add_argument("--trace", default="default")
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--hole-weight", type=float, default=HOLE_WEIGHT)
    parser.add_argument("--fill-share", type=float, default=FILL_SHARE)
    parser.add_argument("--jobs", type=int, default=usable_cores())
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    steps = args.steps.split(",")
    unknown = [step for step in steps if step not in STEPS]
    if unknown:
        parser.error(f"--steps: unknown {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    if args.fill_share <= 0:
        parser.error("--fill-share must be > 0")
    nodes = str(args.trace_dir / "openb_node_list_gpu_node.csv")
    pods = str(args.trace_dir / f"openb_pod_list_{args.trace}.csv")
    tasks = [
        (nodes, pods, step, seed, args.hole_weight, args.fill_share)
        for step in steps
        for seed in parse_seeds(args.seeds)
    ]
    with get_context("spawn").Pool(max(1, args.jobs)) as pool:
        runs = pool.map(run_one, tasks, chunksize=1)
    report: dict[str, Any] = {
        "trace": args.trace,
        "hole_weight": args.hole_weight,
        "fill_share": args.fill_share,
        "steps": {step: summary([r for r in runs if r["step"] == step]) for step in steps},
        **provenance(),
    }
    for step, result in report["steps"].items():
        at_100, parts = result["unallocated_100"], result["breakdown_pct"]
        print(
            f"{step:>10}: unallocated@100 {at_100['mean']:.3f} ± {at_100['sd']:.3f}"
            f" (slivers {parts['share_gpu_free']['mean']:.2f}, on short nodes"
            f" {parts['share_gpu_free_on_short']['mean']:.2f}, floor"
            f" {parts['share_floor']['mean']:.2f}; whole GPUs on short nodes"
            f" {parts['short_node_free']['mean']:.2f}), CPU {result['median_cpu_seconds']:.1f} s"
            f" per run, wall {result['median_wall_seconds']:.1f} s",
            flush=True,
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
