"""Every policy on every provided openb trace, 10 seeds each, next to the published numbers.

For each (trace, policy) it runs the published protocol over the seeds (in parallel processes),
keeps the per-run JSON under ``--out`` (an existing one is reused unless ``--force``), and
writes:

* ``matrix.json``: ours and the authors' mean and sd of unallocated % at arrived 100 and 130,
  the fidelity verdict (ours within max(2 sd, 0.5 pp) of the published mean at 100), and the
  median wall time per run;
* ``matrix.md``: the same as Markdown tables, pasted into docs/benchmarks.md, and gpupool's
  ``default`` against our FGD with the rule of issue 19: ``default``'s mean at arrived 100
  no worse than FGD's mean plus one FGD sd (``versus_fgd`` in the JSON);
* ``default_unallocated.png``: unallocated % against arrived load on the default trace.

    .venv/bin/python bench/placement_matrix.py --out out/bench/matrix
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any

from gpupool.cli.options import parse_seeds
from gpupool.sim.machine import usable_cores
from gpupool.sim.provenance import provenance
from gpupool.sim.replay.plot import plot_unallocated
from gpupool.sim.replay.sweep import (
    PlacementJob,
    placement_report,
    run_seeds,
)

TRACES = (
    "default",
    "gpushare40",
    "gpushare80",
    "multigpu20",
    "multigpu40",
    "gpuspec10",
    "gpuspec33",
    "cpu050",
    "cpu200",
)
POLICIES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "default")
PUBLISHED_NAMES = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "clustering": "03-GpuClustering",
    "packing": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}
LOADS = ("100", "130")


def published_summary(path: Path) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(trace, policy, arrived %) to the authors' (mean, sd) of unallocated %."""
    by_name = {value: key for key, value in PUBLISHED_NAMES.items()}
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            policy = by_name.get(row["sc_policy"])
            if policy is None:
                continue
            trace = row["workload"].removeprefix("openb_pod_list_")
            key = (trace, policy, row["arrived_pct"])
            out[key] = (float(row["unalloc_pct_mean"]), float(row["unalloc_pct_sd"]))
    return out


def run_cell(
    trace_dir: Path, trace: str, policy: str, seeds: list[int], out: Path, force: bool
) -> dict[str, Any]:
    """Run (or reuse) one trace x policy cell and return its report."""
    path = out / f"{trace}__{policy}.json"
    if path.exists() and not force:
        report: dict[str, Any] = json.loads(path.read_text())
        if report["seeds"] == seeds:
            return report
    jobs = [
        PlacementJob(
            trace_dir / "openb_node_list_gpu_node.csv",
            trace_dir / f"openb_pod_list_{trace}.csv",
            policy,
            seed,
        )
        for seed in seeds
    ]
    started = time.perf_counter()
    report = placement_report(jobs, run_seeds(jobs, min(usable_cores(), len(jobs))))
    path.write_text(json.dumps(report, allow_nan=False) + "\n")
    print(
        f"{trace:>11} {policy:>10}: unallocated@100 {report['unallocated_pct']['100']['mean']}"
        f" ({time.perf_counter() - started:.0f} s)",
        flush=True,
    )
    return report


def versus_fgd(default: dict[str, Any], fgd: dict[str, Any]) -> str:
    """``ok`` when ``default``'s mean is at most FGD's mean plus one FGD sd, else ``WORSE``."""
    return "ok" if default["ours_mean"] <= fgd["ours_mean"] + fgd["ours_sd"] else "WORSE"


def versus_fgd_table(index: dict[tuple[str, str], dict[str, Any]], traces: list[str]) -> list[str]:
    """The ``default`` policy next to our FGD and the published FGD, at arrived 100 and 130."""
    lines = [
        "gpupool `default` against FGD, same seeds (unallocated %, mean ± sd, lower is better;"
        " rule at 100: default <= our FGD mean + 1 sd)\n",
        "| trace | FGD published @100 | FGD ours @100 | default @100 | change | rule |"
        " FGD ours @130 | default @130 | change |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for trace in traces:
        fgd, ours = index[(trace, "fgd")], index[(trace, "default")]
        published = fgd["100"]
        row = [trace, f"{published['published_mean']:.2f}±{published['published_sd']:.2f}"]
        for load in LOADS:
            theirs, mine = fgd[load], ours[load]
            row += [
                f"{theirs['ours_mean']:.2f}±{theirs['ours_sd']:.2f}",
                f"{mine['ours_mean']:.2f}±{mine['ours_sd']:.2f}",
                f"{(mine['ours_mean'] - theirs['ours_mean']) / theirs['ours_mean'] * 100:+.1f}%",
            ]
            if load == "100":
                row.append(versus_fgd(mine, theirs))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines


def verdict(ours: float | None, published: tuple[float, float] | None) -> str:
    """``ok`` when ours is within max(2 sd, 0.5 pp) of the published mean, else ``OFF``."""
    if ours is None or published is None:
        return "n/a"
    mean, sd = published
    return "ok" if abs(ours - mean) <= max(2 * sd, 0.5) else "OFF"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=Path("../shared/data/openb"))
    parser.add_argument(
        "--published",
        type=Path,
        default=Path("../shared/data/fgd-expected-results/summary_by_arrival.csv"),
    )
    parser.add_argument("--out", type=Path, default=Path("out/bench/matrix"))
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--force", action="store_true", help="rerun cells that have JSON")
    args = parser.parse_args()

    seeds = parse_seeds(args.seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    published = published_summary(args.published)
    traces = args.traces.split(",")
    policies = args.policies.split(",")
    cells: list[dict[str, Any]] = []
    curves: dict[str, list[list[float]]] = {}
    for trace in traces:
        for policy in policies:
            report = run_cell(args.trace_dir, trace, policy, seeds, args.out, args.force)
            cell: dict[str, Any] = {"trace": trace, "policy": policy}
            for load in LOADS:
                ours = report["unallocated_pct"][load]
                theirs = published.get((trace, policy, load))
                cell[load] = {
                    "ours_mean": ours["mean"],
                    "ours_sd": ours["sd"],
                    "published_mean": theirs[0] if theirs else None,
                    "published_sd": theirs[1] if theirs else None,
                    "verdict": verdict(ours["mean"], theirs),
                }
            cell["median_wall_seconds"] = statistics.median(report["wall_seconds_per_run"])
            cells.append(cell)
            if trace == "default":
                curves[policy] = report["curves"]["unallocated_pct"]
    by_cell = {(cell["trace"], cell["policy"]): cell for cell in cells}
    for trace in traces:
        if (trace, "default") in by_cell and (trace, "fgd") in by_cell:
            by_cell[(trace, "default")]["versus_fgd"] = versus_fgd(
                by_cell[(trace, "default")]["100"], by_cell[(trace, "fgd")]["100"]
            )
    summary = {"seeds": seeds, "cells": cells, **provenance()}
    (args.out / "matrix.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "matrix.md").write_text(markdown(cells, traces, policies))
    if curves:
        plot_unallocated(
            curves,
            args.out / "default_unallocated.png",
            f"default trace: unallocated GPUs, median and IQR of {len(seeds)} seeds",
        )
    print((args.out / "matrix.md").read_text())


def markdown(cells: list[dict[str, Any]], traces: list[str], policies: list[str]) -> str:
    """Tables: ours / published (mean ± sd) at arrived 100 and 130, then default against FGD."""
    index = {(cell["trace"], cell["policy"]): cell for cell in cells}
    lines: list[str] = []
    for load in LOADS:
        lines.append(f"Unallocated GPU % at arrived = {load}: ours / published (mean ± sd)\n")
        lines.append("| trace | " + " | ".join(policies) + " |")
        lines.append("|---" * (len(policies) + 1) + "|")
        for trace in traces:
            row = [trace]
            for policy in policies:
                cell = index[(trace, policy)][load]
                text = f"{cell['ours_mean']:.2f}±{cell['ours_sd']:.2f}"
                if cell["published_mean"] is not None:
                    text += f" / {cell['published_mean']:.2f}±{cell['published_sd']:.2f}"
                    if load == "100" and cell["verdict"] != "ok":
                        text += f" **{cell['verdict']}**"
                row.append(text)
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    if "default" in policies and "fgd" in policies:
        lines += versus_fgd_table(index, traces)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
