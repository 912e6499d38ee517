"""One policy's default-trace replay time, this tree against an older one, in ABBA order.

Each turn runs ``--repeats`` seed-42 replays of ``--policy`` in a fresh process whose
``PYTHONPATH`` puts one source tree first (this one, or ``--old-src``, e.g. a ``git worktree``
of an earlier commit), in the order new, old, old, new, so that a machine that gets busier or
quieter during the run favours neither. The timed part is the replay loop only, built from the
simulator's parts that every tree since the placement benchmark has (``read_trace``,
``seeded_run``, ``build_policy``, ``replay``). Prints the medians and their ratio and writes
JSON with the commit of this tree.

    git worktree add /tmp/old 3dada01
    .venv/bin/python bench/placement_speed_abba.py --old-src /tmp/old/src \
        --json out/bench/placement_speed_abba.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpupool.sim.provenance import provenance

TURN = """
import json, sys
from pathlib import Path
import gpupool
from gpupool.scheduling.registry import PolicyContext, build_policy
from gpupool.scheduling.workload import TargetWorkload
from gpupool.sim.replay.protocol import seeded_run
from gpupool.sim.replay.run import replay
from gpupool.sim.trace import read_trace
nodes, pods, policy, repeats = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
walls, cpus = [], []
for _ in range(repeats):
    trace = read_trace(nodes, pods)
    run = seeded_run(trace.nodes, trace.pods, 42)
    built = build_policy(policy, PolicyContext(rng=run.policy_rng, trace_pods=trace.pods))
    workload = TargetWorkload.from_pods(trace.pods)
    out = replay(trace.nodes, run.arrivals, built, workload, tie_rank=run.tie_rank)
    walls.append(out.wall_seconds)
    cpus.append(out.cpu_seconds)
print(json.dumps({"code": str(Path(gpupool.__file__).parent), "walls": walls, "cpus": cpus}))
"""
"""One turn, run in a child process so that its ``PYTHONPATH`` decides which tree is timed."""


def turn(src: Path, nodes: Path, pods: Path, policy: str, repeats: int) -> dict[str, Any]:
    """The wall and CPU seconds of ``repeats`` replays with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    args = [sys.executable, "-c", TURN, str(nodes), str(pods), policy, str(repeats)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-src", type=Path, required=True, help="the older tree's src/")
    parser.add_argument("--trace-dir", type=Path, default=Path("../shared/data/openb"))
    parser.add_argument("--policy", default="default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not (args.old_src / "gpupool").is_dir():
        parser.error(f"--old-src: no gpupool package in {args.old_src}")
    nodes = args.trace_dir / "openb_node_list_gpu_node.csv"
    pods = args.trace_dir / "openb_pod_list_default.csv"
    trees = {"new": Path(__file__).resolve().parents[1] / "src", "old": args.old_src.resolve()}
    turns: list[dict[str, Any]] = []
    for name in ("new", "old", "old", "new"):
        result = turn(trees[name], nodes, pods, args.policy, args.repeats)
        turns.append({"tree": name, **result})
        print(f"{name}: {', '.join(f'{w:.2f}' for w in result['walls'])} s", flush=True)
    medians = {
        name: statistics.median(w for t in turns if t["tree"] == name for w in t["walls"])
        for name in trees
    }
    ratio = medians["new"] / medians["old"]
    print(f"median new {medians['new']:.2f} s, old {medians['old']:.2f} s: {ratio:.2f}x")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "policy": args.policy,
            "repeats": args.repeats,
            "old_src": str(args.old_src),
            "turns": turns,
            "median_seconds": medians,
            "ratio": ratio,
            **provenance(),
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
