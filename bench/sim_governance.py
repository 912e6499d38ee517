"""Governance in the dynamic simulation: idle GPU time given back, and what it does to waiting.

Runs ``gpupool.sim.dynamic.run_dynamic`` with the governance model
(:mod:`gpupool.sim.governance_model`: a stated share of pods linger idle after their work, a
share holds its GPUs past the pool's maxShareDuration) for every load x seed, with the rules
applied (on) and not (off, the baseline), at most ``--jobs`` processes at a time. Writes one
JSON with every run, the per-cell means and sample standard deviations and the provenance block
(git commit, dirty flag, machine), and prints the table that docs/benchmarks.md shows.

    .venv/bin/python bench/sim_governance.py --json out/bench/sim_governance.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from gpupool.bench.provenance import provenance
from gpupool.bench.sim_options import Sweep, add_sweep_options
from gpupool.sim.dynamic import DynamicSettings, run_dynamic
from gpupool.sim.governance_model import GovernanceModel
from gpupool.sim.policy_file import load_policy
from gpupool.sim.trace import read_nodes, read_pods

KEYS = (
    "idle_gpu_hours",
    "idle_gpu_hours_reclaimed",
    "gpu_hours_returned_to_waiting_pods",
    "false_reclaims",
    "idle_reclaims",
    "duration_evictions",
    "accounting_error_pct",
    "gpu_utilisation",
    "started",
    "pending_at_end",
    "delay_p50_s",
    "delay_p95_s",
    "wall_seconds",
)


def _weighted(run: dict[str, Any], pct: str) -> float | None:
    """Count-weighted mean over queues of one delay percentile (the sim reports per queue)."""
    parts = [(v[pct], v["count"]) for v in run["queue_delay_s"].values() if v[pct] is not None]
    weight = sum(count for _, count in parts)
    return sum(value * count for value, count in parts) / weight if weight else None


def _run(job: tuple[Path, Path, dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    nodes, pods, settings, model = job
    run = run_dynamic(
        read_nodes(nodes),
        read_pods(pods),
        load_policy(None),
        DynamicSettings(**settings, governance=GovernanceModel(**model)),
    )
    run["delay_p50_s"] = _weighted(run, "p50")
    run["delay_p95_s"] = _weighted(run, "p95")
    return run


def _stats(values: list[Any]) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    return {
        "mean": statistics.fmean(present) if present else None,
        "sd": statistics.stdev(present) if len(present) > 1 else None,
        "per_seed": values,
    }


def _row(rho: float, enforce: bool, cell: dict[str, Any]) -> str:
    def mean(key: str, digits: int = 0) -> str:
        value = cell[key]["mean"]
        return "-" if value is None else f"{value:,.{digits}f}"

    return (
        f"| {rho} | {'on' if enforce else 'off'} | {mean('idle_gpu_hours')} | "
        f"{mean('idle_gpu_hours_reclaimed')} | {mean('gpu_hours_returned_to_waiting_pods')} | "
        f"{mean('false_reclaims')} | {mean('duration_evictions')} | "
        f"{mean('accounting_error_pct', 12)} | {mean('started')} | "
        f"{mean('delay_p50_s')} | {mean('delay_p95_s')} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sweep_options(parser, loads="0.8,1.0", seeds="1,2,3", hours=6.0, warmup=2.0)
    parser.add_argument("--scale", type=float, default=0.25)
    parser.add_argument("--idle-share", type=float, default=0.1)
    parser.add_argument("--overrun-share", type=float, default=0.01)
    parser.add_argument("--json", type=Path, default=Path("out/bench/sim_governance.json"))
    args = parser.parse_args()

    sweep = Sweep.from_args(args)
    nodes, pods, loads, seeds = sweep.nodes, sweep.pods, sweep.loads, sweep.seeds
    jobs = [
        (
            nodes,
            pods,
            {
                "rho": rho,
                "hours": args.hours,
                "warmup_hours": args.warmup,
                "seed": seed,
                "scale": args.scale,
            },
            {"idle_share": args.idle_share, "overrun_share": args.overrun_share, "enforce": on},
        )
        for rho in loads
        for on in (False, True)
        for seed in seeds
    ]
    started_at = provenance()  # the code that runs, not what the tree holds when it ends
    runs = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for run in pool.map(_run, jobs):
            runs.append(run)
            print(
                f"load {run['rho']} governance {run['governance']} seed {run['seed']}: "
                f"idle {run['idle_gpu_hours']:.0f} GPU-h, reclaimed "
                f"{run['idle_gpu_hours_reclaimed']:.0f}, wall {run['wall_seconds']:.0f} s",
                flush=True,
            )
    cells = {}
    lines = [
        "| load | governance | idle GPU-h | idle GPU-h reclaimed | GPU-h to waiting pods | "
        "false reclaims | duration evictions | accounting error % | pods started | "
        "delay p50 s | delay p95 s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rho in loads:
        for on in (False, True):
            selected = [r for r in runs if r["rho"] == rho and r["governance"] == on]
            cell = {key: _stats([r[key] for r in selected]) for key in KEYS}
            cells[f"rho={rho},governance={'on' if on else 'off'}"] = cell
            lines.append(_row(rho, on, cell))
    report = {
        "benchmark": "sim_governance",
        **started_at,
        "settings": {k: v for k, v in vars(args).items() if k != "json"}
        | {"trace_dir": str(args.trace_dir)},
        "cells": cells,
        "runs": runs,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
