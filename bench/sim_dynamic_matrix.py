"""The dynamic-simulation matrix: loads x seeds x engine variants (defaults, EASY, no backfill...).

Runs ``gpupool.sim.dynamic.simulation.run_dynamic`` on the default openb trace with the bundled
pools-and-queues file for every cell, at most ``--jobs`` processes at a time (default 2: the
machine is shared), and writes one JSON with every run, the per-cell means and sample standard
deviations, the git commit and whether the tree was dirty, and the machine. Prints the table
that docs/benchmarks.md shows.

    .venv/bin/python bench/sim_dynamic_matrix.py --json out/bench/sim_dynamic_matrix.json

Provenance comes from ``gpupool.sim.provenance`` (source and machine), taken at start.
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchlib.sim_options import Sweep, add_sweep_options

from gpupool.policy.spec import ConsolidationMode, ConsolidationSpec
from gpupool.scheduling.decisions import EASY, EngineOptions
from gpupool.sim.dynamic.pod_rules import PodRuleShares
from gpupool.sim.dynamic.simulation import DynamicSettings, run_dynamic
from gpupool.sim.machine import machine_description
from gpupool.sim.policy_file import load_policy
from gpupool.sim.provenance import provenance
from gpupool.sim.trace import read_nodes, read_pods

VARIANTS: dict[str, EngineOptions] = {
    "all_on": EngineOptions(),
    "no_backfill": replace(EngineOptions(), backfill=False),
    "no_preemption": replace(EngineOptions(), preemption=False),
    "no_gang_reservations": replace(EngineOptions(), gang_reservations=False),
    "consolidation": EngineOptions(),
    "consolidation_32": EngineOptions(),
    "easy": EASY,
    "follow": replace(EASY, reservations_follow_pods=True),
    "protect_large": replace(
        EASY,
        reservations_per_pool=16,
        reservations_follow_pods=True,
        reserve_above_units=1000,
        remaining_by_age=True,
        backfill_quantile=0.9,
    ),
}
"""``all_on``: the engine's defaults (large pods protected); ``no_gang_reservations``: the same
with a gang that cannot start whole holding no reservation (pods behind it start where they
fit); ``easy``: one reservation per pool
(EASY backfill, the earlier default and the baseline); ``follow``: EASY whose reservation stays
with its waiting pod once its start passed; ``protect_large``: the settings of round three,
spelled out (16 followed reservations for pods above one GPU, ends expected by age, a pod
backfilled onto a reserved node only if its p90 runtime ends before the reserved start), so
the commands of docs/benchmarks.md section 7 measure the same thing whatever the defaults."""

CONSOLIDATING = {
    "consolidation": ConsolidationSpec(mode=ConsolidationMode.ON, max_moves_per_hour=8),
    "consolidation_32": ConsolidationSpec(mode=ConsolidationMode.ON, max_moves_per_hour=32),
}
"""Variants whose every pool consolidates (:mod:`gpupool.sim.consolidating`): ``Enabled`` with 8
and with 32 moves per pool and hour (32 is the CRD's default, chosen by this matrix: 8 was a
tie), the CRD's defaults otherwise; the engine's defaults too, so ``all_on`` is their baseline."""

OVERRIDES = {
    "reservations": "reservations_per_pool",
    "follow": "reservations_follow_pods",
    "reserve_above_units": "reserve_above_units",
    "remaining_by_age": "remaining_by_age",
    "backfill_quantile": "backfill_quantile",
}
"""Command-line option (dest) to the engine option it sets in every variant run."""


def _run(job: tuple[Path, Path, str, dict[str, Any]]) -> dict[str, Any]:
    nodes_path, pods_path, variant, settings = job
    options = EngineOptions(**settings.pop("engine"))
    settings["pod_rules"] = PodRuleShares(**settings["pod_rules"])
    if variant in CONSOLIDATING:
        settings["consolidation"] = CONSOLIDATING[variant]
    report = run_dynamic(
        read_nodes(nodes_path),
        read_pods(pods_path),
        load_policy(None),
        DynamicSettings(**settings, engine=options),
    )
    return {**report, "variant": variant}


def _stats(values: list[float | None]) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    return {
        "mean": statistics.fmean(present) if present else None,
        "sd": statistics.stdev(present) if len(present) > 1 else None,
        "per_seed": values,
    }


def _cell(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def delay(run: dict[str, Any], group: str, name: str, pct: str) -> float | None:
        value: float | None = run[group].get(name, {}).get(pct)
        return value

    cell: dict[str, Any] = {
        key: _stats([run[key] for run in runs])
        for key in (
            "gpu_utilisation",
            "jain_fairness",
            "preemptions",
            "gpu_hours_lost_to_preemption",
            "guarantee_shortfall_gpu_hours",
            "quota_overrun_max",
            "backfilled",
            "pending_at_end",
            "wall_seconds",
            "gangs",
            "gang_wait_p50_s",
            "gang_wait_p95_s",
            "partial_gang_gpu_hours",
        )
    }
    cell["consolidation"] = {
        key: _stats([run["consolidation"][key] for run in runs])
        for key in (
            "plans",
            "moves",
            "moves_per_hour",
            "gpu_hours_lost_to_moves",
            "gpu_hours_gained_by_model",
            "least_plan_margin_gpu_hours",
        )
    }
    sizes = sorted({size for run in runs for size in run["queue_delay_s_by_size"]})
    queues = sorted({name for run in runs for name in run["queue_delay_s"]})
    cell["queue_delay_s_by_size"] = {
        size: {pct: _stats([delay(r, "queue_delay_s_by_size", size, pct) for r in runs])
               for pct in ("p50", "p95")}
        for size in sizes
    }  # fmt: skip
    levels = sorted({level for run in runs for level in run["queue_delay_s_by_priority"]})
    cell["queue_delay_s_by_priority"] = {
        level: {pct: _stats([delay(r, "queue_delay_s_by_priority", level, pct) for r in runs])
                for pct in ("p50", "p95")}
        for level in levels
    }  # fmt: skip
    cell["queue_delay_s"] = {
        name: {pct: _stats([delay(r, "queue_delay_s", name, pct) for r in runs])
               for pct in ("p50", "p95")}
        for name in queues
    }  # fmt: skip
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sweep_options(parser, loads="0.8,1.0,1.2", seeds="1,2,3,4,5", hours=8.0, warmup=3.0)
    parser.add_argument("--json", type=Path, default=Path("out/bench/sim_dynamic_matrix.json"))
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="Comma-separated subset of the variants."
    )
    parser.add_argument(
        "--reservations",
        type=int,
        default=None,
        help="Reservations per pool in every variant (default: each variant's).",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="Reservations follow their pods in every variant.",
    )
    parser.add_argument(
        "--reserve-above-units",
        type=int,
        default=None,
        help="Only blocked pods asking for more milli-units hold a reservation, every variant.",
    )
    parser.add_argument(
        "--remaining-by-age",
        action="store_true",
        help="Reservations expect running pods to end after their remaining runtime by age.",
    )
    parser.add_argument(
        "--backfill-quantile",
        type=float,
        default=None,
        help="Quantile of a pod's runtime that must end before a reserved start (default: mean).",
    )
    parser.add_argument(
        "--anti-affinity",
        type=float,
        default=0.0,
        help="Share of the GPU pods with required pod anti-affinity "
        "(gpupool.sim.dynamic.pod_rules).",
    )
    parser.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="Share of the GPU pods with a DoNotSchedule topology spread "
        "(gpupool.sim.dynamic.pod_rules).",
    )
    parser.add_argument(
        "--gangs",
        type=float,
        default=0.0,
        help="Share of the multi-GPU pods arriving as gangs (gpupool.sim.dynamic.gang_arrivals).",
    )
    args = parser.parse_args()
    try:
        rules = PodRuleShares(args.anti_affinity, args.spread)
    except ValueError as error:
        parser.error(str(error))
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {', '.join(sorted(unknown))}")
    override = {
        field: getattr(args, dest)
        for dest, field in OVERRIDES.items()
        if getattr(args, dest) not in (None, False)
    }
    variants = {
        name: asdict(replace(VARIANTS[name], **override))
        for name in VARIANTS
        if name in args.variants.split(",")
    }

    sweep = Sweep.from_args(args)
    nodes, pods, loads, seeds = sweep.nodes, sweep.pods, sweep.loads, sweep.seeds
    jobs = [
        (
            nodes,
            pods,
            variant,
            {
                "rho": rho,
                "hours": args.hours,
                "warmup_hours": args.warmup,
                "seed": seed,
                "engine": flags,
                "pod_rules": asdict(rules),
                "gangs": args.gangs,
            },
        )
        for rho in loads
        for variant, flags in variants.items()
        for seed in seeds
    ]
    started_at = provenance()  # the code that runs, not what the tree holds when it ends

    def write(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The report of the runs done so far (written after each: a stopped sweep loses none)."""
        cells = {
            f"{rho}/{variant}": _cell(picked)
            for rho in loads
            for variant in variants
            if (picked := [r for r in runs if r["rho"] == rho and r["variant"] == variant])
        }
        report = {
            "trace": "openb_pod_list_default.csv",
            "loads": loads,
            "seeds": seeds,
            "hours": args.hours,
            "warmup_hours": args.warmup,
            "variants": variants,
            "pod_rules": asdict(rules),
            "gangs": args.gangs,
            "complete": len(runs) == len(jobs),
            "cells": cells,
            "runs": runs,
            **started_at,
            "machine": machine_description(),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
        return cells

    runs: list[dict[str, Any]] = []
    cells: dict[str, dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for done in as_completed([pool.submit(_run, job) for job in jobs]):
            run = done.result()
            runs.append(run)
            print(
                f"load {run['rho']} {run['variant']} reservations {run['reservations']} "
                f"seed {run['seed']}: util {run['gpu_utilisation']:.1f}% "
                f"wall {run['wall_seconds']:.0f} s",
                flush=True,
            )
            cells = write(runs)
    print(table(cells))


def _fmt(cell: dict[str, Any], digits: int = 1) -> str:
    if cell["mean"] is None:
        return "n/a"
    sd = f" ± {cell['sd']:.{digits}f}" if cell["sd"] is not None else ""
    return f"{cell['mean']:.{digits}f}{sd}"


def table(cells: dict[str, dict[str, Any]]) -> str:
    """The markdown table of docs/benchmarks.md."""
    lines = [
        "| load | mechanisms | GPU util % | small p95 delay s | large p95 delay s | "
        "urgent p95 delay s | guarantee shortfall GPU-h | Jain | preemptions | GPU-h lost | "
        "quota overrun | medium p95 delay s | moves per hour | GPU-h lost to moves |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, cell in cells.items():
        rho, variant = key.split("/")
        sizes = cell["queue_delay_s_by_size"]
        small = _fmt(sizes["small"]["p95"], 0) if "small" in sizes else "n/a"
        large = _fmt(sizes["large"]["p95"], 0) if "large" in sizes else "n/a"
        urgent = cell["queue_delay_s_by_priority"].get("urgent")
        urgent_p95 = _fmt(urgent["p95"], 0) if urgent else "n/a"
        moves = cell["consolidation"]
        lines.append(
            f"| {rho} | {variant} | {_fmt(cell['gpu_utilisation'])} | {small} | {large} | "
            f"{urgent_p95} | {_fmt(cell['guarantee_shortfall_gpu_hours'])} | "
            f"{_fmt(cell['jain_fairness'], 3)} | {_fmt(cell['preemptions'], 0)} | "
            f"{_fmt(cell['gpu_hours_lost_to_preemption'])} | "
            f"{cell['quota_overrun_max']['mean']:g} | "
            f"{_fmt(sizes['medium']['p95'], 0) if 'medium' in sizes else 'n/a'} | "
            f"{_fmt(moves['moves_per_hour'])} | {_fmt(moves['gpu_hours_lost_to_moves'], 2)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
