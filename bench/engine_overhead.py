"""What the policy layer costs on the FGD-protocol placement benchmark, and that it changes nothing.

Replays the default openb trace with the published protocol (seed 42, about 10.8k pods on 1,213
nodes) with a placement policy, once straight through ``Scheduler`` and once through
``PolicyEngine`` with no GPUPool or GPUQueue (the implicit default pool and queue, no limits:
routing, quota admission, ordering, the blocked-head and preemption checks all run), alternating,
``--repeats`` times each. Reports the median wall and CPU time of each replay loop (CPU time is
steadier than wall time on a shared machine), the ratios, and checks that both replays
allocated exactly the same GPU milli after every pod.

    .venv/bin/python bench/engine_overhead.py --json out/bench/engine_overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.scheduling.workload import TargetWorkload
from gpupool.sim.machine import machine_description
from gpupool.sim.provenance import provenance
from gpupool.sim.replay.protocol import seeded_run
from gpupool.sim.replay.run import ReplayResult, replay
from gpupool.sim.trace import read_trace

TRACE_DIR = Path("../shared/data/openb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACE_DIR)
    parser.add_argument("--policies", default="fgd,default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    trace = read_trace(
        args.trace_dir / "openb_node_list_gpu_node.csv",
        args.trace_dir / "openb_pod_list_default.csv",
    )
    metric = TargetWorkload.from_pods(trace.pods)
    results: dict[str, Any] = {}
    for name in args.policies.split(","):

        def once(engine: bool, policy_name: str = name) -> ReplayResult:
            run = seeded_run(trace.nodes, trace.pods, args.seed)
            policy = build_policy(policy_name, PolicyContext(run.policy_rng, trace.pods))
            return replay(
                trace.nodes, run.arrivals, policy, metric, run.tie_rank, policy_engine=engine
            )

        walls: dict[str, list[float]] = {"scheduler": [], "engine": []}
        cpu: dict[str, list[float]] = {"scheduler": [], "engine": []}
        same = True
        for _ in range(args.repeats):
            outcome = {}
            for key, engine in (("scheduler", False), ("engine", True)):
                outcome[key] = once(engine)
                cpu[key].append(outcome[key].cpu_seconds)
                walls[key].append(outcome[key].wall_seconds)
            same &= bool(
                np.array_equal(outcome["scheduler"].used_milli, outcome["engine"].used_milli)
            )
        medians = {key: statistics.median(values) for key, values in walls.items()}
        cpu_medians = {key: statistics.median(values) for key, values in cpu.items()}
        ratio = medians["engine"] / medians["scheduler"]
        cpu_ratio = cpu_medians["engine"] / cpu_medians["scheduler"]
        results[name] = {
            "wall_seconds": walls,
            "cpu_seconds": cpu,
            "median_wall": medians,
            "median_cpu": cpu_medians,
            "wall_ratio": ratio,
            "cpu_ratio": cpu_ratio,
            "identical": same,
        }
        print(
            f"{name:>8}: wall scheduler {medians['scheduler']:.2f} s, engine "
            f"{medians['engine']:.2f} s (x{ratio:.3f}); replay CPU "
            f"{cpu_medians['scheduler']:.2f} s vs {cpu_medians['engine']:.2f} s "
            f"(x{cpu_ratio:.3f}); identical placements: {same}",
            flush=True,
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "seed": args.seed,
            "repeats": args.repeats,
            "policies": results,
            **provenance(),
            "machine": machine_description(),
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
