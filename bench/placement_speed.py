"""How long one default-trace run takes per policy, and where the time goes.

Runs each policy's replay (seed 42, the published protocol, about 10.8k pods on 1,213 nodes) in
this process, ``--repeats`` times, and reports the median wall time of the replay loop (reading
the CSV files is not counted). With ``--profile`` it also prints the top functions of one FGD run
by own time. Writes JSON for docs/benchmarks.md.

    .venv/bin/python bench/placement_speed.py --json out/bench/placement_speed.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
from pathlib import Path

from gpupool.bench.placement import PlacementJob, run_job
from gpupool.bench.provenance import provenance
from gpupool.scheduling.registry import PUBLISHED

TRACE_DIR = Path("../shared/data/openb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACE_DIR)
    parser.add_argument("--pods", default="openb_pod_list_default.csv")
    parser.add_argument("--policies", default=",".join([*PUBLISHED, "default"]))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--profile", action="store_true", help="profile one FGD run")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    nodes = args.trace_dir / "openb_node_list_gpu_node.csv"
    pods = args.trace_dir / args.pods
    results: dict[str, dict[str, object]] = {}
    for policy in args.policies.split(","):
        job = PlacementJob(nodes, pods, policy, args.seed)
        walls = [run_job(job).wall_seconds for _ in range(args.repeats)]
        results[policy] = {"median_seconds": statistics.median(walls), "runs": walls}
        print(
            f"{policy:>10}: median {statistics.median(walls):6.2f} s over {len(walls)} runs "
            f"({', '.join(f'{w:.2f}' for w in walls)})",
            flush=True,
        )
    profile_text = ""
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run_job, PlacementJob(nodes, pods, "fgd", args.seed))
        buffer = io.StringIO()
        pstats.Stats(profiler, stream=buffer).sort_stats("tottime").print_stats(15)
        profile_text = buffer.getvalue()
        print(profile_text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "trace": args.pods,
                    "seed": args.seed,
                    "repeats": args.repeats,
                    "policies": results,
                    **provenance(),
                    "fgd_profile": profile_text,
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
