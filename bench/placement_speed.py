"""How long one default-trace run takes per policy, and where the time goes.

Runs each policy's replay (seed 42, the published protocol, about 10.8k pods on 1,213 nodes) in
this process, ``--repeats`` times, and reports the median wall time of the replay loop (reading
the CSV files is not counted) and its median CPU time, which moves less when other work shares
the cores. With ``--profile`` it also prints the top functions of one FGD run
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

import gpupool
from gpupool.scheduling.registry import PUBLISHED, PolicyContext, build_policy
from gpupool.scheduling.workload import TargetWorkload
from gpupool.sim.provenance import provenance
from gpupool.sim.replay.protocol import seeded_run
from gpupool.sim.replay.run import ReplayResult, replay
from gpupool.sim.replay.sweep import PlacementJob, run_job
from gpupool.sim.trace import read_trace

TRACE_DIR = Path("../shared/data/openb")


def replay_once(nodes: Path, pods: Path, policy: str, seed: int) -> ReplayResult:
    """One protocol replay: its wall and CPU time count the replay loop only.

    Built from the simulator's own parts, not the benchmark's job runner, so that an older
    source tree put first on ``PYTHONPATH`` can be timed by this same script.
    """
    trace = read_trace(nodes, pods)
    run = seeded_run(trace.nodes, trace.pods, seed)
    built = build_policy(policy, PolicyContext(rng=run.policy_rng, trace_pods=trace.pods))
    workload = TargetWorkload.from_pods(trace.pods)
    return replay(trace.nodes, run.arrivals, built, workload, tie_rank=run.tie_rank)


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
        outcomes = [replay_once(nodes, pods, policy, args.seed) for _ in range(args.repeats)]
        walls = [outcome.wall_seconds for outcome in outcomes]
        cpus = [outcome.cpu_seconds for outcome in outcomes]
        results[policy] = {
            "median_seconds": statistics.median(walls),
            "runs": walls,
            "median_cpu_seconds": statistics.median(cpus),
            "cpu_runs": cpus,
        }
        print(
            f"{policy:>10}: median {statistics.median(walls):6.2f} s over {len(walls)} runs "
            f"({', '.join(f'{w:.2f}' for w in walls)}), CPU {statistics.median(cpus):.2f} s",
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
                    # which source ran: another tree first on PYTHONPATH measures older code
                    "code_path": str(Path(gpupool.__file__).parent),
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
