"""Governance in the dynamic simulation: idle GPU time given back, and what it does to waiting.

Runs ``gpupool.sim.dynamic.simulation.run_dynamic`` with the governance model
(:mod:`gpupool.sim.dynamic.governance_model`: a stated share of pods linger idle after their
work, a share holds its GPUs past the pool's maxShareDuration) for every load x seed, with the
rules applied (on, once per idle rule of ``--rules``:
:data:`gpupool.sim.dynamic.governance_model.IDLE_RULES`) and not (off, the baseline), at most
``--jobs`` processes at a time. Working pods' usage is bursty
(:mod:`gpupool.sim.dynamic.usage_model`), so false reclaims are possible and counted. Writes one
JSON with every run, the per-cell means and sample standard deviations and the provenance block
(git commit, dirty flag, machine), and prints the table that docs/benchmarks.md shows. The
numbers are counts and GPU-hours of seeded, deterministic runs, not timings.

    .venv/bin/python bench/sim_governance.py --rules history,old --json out/sim_governance.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchlib.sim_options import Sweep, add_sweep_options

from gpupool.sim.dynamic.governance_model import IDLE_RULES, GovernanceModel
from gpupool.sim.dynamic.simulation import DynamicSettings, run_dynamic
from gpupool.sim.policy_file import load_policy
from gpupool.sim.provenance import provenance
from gpupool.sim.trace import read_nodes, read_pods

KEYS = (
    "idle_gpu_hours",
    "idle_gpu_hours_beyond_grace",
    "idle_gpu_hours_reclaimed",
    "reclaimed_beyond_grace_pct",
    "gpu_hours_returned_to_waiting_pods",
    "false_reclaims",
    "governance_warnings",
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


def _row(rho: float, rule: str, cell: dict[str, Any]) -> str:
    def mean(key: str, digits: int = 0) -> str:
        value = cell[key]["mean"]
        return "-" if value is None else f"{value:,.{digits}f}"

    return (
        f"| {rho} | {rule} | {mean('idle_gpu_hours')} | {mean('idle_gpu_hours_beyond_grace')} | "
        f"{mean('idle_gpu_hours_reclaimed')} | {mean('reclaimed_beyond_grace_pct', 1)} | "
        f"{mean('false_reclaims', 1)} | {mean('gpu_hours_returned_to_waiting_pods')} | "
        f"{mean('duration_evictions')} | {mean('accounting_error_pct', 12)} | "
        f"{mean('started')} | {mean('delay_p50_s')} | {mean('delay_p95_s')} |"
    )


def _cell_name(rule: str | None) -> str:
    """``off`` for the baseline, else the idle rule applied."""
    return "off" if rule is None else rule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sweep_options(parser, loads="0.8,1.0", seeds="1,2,3", hours=6.0, warmup=2.0)
    parser.add_argument("--scale", type=float, default=0.25)
    parser.add_argument("--idle-share", type=float, default=0.1)
    parser.add_argument("--overrun-share", type=float, default=0.01)
    parser.add_argument(
        "--rules", default="history", help=f"idle rules applied, of {', '.join(IDLE_RULES)}"
    )
    parser.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run without rules (off); --no-baseline halves the runs when only the rules' "
        "own columns (false reclaims, reclaimed / beyond) are wanted",
    )
    parser.add_argument("--json", type=Path, default=Path("out/bench/sim_governance.json"))
    args = parser.parse_args()

    rules = args.rules.split(",")
    unknown = [rule for rule in rules if rule not in IDLE_RULES]
    if unknown:
        parser.error(f"--rules: {', '.join(unknown)} not among {', '.join(IDLE_RULES)}")
    cells_run: tuple[str | None, ...] = (None, *rules) if args.baseline else tuple(rules)
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
            {
                "idle_share": args.idle_share,
                "overrun_share": args.overrun_share,
                "enforce": rule is not None,
                "rule": rule or rules[0],
            },
        )
        for rho in loads
        for rule in cells_run
        for seed in seeds
    ]
    started_at = provenance()  # the code that runs, not what the tree holds when it ends
    runs = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for run in pool.map(_run, jobs):
            runs.append(run)
            print(
                f"load {run['rho']} rule {run['idle_rule'] if run['governance'] else 'off'} "
                f"seed {run['seed']}: idle {run['idle_gpu_hours']:.0f} GPU-h, reclaimed "
                f"{run['idle_gpu_hours_reclaimed']:.0f}, false reclaims {run['false_reclaims']}, "
                f"wall {run['wall_seconds']:.0f} s",
                flush=True,
            )
    cells = {}
    lines = [
        "| load | idle rule | idle GPU-h | idle GPU-h beyond idle period + grace | "
        "idle GPU-h reclaimed | reclaimed / beyond % | false reclaims | GPU-h to waiting pods | "
        "duration evictions | accounting error % | pods started | delay p50 s | delay p95 s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rho in loads:
        for rule in cells_run:
            selected = [
                r
                for r in runs
                if r["rho"] == rho
                and r["governance"] == (rule is not None)
                and (rule is None or r["idle_rule"] == rule)
            ]
            cell = {key: _stats([r[key] for r in selected]) for key in KEYS}
            cells[f"rho={rho},rule={_cell_name(rule)}"] = cell
            lines.append(_row(rho, _cell_name(rule), cell))
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
