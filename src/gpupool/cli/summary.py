"""``gpupool bench summary``: replay the default openb trace and show what the placement did.

It explains itself: what the cluster and the workload are, how much of the GPU capacity stays
unallocated as load arrives (next to the published FGD result), how each GPU model filled up,
and why the pods that failed did.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from gpupool.cli.explain import run_explain
from gpupool.scheduling.registry import DEFAULT_POLICY, PolicyContext, build_policy
from gpupool.scheduling.workload import TargetWorkload
from gpupool.sim.replay.metrics import bin_by_arrival
from gpupool.sim.replay.protocol import seeded_run
from gpupool.sim.replay.run import replay
from gpupool.sim.trace import read_trace

SHOWN_LOADS = (50, 70, 80, 90, 95, 100, 110, 120, 130)
EXPLAIN_AT_PERCENT = 60.0
PUBLISHED_FGD_AT_100 = 4.77
"""FGD's mean unallocated % at 100% arrived on the default trace (10 seeds, FGD artifact CSV)."""


def run_summary(nodes_path: Path, pods_path: Path, policy_name: str, seed: int) -> None:
    """Replay, then print the cluster, the load curve, per-model fill and failure reasons."""
    console = Console()
    trace = read_trace(nodes_path, pods_path)
    run = seeded_run(trace.nodes, trace.pods, seed)
    arrivals, total_gpus = run.arrivals, run.total_gpus
    policy = build_policy(policy_name, PolicyContext(rng=run.policy_rng, trace_pods=trace.pods))
    shown_name = (
        "default (gpupool, workload learned online)"
        if policy_name == DEFAULT_POLICY
        else policy_name
    )
    console.print(
        f"[bold]gpupool demo[/bold]: {len(trace.nodes)} GPU nodes, {total_gpus} GPUs of "
        f"{len({n.gpu_model for n in trace.nodes})} models; {len(trace.pods)} trace pods "
        f"inflated to {len(arrivals)} arrivals (130% of GPU capacity); policy {shown_name}, "
        f"seed {seed}"
    )
    with console.status("replaying..."):
        result = replay(
            trace.nodes,
            arrivals,
            policy,
            TargetWorkload.from_pods(trace.pods),
            tie_rank=run.tie_rank,
        )
    capacity = result.total_gpus * 1000
    unallocated = bin_by_arrival(
        result.arrived_milli, 100.0 - result.used_milli / capacity * 100.0, result.total_gpus
    )
    frag = bin_by_arrival(
        result.arrived_milli, result.frag_milli / capacity * 100.0, result.total_gpus
    )
    load = Table(title="Unallocated GPU capacity as load arrives")
    for column in ("arrived %", "allocated %", "unallocated %", "unallocated GPUs", "fragment %"):
        load.add_column(column, justify="right")
    for pct in SHOWN_LOADS:
        load.add_row(
            str(pct),
            f"{100 - unallocated[pct]:.2f}",
            f"{unallocated[pct]:.2f}",
            f"{unallocated[pct] * result.total_gpus / 100:.0f}",
            f"{frag[pct]:.2f}",
        )
    console.print(load)
    console.print(
        f"At 100% arrived: {unallocated[100]:.2f}% of GPUs unallocated "
        f"(published FGD, 10-seed mean: {PUBLISHED_FGD_AT_100}%)."
    )

    snapshot = result.snapshot
    models = Table(title="GPU fill by model at the end of the run")
    for column in ("model", "nodes", "GPUs", "allocated %", "fully idle GPUs"):
        models.add_column(column, justify="right")
    for model_id, model in enumerate(snapshot.models):
        rows = snapshot.model_id == model_id
        exists = snapshot.gpu_exists[rows]
        gpus = int(exists.sum())
        free = int(snapshot.gpu_free[rows].sum())
        idle = int(((snapshot.gpu_free[rows] == 1000) & exists).sum())
        models.add_row(
            model, str(int(rows.sum())), str(gpus), f"{100 - free / gpus / 10:.1f}", str(idle)
        )
    console.print(models)

    failures = Table(title=f"{result.failed} of {len(arrivals)} pods found no node")
    failures.add_column("most frequent rejection reason")
    failures.add_column("pods", justify="right")
    for reason, count in result.failure_reasons.most_common(5):
        failures.add_row(reason, str(count))
    console.print(failures)
    per_pod_us = result.wall_seconds / max(len(arrivals), 1) * 1e6
    console.print(
        f"Replay took {result.wall_seconds:.2f} s ({per_pod_us:.0f} µs per pod, "
        f"{np.count_nonzero(snapshot.pods_free < snapshot.pods_capacity)} nodes in use)."
    )
    if policy_name == DEFAULT_POLICY:
        console.print()
        run_explain(nodes_path, pods_path, seed, EXPLAIN_AT_PERCENT, 3, console)
