"""A lower bound on unallocated GPUs at arrived = 100% that no placement policy can beat.

At the moment the arrived GPU demand equals the cluster's capacity, the unallocated capacity is
at least the free space left on GPUs that hold fractional shares (a share cannot be combined
with a whole-GPU pod, and a sliver left next to an 810-milli pod can only take a pod of at most
190 milli), and at least the volume of the pods that failed. For the shares that have arrived
by then (the real arrivals of each seed, clones included), this script solves the
Gilmore-Gomory linear relaxation of packing them into 1000-milli GPUs, allowing any of them to
fail:

    minimise t
    subject to  t >= 1000 * sum(x_p) - volume(shares) + sum(size_s * f_s)   (sliver waste)
                t >= sum(size_s * f_s)                                       (failed volume)
                sum_p a_sp x_p + f_s >= count_s,   x, f >= 0

where ``x_p`` counts GPUs packed with pattern ``p`` (a maximal multiset of share sizes that
fits in one GPU) and ``f_s`` the failed shares of size ``s``. CPU, memory, GPU models,
whole-GPU and multi-GPU pods are all ignored, which only lowers the bound, and the LP
relaxation is lower still than any integral packing. The bound is therefore a floor for every
policy, online or offline. Needs scipy (a development dependency).

    .venv/bin/python bench/packing_floor.py --json out/bench/packing_floor.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.bench.provenance import provenance
from gpupool.cli.options import parse_seeds
from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.sim.protocol import seeded_run
from gpupool.sim.trace import read_trace

TRACES = ("default", "gpushare40", "gpushare80", "multigpu20", "multigpu40", "gpuspec10",
          "gpuspec33", "cpu050", "cpu200")  # fmt: skip


def maximal_patterns(sizes: list[int], counts: list[int]) -> list[tuple[int, ...]]:
    """Every multiset of sizes (bounded by counts) that fits in one GPU and admits no more."""
    patterns: list[tuple[int, ...]] = []
    chosen: list[int] = []

    def extend(i: int, left: int) -> None:
        if i == len(sizes):
            if not any(chosen[j] < counts[j] and sizes[j] <= left for j in range(len(sizes))):
                patterns.append(tuple(chosen))
            return
        for k in range(min(counts[i], left // sizes[i]), -1, -1):
            chosen.append(k)
            extend(i + 1, left - k * sizes[i])
            chosen.pop()

    extend(0, MILLI_PER_GPU)
    return patterns


def share_floor_milli(shares: Counter[int], allow_failures: bool = True) -> float:
    """The LP lower bound, in milli-GPU, on max(sliver waste, failed volume) for ``shares``.

    With ``allow_failures=False`` every arrived share must be placed (``f = 0``).
    """
    from scipy.optimize import linprog

    sizes = sorted(shares, reverse=True)
    counts = [shares[s] for s in sizes]
    patterns = np.array(maximal_patterns(sizes, counts), dtype=np.float64).T
    n_sizes, n_patterns = patterns.shape
    size_arr = np.array(sizes, dtype=np.float64)
    volume = float(size_arr @ np.array(counts, dtype=np.float64))
    # Variables: x (patterns), f (failures), t.
    cost = np.r_[np.zeros(n_patterns + n_sizes), 1.0]
    waste_row = np.r_[np.full(n_patterns, float(MILLI_PER_GPU)), size_arr, -1.0]
    failed_row = np.r_[np.zeros(n_patterns), size_arr, -1.0]
    cover = np.hstack([-patterns, -np.eye(n_sizes), np.zeros((n_sizes, 1))])
    a_ub = np.vstack([waste_row, failed_row, cover])
    b_ub = np.r_[volume, 0.0, -np.array(counts, dtype=np.float64)]
    bounds = [(0, None)] * n_patterns + [(0, None if allow_failures else 0)] * n_sizes
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[*bounds, (0, None)], method="highs")
    if result.status != 0:
        raise RuntimeError(f"LP failed: {result.message}")
    return float(result.fun)


def arrived_shares(pods: list[PodSpec], capacity_milli: int) -> Counter[int]:
    """Sizes of the single-GPU shares that arrived before the arrived demand reached capacity."""
    shares: Counter[int] = Counter()
    arrived = 0
    for pod in pods:
        arrived += pod.total_gpu_milli
        if arrived > capacity_milli:
            break
        if pod.gpu_count == 1 and pod.gpu_milli < MILLI_PER_GPU:
            shares[pod.gpu_milli] += 1
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=Path("../shared/data/openb"))
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    for trace_name in args.traces.split(","):
        trace = read_trace(
            args.trace_dir / "openb_node_list_gpu_node.csv",
            args.trace_dir / f"openb_pod_list_{trace_name}.csv",
        )
        floors, placed_floors = [], []
        for seed in parse_seeds(args.seeds):
            run = seeded_run(trace.nodes, trace.pods, seed)
            total_gpus = run.total_gpus
            shares = arrived_shares(run.arrivals, total_gpus * MILLI_PER_GPU)
            floors.append(share_floor_milli(shares) / (total_gpus * 10))
            placed_floors.append(share_floor_milli(shares, False) / (total_gpus * 10))
        out[trace_name] = {
            "floor_unallocated_pct_mean": round(statistics.fmean(floors), 3),
            "floor_unallocated_pct_per_seed": [round(f, 3) for f in floors],
            "all_shares_placed_floor_pct_mean": round(statistics.fmean(placed_floors), 3),
        }
        print(
            f"{trace_name:>11}: unallocated at arrived=100% >= {statistics.fmean(floors):.2f}% "
            f"(LP floor, mean of {len(floors)} seeds); >= {statistics.fmean(placed_floors):.2f}% "
            "if every arrived share is placed",
            flush=True,
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**provenance(), **out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
