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
relaxation is lower still than any integral packing. The LP lives in
:mod:`gpupool.sim.replay.packing_lp` (needs scipy, in the ``reports`` extra).

Which column bounds which run: the failures-allowed floor holds for every policy; the
all-placed floor holds only for runs in which no share that arrived by the 100% mark failed.
A run that fails shares can go below it (`gpupool bench placement` reports, per run, the
failed share volume and the floor for the shares that run did place).

    .venv/bin/python bench/packing_floor.py --json out/bench/packing_floor.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from gpupool.cli.options import parse_seeds
from gpupool.core.model import MILLI_PER_GPU, PodSpec
from gpupool.sim.provenance import provenance
from gpupool.sim.replay.packing_lp import share_floor_milli, share_sizes
from gpupool.sim.replay.protocol import seeded_run
from gpupool.sim.replay.unallocated import arrived_by
from gpupool.sim.trace import read_trace

TRACES = ("default", "gpushare40", "gpushare80", "multigpu20", "multigpu40", "gpuspec10",
          "gpuspec33", "cpu050", "cpu200")  # fmt: skip


def arrived_shares(pods: list[PodSpec], capacity_milli: int) -> Counter[int]:
    """Per-GPU sizes of the shares that arrived before the arrived demand exceeded capacity."""
    return share_sizes(pods[: arrived_by(pods, capacity_milli)])


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
